"""A raw chat-completions upstream for the translated protocols' client tests (the Responses API, the
Messages API): it streams a call to ``get_weather`` with ``{"city": "Paris"}`` when offered tools,
answers ``It is <output>`` to a tool's output, ``Hello there`` otherwise (a whole completion when not
asked to stream), and counts a text's tokens as its words at ``POST /tokenize`` (llama.cpp's shape)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from .rawserver import Record, http_chunk, json_answer, read_request, sse_head

__all__ = ["handle_chat"]


def _event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    payload = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "/models/gemma.gguf",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _answer(request: dict[str, Any]) -> list[bytes]:
    last = request["messages"][-1]
    if last["role"] == "tool":
        return [
            _event({"role": "assistant", "content": "It is "}),
            _event({"content": last["content"]}, "stop"),
        ]
    if request.get("tools"):
        first = {
            "index": 0,
            "id": "call_abc",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        }
        return [
            _event({"role": "assistant", "tool_calls": [first]}),
            _event({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
            _event({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}, "tool_calls"),
        ]
    return [_event({"role": "assistant", "content": "Hello"}), _event({"content": " there"}, "stop")]


async def handle_chat(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """The upstream's connection handler (for ``raw_server``)."""
    while (raw := await read_request(reader)) is not None:
        head, body = raw.split(b"\r\n\r\n", 1)
        if head.startswith(b"POST /tokenize "):
            words = json.loads(body).get("content", "").split()
            writer.write(json_answer({"tokens": list(range(len(words)))}))
            continue
        if not head.startswith(b"POST /v1/chat/completions "):
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            continue
        request = json.loads(body)
        record.requests += 1
        events = b"".join(_answer(request))
        if request.get("stream"):
            writer.write(sse_head() + http_chunk(events + b"data: [DONE]\n\n") + b"0\r\n\r\n")
        else:  # the proxy aggregates a stream for a client that did not ask for one; here answer whole
            chunks = [json.loads(line[6:]) for line in events.split(b"\n\n") if line]
            text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
            calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls") or []]
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                arguments = "".join(tc["function"]["arguments"] for tc in calls)
                message["tool_calls"] = [
                    {**calls[0], "function": {"name": "get_weather", "arguments": arguments}}
                ]
            body_out = json.dumps(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": "/models/gemma.gguf",
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": chunks[-1]["choices"][0]["finish_reason"],
                        }
                    ],
                    "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
                }
            ).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body_out)}\r\n\r\n".encode()
                + body_out
            )
        await writer.drain()
