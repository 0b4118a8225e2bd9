"""Read a recorded response the way the probes' expectations need: JSON objects, streamed or not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from conformance.live.recorder import Recording
from conformance.sse import parse_sse

__all__ = ["choices", "error_object", "is_openai_error", "objects", "streamed"]


def streamed(recording: Recording) -> bool:
    return recording.headers.get("content-type", "").startswith("text/event-stream")


def objects(recording: Recording) -> Iterator[dict[str, Any]]:
    """Every JSON object of the response: the body, or each ``data:`` payload of a stream."""
    if not streamed(recording):
        value = recording.json()
        if isinstance(value, dict):
            yield value
        return
    for block in parse_sse([recording.body]):
        if not block.dispatched or block.is_done or block.data is None:
            continue
        try:
            value = json.loads(block.data)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            yield value


def choices(recording: Recording) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for obj in objects(recording):
        listed = obj.get("choices")
        if isinstance(listed, list):
            found.extend(c for c in listed if isinstance(c, dict))
    return found


def error_object(recording: Recording) -> dict[str, Any] | None:
    """The ``error`` object of a non-streamed OpenAI error body, else None."""
    value = recording.json()
    if isinstance(value, dict) and isinstance(value.get("error"), dict):
        return value["error"]  # type: ignore[no-any-return]
    return None


def is_openai_error(recording: Recording) -> bool:
    error = error_object(recording)
    return error is not None and isinstance(error.get("message"), str) and isinstance(error.get("type"), str)
