"""An upstream's own endpoint of a protocol (``--messages native``, ``--responses native``) answering
what it should not: the client gets the protocol's error, never the proxy's 500, a 200 that holds no
answer, or a local path (found by black-box testing: an event stream to a request asked without one
was folded as chat chunks, a 500 ``KeyError``; usage that is no object, a 500 ``AttributeError``; an
error in a 200, a chat completion, or chat chunks cut off, each a 200 with an empty answer)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from .conftest import run_proxy
from .rawserver import Record, chunk, http_chunk, json_answer, raw_server, read_request, sse_head

_MESSAGES = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]}
_RESPONSES = {"model": "m", "input": "Hi"}
_PATHS = {"messages": "/v1/messages", "responses": "/v1/responses"}
_ANTHROPIC_EVENTS = (
    b'event: message_start\ndata: {"type": "message_start", "message": {"id": "m", "type": "message", '
    b'"role": "assistant", "content": [], "model": "m", "usage": {"input_tokens": 1, "output_tokens": 0}}}'
    b"\n\n"
)


def _answering(answer: bytes) -> Any:
    """Every POST to the protocol's own path answered with ``answer``; anything else a 404."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (raw := await read_request(reader)) is not None:
            if raw.startswith((b"POST /v1/messages ", b"POST /v1/responses ")):
                writer.write(answer)
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()

    return handler


def _post(protocol: str, answer: bytes) -> httpx.Response:
    body = _MESSAGES if protocol == "messages" else _RESPONSES
    with raw_server(_answering(answer)) as (upstream, _), run_proxy(upstream, **{protocol: "native"}) as url:
        return httpx.post(url + _PATHS[protocol], json=body, timeout=10)


def _error(protocol: str, response: httpx.Response) -> str:
    """The error's message, its body in the protocol's shape."""
    body = response.json()
    if protocol == "messages":
        assert body["type"] == "error", body
    assert set(body["error"]) >= {"type", "message"}, body
    return str(body["error"]["message"])


PROTOCOLS = pytest.mark.parametrize("protocol", ["messages", "responses"])


@PROTOCOLS
@pytest.mark.parametrize("events", [_ANTHROPIC_EVENTS, chunk("Hi")], ids=["anthropic", "chat"])
def test_a_stream_to_a_request_asked_whole_is_a_502(protocol: str, events: bytes) -> None:
    response = _post(protocol, sse_head() + http_chunk(events) + b"0\r\n\r\n")
    assert response.status_code == 502
    assert "streamed its answer" in _error(protocol, response)


@PROTOCOLS
def test_an_error_in_a_200_is_the_upstreams_error_without_its_path(protocol: str) -> None:
    error = {"error": {"message": "boom at /home/someone/models/gemma.gguf", "type": "server_error"}}
    response = _post(protocol, json_answer(error))
    assert response.status_code == 500
    message = _error(protocol, response)
    assert "boom" in message
    assert "/home/someone" not in response.text


@PROTOCOLS
def test_another_protocols_answer_is_a_502(protocol: str) -> None:
    message = {"role": "assistant", "content": "Hi"}
    chat = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"message": message}],
    }
    response = _post(protocol, json_answer(chat))
    assert response.status_code == 502
    name = "Message" if protocol == "messages" else "Response"
    assert f"not a {name}" in _error(protocol, response)


@PROTOCOLS
def test_another_protocols_stream_ends_with_an_error_that_says_so(protocol: str) -> None:
    # Chat chunks from the protocol's own path, asked streamed: the stream's end said only "without a
    # terminal event" (found by black-box testing).
    body = {**(_MESSAGES if protocol == "messages" else _RESPONSES), "stream": True}
    answer = sse_head() + http_chunk(chunk("Hi") + b"data: [DONE]\n\n") + b"0\r\n\r\n"
    with raw_server(_answering(answer)) as (upstream, _), run_proxy(upstream, **{protocol: "native"}) as url:
        response = httpx.post(url + _PATHS[protocol], json=body, timeout=10)
    assert response.status_code == 502  # nothing of an answer came before the end: no stream begun
    name = "Message" if protocol == "messages" else "Response"
    assert f"held no event of a {name}: it answered in another protocol" in _error(protocol, response)


def test_usage_that_is_no_object_is_no_500() -> None:
    whole = {
        "id": "r",
        "object": "response",
        "status": "completed",
        "model": "m",
        "output": [],
        "usage": "lots",
    }
    response = _post("responses", json_answer(whole))
    assert response.status_code == 200, response.text
    assert response.json()["object"] == "response"


def test_a_stream_that_breaks_off_under_a_message_asked_whole_is_anthropics_error() -> None:
    """Translated, not native: the upstream streams (as it may when asked without), then breaks off.
    Nothing was sent yet, so the failure is the answer, and it was OpenAI's body on /v1/messages."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (raw := await read_request(reader)) is not None:
            if not raw.startswith(b"POST /v1/chat/completions "):
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
                continue
            writer.write(sse_head() + http_chunk(chunk("Hi")))
            await writer.drain()
            writer.transport.abort()
            return

    with raw_server(handler) as (upstream, _), run_proxy(upstream) as url:
        response = httpx.post(url + "/v1/messages", json=_MESSAGES, timeout=10)
    assert response.status_code == 502
    _error("messages", response)
