"""``--messages native|auto``: an upstream's own ``/v1/messages`` (llama-server, vLLM and Ollama serve
one), normalized by the rules the translation keeps (conformance/protocols/messages/native.py): the
proxy's ids, the model as the client names it, usage with both cache counts and cumulative in
``message_delta``, ``stop_reason`` in Anthropic's words, and a stream cut short ended with an error
event. Every answer is judged with no error."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.messages_checks import check_message, judged, message_events

from .conftest import run_proxy
from .rawserver import Record, http_chunk, json_answer, raw_server, read_request, sse_head

KEY = "upstream-secret-key"
HELLO: dict[str, Any] = {"model": "gemma", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}
_MESSAGE: dict[str, Any] = {
    "id": "chatcmpl-upstream",  # as llama-server's may look: not Anthropic's
    "type": "message",
    "role": "assistant",
    "model": "/models/gemma.gguf",
    "content": [],
    "stop_reason": None,
    "stop_sequence": None,
    "usage": {"input_tokens": 7, "output_tokens": 0},
}


def _events(cut: bool = False) -> list[dict[str, Any]]:
    call = {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}}
    events = [
        {"type": "message_start", "message": _MESSAGE},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me see."}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": call},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{}"},
        },
        # no content_block_stop for the call (the proxy closes it), and chat's words for the reason
        {"type": "message_delta", "delta": {"stop_reason": "tool_calls"}, "usage": {"output_tokens": 12}},
        {"type": "message_stop"},
    ]
    return events[:3] if cut else events


def _native(cut: bool = False, seen: list[bytes] | None = None) -> Any:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (raw := await read_request(reader)) is not None:
            if seen is not None:
                seen.append(raw)
            head, body = raw.split(b"\r\n\r\n", 1)
            if not head.startswith(b"POST /v1/messages "):
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                continue
            asked = json.loads(body)
            if asked == {}:  # the auto mode's probe
                refusal = {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": "no messages"},
                }
                data = json.dumps(refusal).encode()
                writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n")
                writer.write(b"content-length: %d\r\n\r\n" % len(data) + data)
            elif asked.get("stream"):
                data = b"".join(
                    f"event: {e['type']}\n".encode() + b"data: " + json.dumps(e).encode() + b"\n\n"
                    for e in _events(cut)
                )
                writer.write(sse_head() + http_chunk(data))
                if cut:
                    await writer.drain()
                    writer.transport.abort()
                    return
                writer.write(b"0\r\n\r\n")
            else:
                content = [{"type": "text", "text": "Hi!"}]
                whole = {**_MESSAGE, "content": content, "stop_reason": "stop", "usage": {"input_tokens": 7}}
                writer.write(json_answer(whole))
            await writer.drain()

    return handler


@pytest.mark.parametrize("mode", ["native", "auto"])
def test_a_native_stream_is_normalized(mode: str) -> None:
    seen: list[bytes] = []
    with raw_server(_native(seen=seen)) as (upstream, _), run_proxy(upstream, messages=mode) as url:
        response = httpx.post(url + "/v1/messages", json={**HELLO, "stream": True}, timeout=10)
        judged(response.content, {**HELLO, "stream": True}, response.status_code, response.headers)
        events = message_events(response.content)
        start = events[0]["message"]
        assert start["id"].startswith("msg_")
        assert start["model"] == "gemma"
        assert start["usage"]["cache_read_input_tokens"] == 0
        call = events[4]["content_block"]
        assert call["id"].startswith("toolu_")
        assert [e["type"] for e in events[-3:]] == ["content_block_stop", "message_delta", "message_stop"]
        assert events[-2]["delta"]["stop_reason"] == "tool_use"
        assert events[-2]["usage"]["input_tokens"] == 7
        assert events[-2]["usage"]["output_tokens"] == 12
        with anthropic.Anthropic(base_url=url, api_key="none", max_retries=0).messages.stream(
            **HELLO
        ) as stream:
            final = stream.get_final_message()
        assert final.stop_reason == "tool_use"
    sent = [json.loads(raw.split(b"\r\n\r\n", 1)[1]) for raw in seen if raw.startswith(b"POST /v1/messages ")]
    assert any(body.get("stream") is True for body in sent)


def test_a_native_body_is_normalized() -> None:
    with raw_server(_native()) as (upstream, _), run_proxy(upstream, messages="native") as url:
        response = httpx.post(url + "/v1/messages", json=HELLO, timeout=10)
        judged(response.content, HELLO, response.status_code, response.headers)
        message = check_message(response.json())
        assert message.model == "gemma"
        assert message.stop_reason == "end_turn"
        assert message.usage.output_tokens == 0


def _answering(texts: list[str], ended: dict[str, Any]) -> Any:
    """An upstream's own /v1/messages answering every request with ``texts``, ended as ``ended`` says:
    whole, or streamed a delta a text."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (raw := await read_request(reader)) is not None:
            asked = json.loads(raw.split(b"\r\n\r\n", 1)[1] or b"{}")
            if not asked.get("stream"):
                content = [{"type": "text", "text": "".join(texts)}]
                writer.write(json_answer({**_MESSAGE, "content": content, **ended}))
                continue
            deltas: list[dict[str, Any]] = [
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
                for piece in texts
            ]
            events = [
                {"type": "message_start", "message": _MESSAGE},
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                *deltas,
                {"type": "content_block_stop", "index": 0},
                {"type": "message_delta", "delta": ended, "usage": {"output_tokens": len(texts)}},
                {"type": "message_stop"},
            ]
            data = b"".join(
                f"event: {e['type']}\n".encode() + b"data: " + json.dumps(e).encode() + b"\n\n"
                for e in events
            )
            writer.write(sse_head() + http_chunk(data) + b"0\r\n\r\n")
            await writer.drain()

    return handler


def _stopped_at(sequence: str) -> Any:
    """llama-server's own /v1/messages as measured (Q89): a stop sequence met is ``end_turn`` with
    ``stop_sequence`` naming it, whole and in ``message_delta``."""
    return _answering(["Writ"], {"stop_reason": "end_turn", "stop_sequence": sequence})


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_sequence_met_is_said_so_q89(stream: bool) -> None:
    asked = {**HELLO, "stop_sequences": ["e"], "stream": stream}
    with raw_server(_stopped_at("e")) as (upstream, _), run_proxy(upstream, messages="native") as url:
        response = httpx.post(url + "/v1/messages", json=asked, timeout=10)
    judged(response.content, asked, response.status_code, response.headers)
    ended = message_events(response.content)[-2]["delta"] if stream else response.json()
    assert (ended["stop_reason"], ended["stop_sequence"]) == ("stop_sequence", "e")


def _continuing(texts: list[str]) -> Any:
    """llama-server's own /v1/messages with ``--jinja`` answering a final assistant turn: the turn's
    text written again before its continuation, as its chat route does."""
    return _answering(texts, {"stop_reason": "end_turn"})


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("texts", "answered"),
    [
        (["1, 2, 3, 4,", " 5", ", 6"], " 5, 6"),  # written again first (llama-server --jinja)
        (["1, 2,", " 3, 4, 5"], " 5"),  # over two deltas
        ([" 5", ", 6"], " 5, 6"),  # only the continuation: as it came
        (["1, 2"], "1, 2"),  # the prefill's start, then the end: held, then sent as it came
    ],
)
def test_a_prefilled_answer_is_its_continuation_alone(texts: list[str], answered: str, stream: bool) -> None:
    """Found by black-box testing: the proxy took this out of the translated answer only, and
    ``--messages native`` in front of llama-server --jinja passed the prefill on written twice."""
    turns = [{"role": "user", "content": "Count to ten"}, {"role": "assistant", "content": "1, 2, 3, 4,"}]
    asked = {**HELLO, "messages": turns, "stream": stream}
    with raw_server(_continuing(texts)) as (upstream, _), run_proxy(upstream, messages="native") as url:
        response = httpx.post(url + "/v1/messages", json=asked, timeout=10)
    judged(response.content, asked, response.status_code, response.headers)
    if stream:
        events = message_events(response.content)
        deltas = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"]
        assert all(deltas)  # no empty delta for the text held
        assert "".join(deltas) == answered
        assert [e["type"] for e in events[-4:]] == [
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    else:
        assert response.json()["content"] == [{"type": "text", "text": answered}]


def test_a_native_stream_cut_short_ends_with_an_error_event() -> None:
    with raw_server(_native(cut=True)) as (upstream, _), run_proxy(upstream, messages="native") as url:
        response = httpx.post(url + "/v1/messages", json={**HELLO, "stream": True}, timeout=10)
        events = message_events(response.content)
        assert events[2]["delta"]["text"] == "Let me see."
        assert events[-1]["type"] == "error"


def test_translate_mode_never_reaches_the_upstreams_own_endpoint() -> None:
    seen: list[bytes] = []
    with raw_server(_native(seen=seen)) as (upstream, _), run_proxy(upstream) as url:
        httpx.post(url + "/v1/messages", json=HELLO, timeout=10)
    assert not any(raw.startswith(b"POST /v1/messages") for raw in seen)


def test_the_upstream_key_never_reaches_the_client() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        await read_request(reader)
        error = {"type": "error", "error": {"type": "authentication_error", "message": f"bad key {KEY}"}}
        data = json.dumps(error).encode()
        writer.write(b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n")
        writer.write(b"content-length: %d\r\n\r\n" % len(data) + data)
        await writer.drain()

    with (
        raw_server(handler) as (upstream, _),
        run_proxy(upstream, messages="native", upstream_api_key=KEY) as url,
    ):
        response = httpx.post(url + "/v1/messages", json=HELLO, timeout=10)
        assert KEY not in response.text
        assert response.json()["type"] == "error"


def _llama_server_without_tool_calls(seen: list[bytes]) -> Any:
    """llama-server whose template cannot write tool calls (``/props`` says so, Q83): its own
    ``/v1/messages`` answers text whatever ``tool_choice`` asks; its chat route streams what the
    proxy's JSON-output emulation asks for (``{"tool_call": {...}}``, proxy/adapters/tool_emulation.py)."""
    props = {
        "default_generation_settings": {"n_ctx": 4096},
        "chat_template_caps": {"supports_tool_calls": False, "supports_tools": False},
    }

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (raw := await read_request(reader)) is not None:
            seen.append(raw)
            if raw.startswith(b"GET /props"):
                writer.write(json_answer(props))
            elif raw.startswith(b"POST /v1/chat/completions "):
                call = json.dumps({"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}})
                chunk = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": call}}]}
                end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in (chunk, end))
                writer.write(sse_head() + http_chunk(data + b"data: [DONE]\n\n") + b"0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()

    return handler


def test_tools_a_llama_template_cannot_call_go_the_translated_way() -> None:
    seen: list[bytes] = []
    tool = {
        "name": "get_weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    body = {**HELLO, "tools": [tool], "tool_choice": {"type": "any"}}
    handler = _llama_server_without_tool_calls(seen)
    with (
        raw_server(handler) as (upstream, _),
        run_proxy(upstream, messages="native", upstream_kind="llamacpp") as url,
    ):
        response = httpx.post(url + "/v1/messages", json=body, timeout=10)
        judged(response.content, body, response.status_code, response.headers)
        message = check_message(response.json())
        assert message.stop_reason == "tool_use"
        (call,) = [block for block in message.content if block.type == "tool_use"]
        assert call.input == {"city": "Paris"}
        plain = httpx.post(url + "/v1/messages", json=HELLO, timeout=10)  # no tools: its own endpoint
        assert plain.status_code == 404  # (this upstream's own /v1/messages is not served here)
    assert not any(raw.startswith(b"POST /v1/messages ") and b"get_weather" in raw for raw in seen)
