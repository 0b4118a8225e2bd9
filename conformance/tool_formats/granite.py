"""IBM Granite 3.x: ``<|tool_call|>[{"name": ..., "arguments": {...}}, ...]``.

What a model writes: the marker, then a JSON array of calls (parallel calls are items of the one
array), which ends the answer::

    <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]

Where the facts come from:

- the Granite 3.x chat templates (granite-3.1/3.2/3.3-*-instruct), which write an assistant's calls as
  ``<|tool_call|>`` and the ``tool_calls`` list as JSON;
- llama.cpp's ``common_chat_parse_granite`` (common/chat-parser.cpp): after any ``<think>`` and
  ``<response>`` tags, it finds ``<|tool_call|>`` and reads one JSON array of ``{"name", "arguments"}``
  objects there (arguments re-dumped as a string), the text before the marker being content;
- tests/test-chat.cpp, the Granite cases (``<|tool_call|>[{"name": "special_function", "arguments":
  {"arg1": 1}}]`` -> one call; the array cut short, ``<|tool_call|>[{"name": "special_function"``, is
  a call still being written: here no call yet, since only whole calls count).

llama.cpp reads one marker and refuses text after the array (the whole answer then falls back to
content); here each marker is tried in turn and text after an array stays content: the calls are
still whole, and no text is dropped.

Granite 4 writes Hermes's ``<tool_call>{json}</tool_call>`` instead: that is
conformance/tool_formats/hermes.py, not this module.
"""

from __future__ import annotations

from conformance.tool_formats._marker_scan import OPEN, MarkerSyntax, Outcome
from conformance.tool_formats._scanning import Finder
from conformance.tool_formats.base import ParsedCall, Schemas, call_from_object, decode_json_at

__all__ = ["Granite"]

MARKER = "<|tool_call|>"
_MAX_FAILED = 64
"""Markers whose JSON did not read, after which the rest of a text is content. Each failed read may run
to the text's end (an unclosed string spanning the later markers), so trying every one of 10,000
markers would be quadratic; a model's own answer holds one marker."""


class Granite(MarkerSyntax):
    name = "granite"
    markers = (MARKER,)
    ends = ()  # the array ends the answer: only the answer's end says the calls are whole

    def reader(self, text: str, schemas: Schemas | None, final: bool) -> _Reader:
        return _Reader(text, final)


class _Reader:
    def __init__(self, text: str, final: bool) -> None:
        self.text = text
        self.final = final
        self.markers = Finder(text, MARKER)
        self.failed = 0

    def next_marker(self, pos: int) -> int | None:
        return self.markers.next(pos)

    def attempt(self, start: int) -> Outcome:
        after = start + len(MARKER)
        found = decode_json_at(self.text, after)
        if found is None:
            # In a stream the array may still be coming; at the end it never came (content).
            self.failed += 1
            return OPEN if not self.final or self.failed >= _MAX_FAILED else Outcome(after)
        calls = _calls(found[0])
        if calls is None:
            return Outcome(after)
        return Outcome(found[1], calls)


def _calls(value: object) -> tuple[ParsedCall, ...] | None:
    """The calls of an array, or None unless every item is a call with an object for arguments."""
    if not isinstance(value, list) or not value:
        return None
    calls = [call_from_object(item) for item in value]
    if any(call is None for call in calls):
        return None
    return tuple(call for call in calls if call is not None)
