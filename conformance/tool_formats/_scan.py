"""What the tag-delimited syntaxes (Qwen XML, GLM, Granite) share when they read a text: finding the
next marker without rescanning, holding back a marker cut by the stream, and putting the content
back together around the calls taken out.

Private to this package: a syntax module's ``parse`` is the interface (base.py), these are its parts.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from conformance.tool_formats.base import ParsedCall, ParsedOutput, Schemas

__all__ = ["NAME", "OPEN", "Finder", "Outcome", "assemble", "parameter_schema", "read", "skip_space"]

_SPACE = " \t\r\n"

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]*")
"""A function name as the calls write it (OpenAI's ``[a-zA-Z0-9_-]``, plus the ``.`` and ``:`` of
namespaced tools): prose caught between tags (``<tool_call>...</tool_call>``) is no name."""


class Finder:
    """Where ``needle`` next occurs at or after a position, for a scan that asks many times.

    Each occurrence is searched for once, left to right, and remembered: a scan that tries every marker
    (10,000 unclosed ``<tool_call>`` lines, or blocks nested in one that does not parse) asks for the
    same close tag from many places, and a fresh ``find`` each time would rescan the same stretch once
    per marker in it."""

    __slots__ = ("_found", "_needle", "_scanned", "_text")

    def __init__(self, text: str, needle: str) -> None:
        self._text = text
        self._needle = needle
        self._found: list[int] = []
        self._scanned = 0  # every occurrence that starts before this is in _found

    def next(self, pos: int, stop: int | None = None) -> int | None:
        """The first occurrence at or after ``pos`` that ends by ``stop`` (default: the text's end)."""
        k = bisect_left(self._found, pos)
        while k == len(self._found):
            at = self._text.find(self._needle, self._scanned)
            if at < 0:
                self._scanned = len(self._text) + 1
                return None
            self._found.append(at)
            self._scanned = at + 1
            k = bisect_left(self._found, pos)
        hit = self._found[k]
        limit = len(self._text) if stop is None else stop
        return hit if hit + len(self._needle) <= limit else None


def skip_space(text: str, i: int, stop: int) -> int:
    """The first index from ``i`` (before ``stop``) that is no white space, else ``stop``."""
    while i < stop and text[i] in _SPACE:
        i += 1
    return i


def parameter_schema(schemas: Schemas | None, name: str, key: str) -> Any:
    """The schema of parameter ``key`` of function ``name``, or None where the request says nothing."""
    if not isinstance(schemas, Mapping):
        return None
    parameters = schemas.get(name)
    if not isinstance(parameters, Mapping):
        return None
    properties = parameters.get("properties")
    return properties.get(key) if isinstance(properties, Mapping) else None


def _held_back(text: str, start: int, needles: Iterable[str]) -> int:
    """Where a trailing piece of a marker (``<tool_c``) begins, else ``len(text)``: in a stream it may
    still grow into a call, so it is not content yet. Never before ``start`` (the last call's end)."""
    longest = max((len(n) for n in needles), default=0)
    for size in range(min(longest - 1, len(text) - start), 0, -1):
        tail = text[len(text) - size :]
        if any(n.startswith(tail) for n in needles):
            return len(text) - size
    return len(text)


def assemble(
    text: str, spans: list[tuple[int, int]], *, cut: int, final: bool, needles: Iterable[str]
) -> str:
    """The content: ``text[:cut]`` with the call spans taken out.

    With calls, the white space around them is the template's layout, not the model's prose: each
    piece between calls is stripped and the pieces are joined by a blank line, as llama.cpp's XML
    parser joins content around a call (common/chat-parser-xml-toolcall.cpp). Without calls and
    ``final``, the text is the content verbatim. In a stream (not ``final``) trailing white space and a
    trailing piece of a marker are held back: either may still turn out to be layout before a call,
    and content once sent cannot be taken back."""
    last = spans[-1][1] if spans else 0
    if not final and cut == len(text):
        cut = max(last, _held_back(text, last, needles))
    if not spans:
        return text[:cut] if final else text[:cut].rstrip()
    pieces: list[str] = []
    previous = 0
    for start, end in spans:
        pieces.append(text[previous:start].strip())
        previous = end
    pieces.append(text[previous:cut].strip())
    return "\n\n".join(piece for piece in pieces if piece)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one marker opened: whole ``calls`` (Granite's array holds several) ending at ``end``; no
    call, the scan going on at ``end`` (the markup stays content); or, ``open``, a call not finished in
    this text."""

    end: int = 0
    calls: tuple[ParsedCall, ...] = ()
    open: bool = False


OPEN = Outcome(open=True)


def read(
    text: str,
    *,
    final: bool,
    next_marker: Callable[[int], int | None],
    attempt: Callable[[int], Outcome],
    needles: Iterable[str],
) -> ParsedOutput:
    """The calls read at each marker in turn, and the content around them.

    An open call ends the scan: no later close tag exists to finish one after it (the search for it
    ran to the text's end), and in a stream nothing after it is content yet."""
    spans: list[tuple[int, int]] = []
    calls: list[ParsedCall] = []
    cut = len(text)
    pos = 0
    while (start := next_marker(pos)) is not None:
        outcome = attempt(start)
        if outcome.open:
            cut = len(text) if final else start
            break
        if outcome.calls:
            spans.append((start, outcome.end))
            calls.extend(outcome.calls)
        pos = max(outcome.end, start + 1)
    content = assemble(text, spans, cut=cut, final=final, needles=needles)
    return ParsedOutput(content, calls)
