"""One reasoning field out (``--reasoning-field``: ``reasoning_content`` by default, or ``reasoning``),
whichever name the upstream sends (Q39: vLLM and Ollama ``reasoning``, llama.cpp ``reasoning_content``);
and assistant messages sent back under either name reach the upstream under the one it reads."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from conformance.request_info import RequestInfo
from proxy.adapters import LlamaCppAdapter, OpenAIAdapter
from proxy.adapters.base import messages_with_reasoning_as
from proxy.normalizer import StreamNormalizer, normalize_body
from proxy.normalizer.repairs import Repairs
from proxy.reshape.aggregate import Aggregator
from proxy.upstream_traits import UpstreamTraits
from tests.proxy.conftest import run_proxy, upstream_answer
from tests.support.servers import run_asgi

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Why?"}]}


def _message(key: str) -> dict[str, Any]:
    return {"role": "assistant", "content": "Because.", key: "Let me think."}


@pytest.mark.parametrize("upstream_key", ["reasoning_content", "reasoning"])
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_a_body_sends_the_reasoning_in_the_configured_field(upstream_key: str, field: str) -> None:
    answer = upstream_answer(True, [{"index": 0, "message": _message(upstream_key), "finish_reason": "stop"}])
    info = RequestInfo.from_body("chat", CHAT, reasoning_field=field)
    message = normalize_body(answer, info, repairs=Repairs())["choices"][0]["message"]
    assert message[field] == "Let me think."
    other = "reasoning" if field == "reasoning_content" else "reasoning_content"
    assert other not in message


@pytest.mark.parametrize("upstream_key", ["reasoning_content", "reasoning"])
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_a_stream_sends_the_reasoning_in_the_configured_field(upstream_key: str, field: str) -> None:
    info = RequestInfo.from_body("chat", {**CHAT, "stream": True}, reasoning_field=field)
    normalizer = StreamNormalizer(info)
    deltas = [
        {"role": "assistant", upstream_key: "Let me "},
        {upstream_key: "think."},
        {"content": "Because."},
    ]
    out: list[dict[str, Any]] = []
    for delta in deltas:
        out += normalizer.feed_payload(
            upstream_answer(True, [{"index": 0, "delta": delta, "finish_reason": None}])
        )
    normalizer.upstream_done = True
    out += normalizer.feed_payload(
        upstream_answer(True, [{"index": 0, "delta": {}, "finish_reason": "stop"}])
    )
    out += normalizer.close()
    sent = [c["choices"][0]["delta"] for c in out if c["choices"]]
    assert "".join(d.get(field, "") for d in sent) == "Let me think."
    other = "reasoning" if field == "reasoning_content" else "reasoning_content"
    assert not any(other in d for d in sent)
    assert normalizer.repairs["Q39"] == (2 if upstream_key == "reasoning" else 0)
    aggregator = Aggregator(info)
    for chunk in out:
        aggregator.add(chunk)
    assert aggregator.result(None)["choices"][0]["message"][field] == "Let me think."


def test_an_upstream_that_sends_both_names_has_its_reasoning_sent_once() -> None:
    info = RequestInfo.from_body("chat", {**CHAT, "stream": True})
    normalizer = StreamNormalizer(info)
    delta = {"role": "assistant", "reasoning": "Hm.", "reasoning_content": "Hm."}
    out = normalizer.feed_payload(
        upstream_answer(True, [{"index": 0, "delta": delta, "finish_reason": None}])
    )
    assert out[0]["choices"][0]["delta"]["reasoning_content"] == "Hm."
    assert normalizer.completion_tokens() == 1


def test_assistant_messages_are_renamed_to_the_name_the_upstream_reads() -> None:
    body = {**CHAT, "messages": [*CHAT["messages"], _message("reasoning"), {"role": "user", "content": "Ok"}]}
    renamed = messages_with_reasoning_as(body, "reasoning_content")
    assert renamed["messages"][1] == _message("reasoning_content")
    assert body["messages"][1] == _message("reasoning")  # the client's body is not changed
    assert messages_with_reasoning_as(renamed, "reasoning")["messages"][1] == _message("reasoning")
    assert messages_with_reasoning_as(CHAT, "reasoning") is CHAT  # nothing to rename: not copied


def test_the_adapters_send_the_name_their_upstream_reads() -> None:
    body = {**CHAT, "messages": [_message("reasoning"), *CHAT["messages"]]}
    assert "reasoning_content" in LlamaCppAdapter().call("chat", body).body["messages"][0]
    assert "reasoning_content" in OpenAIAdapter().call("chat", body).body["messages"][0]
    taught = OpenAIAdapter(traits=UpstreamTraits(reasoning_field="reasoning"))
    back = {**CHAT, "messages": [_message("reasoning_content"), *CHAT["messages"]]}
    assert "reasoning" in taught.call("chat", back).body["messages"][0]


def _vllm_like(seen: list[dict[str, Any]]) -> Starlette:
    """An upstream that answers with vLLM's ``reasoning`` (since PR #27752), streamed or not."""

    async def chat(request: Request) -> Response:
        body = await request.json()
        seen.append(body)
        if body.get("stream"):
            chunks = [
                upstream_answer(
                    True, [{"index": 0, "delta": d, "finish_reason": f}], object="chat.completion.chunk"
                )
                for d, f in (({"role": "assistant", "reasoning": "Hm."}, None), ({"content": "Yes."}, "stop"))
            ]
            text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return Response(text, media_type="text/event-stream")
        message = {"role": "assistant", "content": "Yes.", "reasoning": "Hm."}
        return JSONResponse(
            upstream_answer(True, [{"index": 0, "message": message, "finish_reason": "stop"}])
        )

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm"}]})

    return Starlette(
        routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)]
    )


@pytest.mark.parametrize("stream", [False, True])
def test_the_proxy_learns_the_upstreams_name_and_sends_it_back_so(stream: bool) -> None:
    seen: list[dict[str, Any]] = []
    with run_asgi(_vllm_like(seen)) as upstream, run_proxy(upstream, upstream_kind="openai") as proxy:
        first = httpx.post(proxy + "/v1/chat/completions", json={**CHAT, "stream": stream}, timeout=30)
        assert first.status_code == 200
        assert '"reasoning_content":"Hm."' in first.text.replace(" ", "")
        history = [*CHAT["messages"], _message("reasoning_content"), {"role": "user", "content": "And?"}]
        second = httpx.post(proxy + "/v1/chat/completions", json={**CHAT, "messages": history}, timeout=30)
        assert second.status_code == 200
    sent_back = seen[1]["messages"][1]
    assert sent_back["reasoning"] == "Let me think."
    assert "reasoning_content" not in sent_back


def test_the_proxy_sends_reasoning_under_the_configured_name() -> None:
    seen: list[dict[str, Any]] = []
    with (
        run_asgi(_vllm_like(seen)) as upstream,
        run_proxy(upstream, upstream_kind="openai", reasoning_field="reasoning") as proxy,
    ):
        answer = httpx.post(proxy + "/v1/chat/completions", json=CHAT, timeout=30).json()
    assert answer["choices"][0]["message"]["reasoning"] == "Hm."
    assert "reasoning_content" not in answer["choices"][0]["message"]
