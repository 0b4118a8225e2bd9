"""What the upstream lacks, the proxy supplies: aggregation, synthesized streams, stop sequences, fan-out.

The upstream is a small real Starlette server with the limits of seed 002 and Q70-Q73/Q76: it can only
stream (or only answer JSON), ignores ``stop`` and ``n``, and rejects prompt arrays.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.servers import run_asgi

from .conftest import judge, run_proxy

pytestmark = pytest.mark.slow

WORDS = ["The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."]
seen: list[dict[str, Any]] = []


def _text_for(body: dict[str, Any]) -> list[str]:
    prompt = body.get("prompt")
    words = [f"[{prompt}]", *WORDS] if isinstance(prompt, str) and prompt.startswith("p") else WORDS
    return [prompt, *words] if body.get("echo") is True and isinstance(prompt, str) else words


async def _complete(request: Request) -> Response:
    body = await request.json()
    seen.append(body)
    chat = request.url.path.endswith("chat/completions")
    if isinstance(body.get("prompt"), list):
        return JSONResponse({"error": "prompt arrays are not supported"}, status_code=400)
    words = _text_for(body)
    mode = body.get("model")
    stream = mode == "stream-only" or (mode != "json-only" and body.get("stream"))
    if not stream:
        text = "".join(words)
        choice = {"index": 0, "finish_reason": "stop"}
        choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        return JSONResponse({"id": "", "object": "x", "created": 1, "model": mode, "choices": [choice]})

    async def events() -> AsyncIterator[bytes]:
        for word in words:
            part = {"delta": {"content": word}} if chat else {"text": word}
            chunk = {
                "id": "",
                "model": mode,
                "created": 1,
                "choices": [{"index": 0, "finish_reason": None, **part}],
            }
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
            await asyncio.sleep(0.001)
        end = {"delta": {}} if chat else {"text": ""}
        final = {
            "id": "",
            "model": mode,
            "created": 1,
            "choices": [{"index": 0, "finish_reason": "stop", **end}],
        }
        yield b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n"

    async def burst() -> AsyncIterator[bytes]:
        yield b"".join([event async for event in events()])  # the whole stream in one write

    return StreamingResponse(burst() if mode == "burst" else events(), media_type="text/event-stream")


APP = Starlette(
    routes=[
        Route("/v1/chat/completions", _complete, methods=["POST"]),
        Route("/v1/completions", _complete, methods=["POST"]),
    ]
)


@pytest.fixture(scope="module")
def proxy_url() -> Iterator[str]:
    with run_asgi(APP) as upstream, run_proxy(upstream, upstream_kind="openai") as url:
        yield url


def _post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    response = httpx.post(url + path, json=body, timeout=20)
    verdict = judge(response, path, body)
    assert verdict.errors == [], ([f.message for f in verdict.errors], response.text[:1500])
    return response


CHAT = {"messages": [{"role": "user", "content": "hi there, you"}]}


def test_stream_false_on_a_stream_only_upstream_is_aggregated(proxy_url: str) -> None:
    client = openai.OpenAI(base_url=proxy_url + "/v1", api_key="x", max_retries=0)
    reply = client.chat.completions.create(model="stream-only", stream=False, **CHAT)  # type: ignore[call-overload]
    assert reply.choices[0].message.content == "".join(WORDS)
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == len(WORDS)
    # No tokenizer on this upstream: an estimate, never 0 for a prompt that has some: its pieces (hi,
    # there, the comma, you) and a template's markup guessed, 3 + 5 a message (template_overhead.py).
    assert reply.usage.prompt_tokens == 4 + 3 + 5
    assert reply.usage.total_tokens == 4 + 3 + 5 + len(WORDS)
    _post(proxy_url, "/v1/completions", {"model": "stream-only", "prompt": "x", "stream": False})


def test_stream_true_on_a_json_only_upstream_is_synthesized(proxy_url: str) -> None:
    client = openai.OpenAI(base_url=proxy_url + "/v1", api_key="x", max_retries=0)
    chunks = list(
        client.chat.completions.create(  # type: ignore[call-overload]
            model="json-only", stream=True, stream_options={"include_usage": True}, **CHAT
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "".join(WORDS)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    body = {"model": "json-only", "prompt": "x", "stream": True}
    assert _post(proxy_url, "/v1/completions", body).text.endswith("data: [DONE]\n\n")


@pytest.mark.parametrize("stream", [True, False])
def test_stop_sequences_the_upstream_ignores_are_enforced_across_chunks(proxy_url: str, stream: bool) -> None:
    # " brown fox" spans two upstream chunks (" brown", " fox").
    body = {"model": "m", "prompt": "x", "stream": stream, "stop": ["n fo", "zzz"]}
    response = _post(proxy_url, "/v1/completions", body)
    if stream:
        events = [json.loads(e[6:]) for e in response.text.split("\n\n") if e.startswith("data: {")]
        text = "".join(c["choices"][0]["text"] for c in events if c["choices"])
        assert events[-1]["choices"][0]["finish_reason"] == "stop"
    else:
        text = response.json()["choices"][0]["text"]
    assert text == "The quick brow"


def test_stop_cancels_the_upstream_stream(proxy_url: str) -> None:
    seen.clear()
    body = {"model": "m", "messages": CHAT["messages"], "stream": True, "stop": "quick"}
    response = _post(proxy_url, "/v1/chat/completions", body)
    events = [json.loads(e[6:]) for e in response.text.split("\n\n") if e.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in events) == "The "
    assert seen[-1]["stop"] == "quick"  # still passed on: an upstream that honours it stops earlier


def _fan_out(proxy_url: str, body: dict[str, Any], judged: bool) -> tuple[dict[int, str], dict[str, Any]]:
    seen.clear()
    stream = body["stream"]
    if stream:
        body = {**body, "stream_options": {"include_usage": True}}
    response = (
        _post(proxy_url, "/v1/completions", body)
        if judged
        else httpx.post(proxy_url + "/v1/completions", json=body, timeout=20)
    )
    assert all(s.get("n", 1) == 1 and isinstance(s["prompt"], str) for s in seen)
    texts: dict[int, str] = {}
    if stream:
        events = [json.loads(e[6:]) for e in response.text.split("\n\n") if e.startswith("data: {")]
        for event in events:
            for choice in event["choices"]:
                texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
        assert len({e["id"] for e in events}) == 1
        return texts, events[-1]["usage"]
    payload = response.json()
    return {c["index"]: c["text"] for c in payload["choices"]}, payload["usage"]


@pytest.mark.parametrize("stream", [True, False])
def test_n_fans_out_with_indexed_choices_and_summed_usage(proxy_url: str, stream: bool) -> None:
    texts, usage = _fan_out(proxy_url, {"model": "m", "prompt": "x", "n": 3, "stream": stream}, judged=True)
    assert len(seen) == 3
    assert texts == {0: "".join(WORDS), 1: "".join(WORDS), 2: "".join(WORDS)}
    # Streams count chunks; this upstream has no tokenizer, so JSON bodies are estimated (words).
    assert usage["completion_tokens"] == 3 * len(WORDS) if stream else usage["completion_tokens"] >= 3
    assert usage["prompt_tokens"] == 1  # one prompt ("x", one word) read by all three samples: once


def test_max_completion_tokens_reaches_upstreams_that_read_only_max_tokens(proxy_url: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3}
    seen.clear()
    httpx.post(proxy_url + "/v1/chat/completions", json=body, timeout=20)  # (this upstream reads neither)
    assert (seen[-1]["max_completion_tokens"], seen[-1]["max_tokens"]) == (3, 3)


def test_chat_logprobs_without_top_logprobs_are_asked_for_with_top_logprobs_0(proxy_url: str) -> None:
    """llama-cpp-python sends no chat logprobs for ``logprobs: true`` alone."""
    seen.clear()
    for asked, sent in (({}, 0), ({"top_logprobs": 3}, 3)):
        body = {"model": "m", **CHAT, "logprobs": True, **asked}
        # A fresh proxy each: this upstream answers without logprobs, which the proxy learns (and then
        # refuses logprobs before sending: test_llamacpp_ik.py).
        with run_asgi(APP) as upstream, run_proxy(upstream, upstream_kind="openai") as url:
            refused = httpx.post(url + "/v1/chat/completions", json=body, timeout=20)
        assert refused.json()["error"]["param"] == "logprobs"
        assert seen[-1]["top_logprobs"] == sent


@pytest.mark.parametrize("stream", [True, False])
def test_stop_sequences_do_not_cut_the_echoed_prompt(proxy_url: str, stream: bool) -> None:
    """Stop sequences end the generated text: one inside the prompt an echo repeats does not count."""
    body = {"model": "m", "prompt": ["a dog", "my dog"], "echo": True, "stop": ["dog"], "stream": stream}
    texts, _ = _fan_out(proxy_url, body, judged=True)
    generated = "".join(WORDS).split("dog")[0]  # the generated "dog" still stops it
    assert texts == {0: "a dog" + generated, 1: "my dog" + generated}


@pytest.mark.parametrize("stream", [True, False])
def test_max_tokens_0_scores_the_prompt_without_generating(proxy_url: str, stream: bool) -> None:
    """llama-cpp-python reads max_tokens 0 as no limit: the upstream is asked for one token, not sent."""
    body = {"model": "m", "prompt": "a dog", "echo": True, "max_tokens": 0, "stream": stream}
    texts, usage = _fan_out(proxy_url, body, judged=True)
    assert texts == {0: "a dog"}
    assert usage["completion_tokens"] == 0
    assert usage["total_tokens"] == usage["prompt_tokens"]
    assert seen[-1]["max_tokens"] == 1
    finish = httpx.post(proxy_url + "/v1/completions", json={**body, "stream": False}, timeout=20)
    assert finish.json()["choices"][0]["finish_reason"] == "length"


def test_a_streamed_echo_is_asked_for_whole(proxy_url: str) -> None:
    """llama-cpp-python streams no echo: the prompt is asked for in a JSON answer and streamed from it."""
    body = {"model": "m", "prompt": "a dog", "echo": True, "stream": True}
    texts, usage = _fan_out(proxy_url, body, judged=True)
    assert texts == {0: "a dog" + "".join(WORDS)}
    assert usage["completion_tokens"] > 0
    assert [s.get("stream", False) for s in seen] == [False]


def test_each_fanned_out_sample_gets_a_seed_of_its_own(proxy_url: str) -> None:
    """One seed for all would make the n samples one sample n times (a seeded upstream repeats itself)."""
    body = {"model": "m", "prompt": ["p0", "p1"], "n": 2, "seed": 7, "stream": False}
    _fan_out(proxy_url, body, judged=True)
    assert sorted((s["prompt"], s["seed"]) for s in seen) == [("p0", 7), ("p0", 8), ("p1", 7), ("p1", 8)]
    # llama.cpp's "random" (-1) stays random in every sample; the sum stays a 64-bit integer.
    for seed, seeds in ((-1, [-1, -1, -1]), (2**63 - 1, [0, 1, 2**63 - 1])):
        _fan_out(proxy_url, {"model": "m", "prompt": "x", "n": 3, "seed": seed, "stream": False}, judged=True)
        assert sorted(s["seed"] for s in seen) == seeds


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_n_with_usage_has_one_usage_chunk_last_when_a_whole_stream_comes_in_one_read(
    proxy_url: str, path: str
) -> None:
    body: dict[str, Any] = {
        "model": "burst",
        "n": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body |= {"prompt": "x"} if path == "/v1/completions" else CHAT
    for _ in range(5):  # which sample's stream is read first, and how, varies: several rounds
        response = _post(proxy_url, path, body)  # judged: usage-not-last, usage-repeated
        events = [json.loads(e[6:]) for e in response.text.split("\n\n") if e.startswith("data: {")]
        assert [i for i, e in enumerate(events) if not e["choices"]] == [len(events) - 1]
        assert events[-1]["usage"]["completion_tokens"] == 3 * len(WORDS)


@pytest.mark.parametrize("stream", [True, False])
def test_prompt_arrays_fan_out_in_prompt_order(proxy_url: str, stream: bool) -> None:
    texts, usage = _fan_out(proxy_url, {"model": "m", "prompt": ["p0", "p1"], "stream": stream}, judged=True)
    assert texts[0].startswith("[p0]")
    assert texts[1].startswith("[p1]")
    assert len(texts) == 2
    assert usage["completion_tokens"] == 2 * (len(WORDS) + 1) if stream else usage["completion_tokens"] >= 2
    assert usage["prompt_tokens"] == 2  # two prompts of one word each


@pytest.mark.parametrize("stream", [True, False])
def test_prompt_arrays_times_n_index_prompt_major(proxy_url: str, stream: bool) -> None:
    body = {"model": "m", "prompt": ["p0", "p1"], "n": 2, "stream": stream}
    texts, usage = _fan_out(proxy_url, body, judged=True)
    assert len(seen) == 4
    assert sorted(texts) == [0, 1, 2, 3]
    assert texts[0].startswith("[p0]")
    assert texts[1].startswith("[p0]")
    assert texts[2].startswith("[p1]")
    assert texts[3].startswith("[p1]")
    assert usage["completion_tokens"] == 4 * (len(WORDS) + 1) if stream else usage["completion_tokens"] >= 4
    assert usage["prompt_tokens"] == 2  # two prompts, each counted once for its two samples
