"""A lost text is never forwarded as a success (issue 17 item 8, Acceptance 6; Q14, ik_llama.cpp #767).

An upstream that counted tokens (``finish_reason: "length"``, or usage above one end token per choice)
but sent no text, content, refusal, reasoning or tool call gets the client an error naming the cause:
an error event once the stream started, a 502 before. A genuine empty answer, tool calls, a stop
sequence at the very start and ``max_tokens: 0`` stay successes. The upstreams are raw asyncio servers,
and Acceptance 6 runs ``conformant serve --upstream-kind openai`` in front of the replayed seed stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from proxy.normalizer.text_lost import TEXT_LOST_CODE
from tests.support.servers import free_port, run_process

from .conftest import metric, serve_proxy, upstream_answer
from .rawserver import Record, http_chunk, json_answer, raw_server, read_request, sse_head

pytestmark = pytest.mark.slow

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
COMPLETION = {"model": "m", "prompt": "Hello", "max_tokens": 5}
USAGE = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}


def _serving(events: list[dict[str, Any]], whole: dict[str, Any] | None) -> Any:
    """An upstream that answers ``whole`` as a JSON body, or else streams ``events`` (then ``[DONE]``),
    whatever the request asked; 404 off ``/v1``."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (request := await read_request(reader)) is not None:
            record.requests += 1
            if not request.split(b" ")[1].startswith(b"/v1/"):
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            elif whole is None:
                writer.write(sse_head())
                for event in events:  # one read each, as a token-by-token server sends
                    writer.write(http_chunk(b"data: " + json.dumps(event).encode() + b"\n\n"))
                    await writer.drain()
                    await asyncio.sleep(0.01)
                writer.write(http_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            else:
                data = json.dumps(whole).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(data)}\r\n\r\n".encode()
                    + data
                )
            await writer.drain()

    return handler


def _chat_stream(*deltas: dict[str, Any], finish: str, usage: dict[str, Any] | None) -> list[dict[str, Any]]:
    events = [
        {**upstream_answer(True, [{"index": 0, "delta": d, "finish_reason": None}]), "object": "chunk"}
        for d in deltas
    ]
    events.append(upstream_answer(True, [{"index": 0, "delta": {}, "finish_reason": finish}]))
    if usage is not None:
        events.append(upstream_answer(True, [], usage=usage))
    return [{**e, "object": "chat.completion.chunk"} for e in events]


def _chat_body(message: dict[str, Any], finish: str, usage: dict[str, Any]) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    return upstream_answer(True, [choice], usage=usage)


# The seed bug's shape on both endpoints: empty text, "length", usage counting the tokens.
LOST_CHAT = _chat_stream({"role": "assistant", "content": ""}, {"content": ""}, finish="length", usage=USAGE)
LOST_COMPLETION = [
    upstream_answer(False, [{"index": 0, "text": "", "finish_reason": "length"}], usage=USAGE)
    for _ in range(3)
]


@contextlib.contextmanager
def _proxy(events: list[dict[str, Any]], whole: dict[str, Any] | None = None) -> Iterator[tuple[str, Any]]:
    with raw_server(_serving(events, whole)) as (upstream, _), serve_proxy(upstream) as (url, app):
        yield url, app


def _events(response: httpx.Response) -> list[Any]:
    return [
        json.loads(line[6:]) if line[6:] != "[DONE]" else "[DONE]"
        for line in response.text.split("\n\n")
        if line
    ]


def _assert_lost(error: dict[str, Any]) -> None:
    assert error["code"] == TEXT_LOST_CODE
    assert "sent no text" in error["message"]
    assert error["type"] == "server_error"


def test_a_chat_stream_whose_text_was_lost_ends_in_an_error_event_the_sdk_raises() -> None:
    with _proxy(LOST_CHAT) as (url, _):
        response = httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=10)
        assert response.status_code == 200  # the role chunk went out before the end showed the loss
        *chunks, last = _events(response)
        assert all(c["choices"][0]["finish_reason"] is None for c in chunks)  # no normal finish
        _assert_lost(last["error"])
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.APIError, match="sent no text"):
            list(client.chat.completions.create(**CHAT, stream=True))


LOST_WHOLE = {
    "completions-stream": ("/v1/completions", LOST_COMPLETION, None),
    "completions-json": (
        "/v1/completions",
        [],
        upstream_answer(False, [{"index": 0, "text": "", "finish_reason": "length"}], usage=USAGE),
    ),
    # No "length", but 9 tokens counted for one choice with nothing in it.
    "chat-json-usage": (
        "/v1/chat/completions",
        [],
        _chat_body({"content": None}, "stop", {**USAGE, "completion_tokens": 9}),
    ),
}


@pytest.mark.parametrize("case", sorted(LOST_WHOLE))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_lost_text_before_anything_was_sent_is_a_502(case: str, stream: bool) -> None:
    path, events, whole = LOST_WHOLE[case]
    body = CHAT if path.endswith("chat/completions") else COMPLETION
    with _proxy(events, whole) as (url, _):
        response = httpx.post(url + path, json={**body, "stream": stream}, timeout=10)
        assert response.status_code == 502, response.text
        _assert_lost(response.json()["error"])


def test_a_lost_chat_text_asked_whole_is_a_502() -> None:
    with _proxy(LOST_CHAT) as (url, _):
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
        assert response.status_code == 502, response.text
        _assert_lost(response.json()["error"])


_TOOL_CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
KEPT = {
    # llama-server counts the end token: an empty answer is 1 token, and a success.
    "empty-answer": (
        _chat_stream(
            {"role": "assistant", "content": ""}, finish="stop", usage={**USAGE, "completion_tokens": 1}
        ),
        None,
    ),
    "empty-answer-json": ([], _chat_body({"content": ""}, "stop", {**USAGE, "completion_tokens": 1})),
    "tool-call": (
        _chat_stream({"role": "assistant", "tool_calls": [_TOOL_CALL]}, finish="length", usage=USAGE),
        None,
    ),
    "tool-call-json": ([], _chat_body({"content": None, "tool_calls": [_TOOL_CALL]}, "length", USAGE)),
    "reasoning-only": (
        _chat_stream({"role": "assistant", "reasoning_content": "Hmm"}, finish="length", usage=USAGE),
        None,
    ),
    # Cut whole by a stop sequence at its very start: the text was there, and the proxy took it.
    "stopped-at-once": (
        _chat_stream({"role": "assistant", "content": "Hello"}, finish="stop", usage=USAGE),
        None,
    ),
    "stopped-at-once-json": ([], _chat_body({"content": "Hello"}, "stop", USAGE)),
}


@pytest.mark.parametrize("case", sorted(KEPT))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_answers_with_output_or_without_tokens_stay_successes(case: str, stream: bool) -> None:
    events, whole = KEPT[case]
    body = {**CHAT, "stream": stream, "stop": ["Hel"]}
    with _proxy(events, whole) as (url, _):
        response = httpx.post(url + "/v1/chat/completions", json=body, timeout=10)
        assert response.status_code == 200, response.text
        assert TEXT_LOST_CODE not in response.text
        if stream:
            assert response.text.endswith("data: [DONE]\n\n")


def test_max_tokens_zero_has_no_text_to_lose() -> None:
    with _proxy(LOST_COMPLETION) as (url, _):
        for stream in (False, True):
            body = {**COMPLETION, "max_tokens": 0, "echo": True, "stream": stream}
            response = httpx.post(url + "/v1/completions", json=body, timeout=10)
            assert response.status_code == 200, response.text


def test_the_access_log_and_metrics_count_lost_texts(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="conformant.access")
    with _proxy(LOST_CHAT) as (url, _):
        before = metric(httpx.get(url + "/metrics", timeout=10).text, "conformant_texts_lost_total")
        for stream in (True, False):
            httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
        after = metric(httpx.get(url + "/metrics", timeout=10).text, "conformant_texts_lost_total")
    assert (before, after) == (0, 2)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "conformant.access"]
    chat = [line for line in lines if line["path"] == "/v1/chat/completions"]
    assert [(line["status"], line["error_code"]) for line in chat] == [
        (200, TEXT_LOST_CODE),
        (502, TEXT_LOST_CODE),
    ]
    assert all("sent no text" in line["error"] for line in chat)


@pytest.fixture(scope="module")
def serve_openai_kind(replay_url: str) -> Iterator[str]:
    """``conformant serve --upstream-kind openai`` (no native llama.cpp route) before the replayed corpus."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "conformance",
        "serve",
        "--upstream",
        replay_url,
        "--port",
        str(port),
        "--upstream-kind",
        "openai",
    ]
    with run_process(args, health_path="/health", port=port, timeout=60) as (url, _):
        yield url


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_acceptance_6_the_sdk_raises_on_the_seed_streams_lost_text(
    serve_openai_kind: str, stream: bool
) -> None:
    """ik_llama.cpp #767 as recorded (every chunk "text": "", "length", usage counting tokens)."""
    client = openai.OpenAI(
        base_url=serve_openai_kind + "/v1",
        api_key="unused",
        max_retries=0,
        default_headers={"x-conformant-transcript": "ik_llama-767"},
    )
    with pytest.raises(openai.APIStatusError) as caught:
        client.completions.create(model="ik_llama-767", prompt="Hello", stream=stream)  # (held: a 502)
    assert caught.value.status_code == 502
    assert caught.value.code == TEXT_LOST_CODE
    assert "sent no text" in caught.value.message


def _llama_cpp_python(answer: dict[str, Any]) -> Any:
    """An upstream that lists its model as llama-cpp-python does (``owned_by: "me"``, ``permissions``) and
    answers every chat request with ``answer``."""
    listing = {
        "object": "list",
        "data": [{"id": "m", "object": "model", "owned_by": "me", "permissions": []}],
    }

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (request := await read_request(reader)) is not None:
            path = request.split(b" ")[1]
            writer.write(json_answer(listing if path == b"/v1/models" else answer))
            await writer.drain()

    return handler


def test_llama_cpp_pythons_empty_answer_beside_tools_is_an_answer_not_a_loss() -> None:
    """Its function-calling handlers generate their format's prefix (``message:``) before the answer, and
    count it: measured on Gemma 3 270M, ``content: ""`` with 6 completion tokens after a tool result in 4
    seeds of 10. With tools offered that is an empty answer; without tools the same answer is a loss."""
    empty = _chat_body({"content": ""}, "stop", {**USAGE, "completion_tokens": 6})
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with raw_server(_llama_cpp_python(empty)) as (upstream, _), serve_proxy(upstream) as (url, _):
        asked = {**CHAT, "max_tokens": 64}
        answered = httpx.post(url + "/v1/chat/completions", json={**asked, "tools": tools}, timeout=10)
        assert answered.status_code == 200, answered.text
        assert answered.json()["choices"][0]["message"]["content"] == ""
        lost = httpx.post(url + "/v1/chat/completions", json=asked, timeout=10)
        assert lost.status_code == 502, lost.text
        _assert_lost(lost.json()["error"])
