"""Reading a syntax's text a character run at a time: finding the next marker without rescanning,
skipping white space, and holding back a marker cut by the stream.

Private to this package: a syntax module's ``parse`` is the interface (base.py), these are its parts.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable

__all__ = ["NAME", "SPACE", "Finder", "held_back", "skip_space"]

SPACE = " \t\r\n"
"""White space between tags and values: layout, never content."""

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


def skip_space(text: str, i: int, stop: int | None = None) -> int:
    """The first index from ``i`` (before ``stop``, default the text's end) that is no white space,
    else ``stop``."""
    end = len(text) if stop is None else stop
    while i < end and text[i] in SPACE:
        i += 1
    return i


def held_back(text: str, start: int, needles: Iterable[str]) -> int:
    """Where a trailing piece of a marker (``<tool_c``) begins, else ``len(text)``: in a stream it may
    still grow into a call, so it is not content yet. Never before ``start`` (the last call's end)."""
    longest = max((len(n) for n in needles), default=0)
    for size in range(min(longest - 1, len(text) - start), 0, -1):
        tail = text[len(text) - size :]
        if any(n.startswith(tail) for n in needles):
            return len(text) - size
    return len(text)
