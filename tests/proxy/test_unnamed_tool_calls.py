"""A tool call the upstream sent without a function name (issue 32, item 8): never sent on, never given a
guessed name, never dropped; the answer fails as one the upstream could not make valid does (a 502
before anything went out, the protocol's error event once a stream is under way).

A streamed call's name is judged at the stream's end: only a call's first fragment is meant to carry
it, but a later one may, and the call then goes out whole with that name.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conformance.api_errors import APIError
from conformance.request_info import RequestInfo
from proxy.normalizer import StreamNormalizer, normalize_body
from proxy.normalizer.choices import MOST_HELD_UNNAMED
from proxy.normalizer.repairs import Repairs

from .conftest import post_judged, run_proxy
from .rawserver import (
    Record,
    call_answer,
    chat_requests,
    chunk_payload,
    http_chunk,
    raw_server,
    read_request,
    sse_head,
)

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS}
NAMELESS: list[dict[str, Any]] = [
    {"name": "", "arguments": '{"city": "Paris"}'},
    {"arguments": '{"city": "Paris"}'},
    {"name": None, "arguments": '{"city": "Paris"}'},
]
"""A call's function without a usable name: empty, missing, null. The one tool offered is no name to
guess: the model may have meant another call, or none."""
NAMELESS_IDS = ["empty", "missing", "null"]


def _call(function: dict[str, Any], index: int = 0, call_id: str | None = "call_1") -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "type": "function", "function": function}
    if call_id is not None:
        call["id"] = call_id
    return call


def _streamed(*payloads: dict[str, Any]) -> tuple[list[dict[str, Any]], StreamNormalizer]:
    normalizer = StreamNormalizer(RequestInfo.from_body("chat", {**CHAT, "stream": True}))
    out: list[dict[str, Any]] = []
    for payload in payloads:
        out += normalizer.feed_payload(payload)
    normalizer.upstream_done = True
    out += normalizer.close()
    return out, normalizer


def _sent_calls(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [call for c in chunks for choice in c["choices"] for call in choice["delta"].get("tool_calls", ())]


# -- the normalizer ---------------------------------------------------------------------------------


@pytest.mark.parametrize("function", NAMELESS, ids=NAMELESS_IDS)
def test_a_body_with_a_call_without_a_name_is_a_502(function: dict[str, Any]) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": function}],
    }
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "m"}
    body["choices"] = [{"index": 0, "message": message, "finish_reason": "tool_calls"}]
    with pytest.raises(APIError) as failed:
        normalize_body(body, RequestInfo.from_body("chat", CHAT), repairs=Repairs())
    assert failed.value.status == 502
    assert "tool call without a function name (tool call 0 of choice 0)" in failed.value.message


@pytest.mark.parametrize("function", NAMELESS, ids=NAMELESS_IDS)
def test_a_streamed_call_that_never_gets_a_name_fails_the_stream_and_none_of_it_goes_out(
    function: dict[str, Any],
) -> None:
    chunks, normalizer = _streamed(
        chunk_payload({"role": "assistant", "tool_calls": [_call({**function, "arguments": '{"city": '})]}),
        chunk_payload({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}, "tool_calls"),
    )
    assert normalizer.failure is not None
    assert normalizer.failure.status == 502
    assert "tool call without a function name (tool call 0 of choice 0)" in normalizer.failure.message
    assert _sent_calls(chunks) == []
    assert all(choice["finish_reason"] is None for c in chunks for choice in c["choices"])


def test_a_nameless_call_fails_once_it_holds_more_than_a_megabyte_without_waiting_for_the_end() -> None:
    # An upstream's endless nameless call is not held in memory until the stream ends.
    piece = "x" * (1 << 16)
    normalizer = StreamNormalizer(RequestInfo.from_body("chat", {**CHAT, "stream": True}))
    out = normalizer.feed_payload(
        chunk_payload({"role": "assistant", "tool_calls": [_call({"arguments": '{"a": "'})]})
    )
    sent = 0
    while normalizer.failure is None and sent < 32:
        out += normalizer.feed_payload(
            chunk_payload({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        )
        sent += 1
    assert normalizer.failure is not None
    assert normalizer.failure.status == 502
    # Failed on the piece that took what was held past the bound, not later.
    assert len('{"a": "') + (sent - 1) * len(piece) <= MOST_HELD_UNNAMED < len('{"a": "') + sent * len(piece)
    assert _sent_calls(out) == []


def test_a_name_that_comes_on_a_later_fragment_names_the_call() -> None:
    """Only the first fragment is meant to carry the name; one that came later is the call's name, and
    the call, held until then, goes out whole with it (and the calls after it, in their order)."""
    chunks, normalizer = _streamed(
        chunk_payload({"role": "assistant", "tool_calls": [_call({"arguments": '{"city": '})]}),
        chunk_payload({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk_payload(
            {"tool_calls": [_call({"name": "get_weather", "arguments": "{}"}, index=1, call_id="call_2")]}
        ),
        chunk_payload({"tool_calls": [{"index": 0, "function": {"name": "get_weather"}}]}),
        chunk_payload({"tool_calls": [{"index": 1, "function": {"arguments": ""}}]}, "tool_calls"),
    )
    assert normalizer.failure is None
    calls = _sent_calls(chunks)
    assert [(c["index"], c["id"], c["function"]) for c in calls] == [
        (0, "call_1", {"name": "get_weather", "arguments": '{"city": "Paris"}'}),
        (1, "call_2", {"name": "get_weather", "arguments": "{}"}),
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_calls_with_names_go_out_as_they_come() -> None:
    chunks, normalizer = _streamed(
        chunk_payload(
            {"role": "assistant", "tool_calls": [_call({"name": "get_weather", "arguments": '{"city": '})]}
        ),
        chunk_payload({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}, "tool_calls"),
    )
    assert normalizer.failure is None
    assert [c["function"] for c in _sent_calls(chunks)] == [
        {"name": "get_weather", "arguments": '{"city": '},
        {"arguments": '"Paris"}'},
    ]


def test_a_nameless_call_after_a_named_one_fails_the_stream() -> None:
    _, normalizer = _streamed(
        chunk_payload(
            {"role": "assistant", "tool_calls": [_call({"name": "get_weather", "arguments": "{}"})]}
        ),
        chunk_payload(
            {"tool_calls": [_call({"name": "", "arguments": "{}"}, index=1, call_id="call_2")]}, "tool_calls"
        ),
    )
    assert normalizer.failure is not None
    assert "(tool call 1 of choice 0)" in normalizer.failure.message


# -- through the proxy, from a raw upstream ---------------------------------------------------------


def _upstream(function: dict[str, Any], *, text_first: bool = False) -> Any:
    """A chat upstream that calls with ``function`` (streamed as two fragments when asked to stream);
    ``text_first``: a stream starts with text, in a read of its own, so that it is under way."""

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return b"data: " + json.dumps(chunk_payload(delta, finish)).encode() + b"\n\n"

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        async for request in chat_requests(reader, writer):
            record.requests += 1
            if not request.get("stream"):
                writer.write(call_answer(function))
                await writer.drain()
                continue
            writer.write(sse_head())
            if text_first:
                writer.write(http_chunk(event({"role": "assistant", "content": "Let me check."})))
                await writer.drain()
                await asyncio.sleep(0.3)  # the rest in a read of its own, once the text went out
            first = _call({**function, "arguments": '{"city": '})
            events = event({"role": "assistant", "tool_calls": [first]})
            events += event(
                {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}, "tool_calls"
            )
            writer.write(http_chunk(events + b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()

    return handler


RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
MESSAGES_TOOLS = [{"name": "get_weather", "input_schema": {"type": "object"}}]
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", CHAT),
    "responses": ("/v1/responses", {"model": "m", "input": "Weather?", "tools": RESPONSES_TOOLS}),
    "messages": (
        "/v1/messages",
        {
            "model": "m",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "Weather?"}],
            "tools": MESSAGES_TOOLS,
        },
    ),
}


def _error_message(protocol: str, body: dict[str, Any]) -> str:
    """The error's words in the protocol's error body (Anthropic's for the Messages API, else OpenAI's)."""
    assert protocol != "messages" or body.get("type") == "error"
    return str(body["error"]["message"])


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def _no_call_sent(text: str) -> None:
    """Nothing of the call reached the client: no call in any protocol's shape, none of its arguments
    (the tool's name is no sign: a Response repeats the tools it was offered)."""
    assert "Paris" not in text
    for call in ('"tool_calls"', '"function_call"', '"tool_use"'):
        assert call not in text.replace(" ", "")


@contextlib.contextmanager
def _proxied(function: dict[str, Any], *, text_first: bool = False) -> Iterator[str]:
    handler = _upstream(function, text_first=text_first)
    with raw_server(handler) as (upstream, _), run_proxy(upstream, upstream_kind="openai") as url:
        yield url


@pytest.mark.slow
@pytest.mark.parametrize("protocol", list(REQUESTS))
@pytest.mark.parametrize("function", NAMELESS, ids=NAMELESS_IDS)
def test_a_call_without_a_name_is_a_502_in_the_protocols_words(
    protocol: str, function: dict[str, Any]
) -> None:
    """Streamed or not: the upstream's whole answer is the call, so nothing went out before the end."""
    path, body = REQUESTS[protocol]
    with _proxied(function) as url:
        for stream in (False, True):
            response = httpx.post(url + path, json={**body, "stream": stream}, timeout=10)
            assert response.status_code == 502, response.text
            assert "tool call without a function name" in _error_message(protocol, response.json())
            _no_call_sent(response.text)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", list(REQUESTS))
def test_a_call_without_a_name_mid_stream_ends_the_stream_with_the_protocols_error(protocol: str) -> None:
    """Text went out first: the stream then ends as for an upstream's failure, the protocol's error
    event last, and no call in it."""
    path, body = REQUESTS[protocol]
    with _proxied(NAMELESS[0], text_first=True) as url:
        response = httpx.post(url + path, json={**body, "stream": True}, timeout=10)
    assert response.status_code == 200
    assert "Let me check." in response.text
    _no_call_sent(response.text)
    last = _events(response.text)[-1]
    if protocol == "responses":
        assert last["type"] == "response.failed"
        message = last["response"]["error"]["message"]
    else:
        message = _error_message(protocol, last)
    assert "tool call without a function name" in message


@pytest.mark.slow
def test_a_call_named_on_a_later_fragment_reaches_the_client_with_its_name() -> None:
    """The counterpart: a name that came late is the call's, through the proxy too."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        await read_request(reader)
        events = [
            chunk_payload({"role": "assistant", "tool_calls": [_call({"arguments": '{"city": "Paris"}'})]}),
            chunk_payload({"tool_calls": [{"index": 0, "function": {"name": "get_weather"}}]}, "tool_calls"),
        ]
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        writer.write(sse_head() + http_chunk(data) + b"0\r\n\r\n")
        await writer.drain()

    with raw_server(handler) as (upstream, _), run_proxy(upstream, upstream_kind="openai") as url:
        response = post_judged(url, "/v1/chat/completions", {**CHAT, "stream": True}, timeout=10)
    calls = _sent_calls([e for e in _events(response.text) if e.get("choices")])
    assert [c["function"] for c in calls] == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
