"""What the syntaxes whose calls stand in closed sections (Kimi K2's ``<|tool_calls_section_begin|>``,
DeepSeek's ``<｜tool▁calls▁begin｜>``, FunctionGemma's ``<start_function_call>``) share when they read a
text: finding each section's opening and its end, reading the body between them, and the content
around the sections that read.

A section counts only when it closes and its body reads whole; otherwise it stays content verbatim
and the scan goes on after it (never rescanned: linear time). An unclosed section is content at the
answer's end; in a stream it may still close, so nothing from it on is content yet.

Private to this package: a syntax module's ``parse`` is the interface (base.py), these are its parts.
"""

# ruff: noqa: RUF002 -- DeepSeek's tokens are spelled with full-width bars (U+FF5C).
from __future__ import annotations

import re
from collections.abc import Callable

from conformance.tool_formats._scanning import held_back, skip_space
from conformance.tool_formats.base import CallSyntax, ParsedCall, ParsedOutput, Schemas

__all__ = ["SectionSyntax", "calls_in", "read_sections"]


class SectionSyntax(CallSyntax):
    """A syntax whose calls stand in closed sections: ``opening`` (matching any of ``markers``) to
    ``ends[0]``, the calls between read by ``calls``."""

    opening: re.Pattern[str]
    leading_only = False

    def parse(self, text: str, *, final: bool, schemas: Schemas | None = None) -> ParsedOutput:
        return read_sections(
            text,
            final=final,
            opening=self.opening,
            markers=self.markers,
            closing=self.ends[0],
            body=lambda body: self.calls(body, schemas),
        )

    def calls(self, body: str, schemas: Schemas | None) -> list[ParsedCall]:
        """The calls of a section's body, or none if anything in it is not a whole call."""
        raise NotImplementedError


def read_sections(
    text: str,
    *,
    final: bool,
    opening: re.Pattern[str],
    markers: tuple[str, ...],
    closing: str,
    body: Callable[[str], list[ParsedCall]],
) -> ParsedOutput:
    """The calls ``body`` reads in each section (``opening`` ... ``closing``) and the content around
    them; ``markers`` are the openings' spellings, held back while a stream may still be writing one."""
    if not final:
        text = text[: held_back(text, 0, markers)]
    pieces: list[str] = []
    calls: list[ParsedCall] = []
    pos = 0
    while (opened := opening.search(text, pos)) is not None:
        close_at = text.find(closing, opened.end())
        if close_at < 0:
            pieces.append(text[pos:] if final else text[pos : opened.start()])
            return ParsedOutput(_content("".join(pieces), calls, final), calls)
        end = close_at + len(closing)
        found = body(text[opened.end() : close_at])
        pieces.append(text[pos : opened.start()] if found else text[pos:end])
        calls.extend(found)
        pos = end
    pieces.append(text[pos:])
    return ParsedOutput(_content("".join(pieces), calls, final), calls)


def _content(content: str, calls: list[ParsedCall], final: bool) -> str:
    """Calls found: the layout around them goes. In a stream, trailing white space is held back too,
    as it may be the layout before a call still to come."""
    if calls:
        return content.strip()
    return content if final else content.rstrip()


def calls_in(body: str, call: Callable[[str, int], tuple[ParsedCall, int] | None]) -> list[ParsedCall]:
    """The calls of a section's body, white space between them, each read by ``call(BODY, POS)`` (the
    call and the index after it); none if anything in it is not a whole call."""
    calls: list[ParsedCall] = []
    pos = skip_space(body, 0)
    while pos < len(body):
        found = call(body, pos)
        if found is None:
            return []
        calls.append(found[0])
        pos = skip_space(body, found[1])
    return calls
