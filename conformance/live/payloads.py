"""Read a recorded response the way the probes' expectations need: JSON objects, streamed or not."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from conformance.live.recorder import Recording
from conformance.sse import parse_sse

__all__ = ["choices", "error_object", "is_openai_error", "leaked_path", "objects", "streamed"]

# A traceback frame, a path to a model file or under a usual filesystem root: what a client must never
# be shown (a bare file name such as ``model.gguf`` is a name, not a leak).
_LOCAL_PATH = re.compile(
    r'File "[^"]+"|[\w.~-]*/[\w./~-]*\.gguf\b|[A-Za-z]:\\[\w\\.-]+'
    r"|(?<![\w/.:])/(?:home|root|Users|usr|opt|tmp|var|mnt|srv|app|models|data|work)/[\w./@~+-]*"
)


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


def leaked_path(text: str) -> str | None:
    """The first local path or traceback frame in ``text``, if any."""
    match = _LOCAL_PATH.search(text)
    return match.group(0).strip(" \"'(=") if match else None
