"""A scripted chat upstream for the agents' tool turns: its first answer streams one tool call, and once
the conversation holds a tool message it streams a text answer, so that an agent's whole turn (the call,
the agent running its tool, the result sent back) goes through the proxy whatever a model would draw."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests.support.servers import RecordingUpstream

__all__ = ["call_then_answer"]

Messages = list[dict[str, Any]]


def _chunks(
    body: dict[str, Any], call: dict[str, str], answer: Callable[[Messages], str]
) -> list[dict[str, Any]]:
    messages: Messages = body.get("messages", [])
    if any(message.get("role") == "tool" for message in messages):
        delta: dict[str, Any] = {"role": "assistant", "content": answer(messages)}
        finish = "stop"
    else:
        fragment = {"index": 0, "id": "call_s1", "type": "function", "function": call}
        delta = {"role": "assistant", "tool_calls": [fragment]}
        finish = "tool_calls"
    head = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1, "model": "scripted"}
    usage = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    return [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**head, "choices": [], "usage": usage},
    ]


def call_then_answer(
    name: str, arguments: dict[str, Any], answer: Callable[[Messages], str]
) -> RecordingUpstream:
    """The upstream: a call of ``name`` with ``arguments`` first, then ``answer(messages)``; every chat
    request it got is in its ``seen``."""
    upstream = RecordingUpstream([])
    call = {"name": name, "arguments": json.dumps(arguments)}

    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        upstream.seen.append(("/v1/chat/completions", body))
        lines = [f"data: {json.dumps(chunk)}\n\n" for chunk in _chunks(body, call, answer)] + [
            "data: [DONE]\n\n"
        ]
        return StreamingResponse(iter(lines), media_type="text/event-stream")

    upstream.app.router.routes.append(Route("/v1/chat/completions", chat, methods=["POST"]))
    return upstream
