"""Checks of Messages API answers: the suite's judge (``judged``) and anthropic-python's own types
(``check_message``), and the events of a stream (``message_events``), each named as its data's type."""

from __future__ import annotations

import json
from typing import Any

from anthropic.types import Message

from conformance.judge import judge_response
from conformance.sse import parse_sse


def judged(
    body: bytes, request: dict[str, Any], status: int, headers: Any, path: str = "/v1/messages"
) -> None:
    """``body``, the answer to ``request`` on ``POST /v1/messages``, judged without an error."""
    verdict = judge_response(
        body,
        request={"method": "POST", "path": path, "body": request},
        status=status,
        headers=dict(headers),
    )
    assert verdict.endpoint == "messages"
    assert verdict.errors == [], [f"{f.rule}: {f.message}" for f in verdict.errors]


def message_events(body: bytes) -> list[dict[str, Any]]:
    """The JSON events of a stream; each block's ``event:`` name must be its data's ``type``."""
    events = []
    for block in parse_sse([body]):
        if block.data is None:
            continue
        event = json.loads(block.data)
        assert block.event == event["type"], (block.event, event)
        events.append(event)
    return events


def check_message(body: dict[str, Any]) -> Message:
    """A Message body as anthropic-python reads it, with Anthropic's ids."""
    message = Message.model_validate(body)
    assert message.id.startswith("msg_")
    for block in message.content:
        if block.type == "tool_use":
            assert block.id.startswith("toolu_")
    return message
