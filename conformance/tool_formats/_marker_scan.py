"""What the tag-delimited syntaxes (Qwen XML, GLM, Granite) share when they read a text: trying each
marker in turn, reading the call a pair of tags encloses, and putting the content back together around
the calls taken out.

Private to this package: a syntax module's ``parse`` is the interface (base.py), these are its parts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from conformance.tool_formats._scanning import NAME, Finder, held_back
from conformance.tool_formats.base import CallSyntax, ParsedCall, ParsedOutput, Schemas

__all__ = ["OPEN", "MarkerReader", "MarkerSyntax", "Outcome", "TagReader", "assemble", "read"]


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
        cut = max(last, held_back(text, last, needles))
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


class MarkerReader(Protocol):
    """One text's scan: where the next marker stands, and what the one at ``start`` opened."""

    def next_marker(self, pos: int) -> int | None: ...

    def attempt(self, start: int) -> Outcome: ...


class MarkerSyntax(CallSyntax):
    """A syntax read marker by marker (``read``), its ``reader`` scanning one text."""

    leading_only = False

    def parse(self, text: str, *, final: bool, schemas: Schemas | None = None) -> ParsedOutput:
        reader = self.reader(text, schemas, final)
        needles = self.needles()
        return read(
            text, final=final, next_marker=reader.next_marker, attempt=reader.attempt, needles=needles
        )

    def reader(self, text: str, schemas: Schemas | None, final: bool) -> MarkerReader:
        raise NotImplementedError

    def needles(self) -> tuple[str, ...]:
        """What a stream's trailing text is held back for while it may be the start of one."""
        return self.markers


class TagReader:
    """One text's scan for calls a pair of tags encloses, each tag searched for once (Finder)."""

    def __init__(self, text: str, schemas: Schemas | None) -> None:
        self.text = text
        self.schemas = schemas
        # How far the current attempt read before it failed: a marker before there is markup of the
        # block that failed (it would be read again, and fail again, at every nested marker: quadratic).
        self.reached = 0

    def enclosed(
        self,
        start: int,
        opening: str,
        closing: str,
        closes: Finder,
        call: Callable[[int, int], ParsedCall | None],
    ) -> Outcome:
        """The call ``call(BODY, CLOSE)`` reads between the ``opening`` tag at ``start`` and the next
        ``closing`` one."""
        body = start + len(opening)
        close = closes.next(body)
        if close is None:
            return OPEN
        end = close + len(closing)
        self.reached = body
        found = call(body, close)
        if found is None:
            self.failed(end)
            return Outcome(self.reached)  # a block nested in it after that may still be whole
        return Outcome(end, (found,))

    def failed(self, end: int) -> None:
        """A block ending at ``end`` did not parse (a syntax that must remember it says so here)."""

    def named_call(
        self,
        name: str | None,
        i: int,
        stop: int,
        arguments: Callable[[str, int, int], dict[str, Any] | None],
    ) -> ParsedCall | None:
        """The call to ``name`` whose ``arguments(NAME, I, STOP)`` read ``text[i:stop]``; None where
        ``name`` is no function name (prose caught between tags) or the arguments do not read."""
        if name is None or not NAME.fullmatch(name):
            return None
        found = arguments(name, i, stop)
        return None if found is None else ParsedCall(name, json.dumps(found, ensure_ascii=False))
