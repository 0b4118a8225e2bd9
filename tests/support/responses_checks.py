"""Checks of Responses API answers: the suite's judge (``judged``), and openai-python's own types with
the stream's rules (``check_events``, ``check_response``) for events and bodies a client already parsed."""

from __future__ import annotations

import json
import typing
from typing import Any

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel

from conformance.judge import judge_response
from conformance.rules.context import OPEN_RESPONSES_PROFILE
from conformance.sse import parse_sse

# Each event type's own model (a failed union names all 59 of them).
_EVENTS: dict[str, type[BaseModel]] = {
    typing.get_args(model.model_fields["type"].annotation)[0]: model
    for model in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}
_TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def judged(body: bytes, request: dict[str, Any], status: int, headers: Any) -> None:
    """``body``, the answer to ``request`` on ``POST /v1/responses``, judged without an error by the
    Open Responses profile (the stricter Response its compliance suite requires)."""
    verdict = judge_response(
        body,
        request={"method": "POST", "path": "/v1/responses", "body": request},
        status=status,
        headers=dict(headers),
        profile=OPEN_RESPONSES_PROFILE,
    )
    assert verdict.endpoint == "responses"
    assert verdict.errors == [], [f"{f.rule}: {f.message}" for f in verdict.errors]


def sse_events(body: bytes) -> list[dict[str, Any]]:
    """The JSON events of a stream; each block's ``event:`` name must be its data's ``type``."""
    events = []
    for block in parse_sse([body]):
        if block.data is None:
            continue
        event = json.loads(block.data)
        assert block.event in (None, event.get("type")), (block.event, event)
        events.append(event)
    return events


def check_response(body: dict[str, Any]) -> None:
    """A Response object as openai-python reads it, with its usage's arithmetic right."""
    Response.model_validate(body)
    assert body["object"] == "response"
    assert body["id"].startswith("resp_")
    usage = body.get("usage")
    if usage is not None:
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    if body["status"] == "incomplete":
        assert body["incomplete_details"] is not None
    for item in body["output"]:
        assert item["id"]


def check_events(events: list[dict[str, Any]]) -> None:
    """The stream rules: each event a ResponseStreamEvent, ``sequence_number`` from 0 without a gap,
    ``response.created`` first, exactly one terminal event and last, indexes and ids consistent,
    deltas joined equal to their ``.done``."""
    assert events, "no events"
    for number, event in enumerate(events):
        _EVENTS[event["type"]].model_validate(event)
        assert event["sequence_number"] == number, event
    assert events[0]["type"] == "response.created"
    terminal = [e for e in events if e["type"] in _TERMINAL]
    assert len(terminal) == 1, [e["type"] for e in events]
    assert events[-1] is terminal[0], [e["type"] for e in events]
    response_id = events[0]["response"]["id"]
    items: dict[str, int] = {}
    texts: dict[str, str] = {}
    for event in events:
        kind = event["type"]
        if "response" in event:
            assert event["response"]["id"] == response_id
        if kind == "response.output_item.added":
            assert event["output_index"] == len(items)
            items[event["item"]["id"]] = event["output_index"]
        elif "item_id" in event:
            assert items[event["item_id"]] == event["output_index"], event
        if kind.endswith(".delta"):
            texts[event["item_id"] + kind] = texts.get(event["item_id"] + kind, "") + event["delta"]
        if kind in ("response.output_text.done", "response.reasoning_text.done"):
            assert texts.get(event["item_id"] + kind.replace(".done", ".delta"), "") == event["text"]
        if kind == "response.function_call_arguments.done":
            joined = texts.get(event["item_id"] + "response.function_call_arguments.delta", "")
            assert joined == event["arguments"]
        if kind == "response.output_item.done":
            assert items[event["item"]["id"]] == event["output_index"]
    final = events[-1]["response"]
    check_response(final)
    assert [item["id"] for item in final["output"]] == list(items)
    if final["status"] == "completed":
        assert final["usage"] is not None
