"""Whether a streamed call's argument fragments, so far, make one whole JSON object: read fragment by
fragment, each character once.

A fragment without ``index`` that repeats the last call's name opens a new call only when the last one's
arguments are whole (Q63, Q64: vLLM repeats the name). That used to be asked by parsing all fragments
joined, at every such fragment: quadratic, and 40,000 fragments that each end in ``}`` without ever
making an object took 13.2 s of the event loop (issue 32). Here the braces are counted outside strings
as the fragments come; a parse runs only once the text has the shape of one object (it opened with
``{`` and closed back to depth 0 with nothing after), which happens at most once per call: any
character after that close breaks the shape for good.

The fragments are held for that parse up to ``MOST_PARSED`` characters only. Held whole, one call of
9 MB of arguments took the stream to a peak of 137 MB of Python's allocations (the text held, joined,
and read by orjson, which costs 13 times a long string's size); past the bound the shape alone answers:
an object opened and closed back outside strings is taken for whole (issue 32: a stream's memory is
bounded whatever its length). What the shape cannot see there (``{"a": tru}``) goes out as the upstream
wrote it.
"""

from __future__ import annotations

import re

from conformance import jsoncodec

__all__ = ["MOST_PARSED", "ObjectShape"]

MOST_PARSED = 1 << 20
"""Characters of a call's arguments held for the parse that confirms their shape (see above)."""

# A backslash and what it escapes, a quote, a bracket, or a run of anything else that is not space.
_MARKS = re.compile(r'\\.?|["{}\[\]]|[^\s"{}\[\]\\]+', re.DOTALL)


class ObjectShape:
    """One call's arguments as they stream: ``whole`` says whether they are one JSON object now."""

    __slots__ = ("_closed", "_depth", "_escaped", "_held", "_in_string", "_parts", "_verdict", "broken")

    def __init__(self) -> None:
        self._parts: list[str] | None = []  # None: past MOST_PARSED, the shape alone answers
        self._held = 0
        self._depth = 0
        self._in_string = False
        self._escaped = False  # a backslash ended the last fragment, inside a string
        self._closed = False
        self._verdict: bool | None = None  # the one parse's answer, once closed
        self.broken = False

    def feed(self, fragment: str) -> None:
        if self.broken or not fragment:
            return
        if self._parts is not None:
            self._held += len(fragment)
            self._parts.append(fragment)
            if self._held > MOST_PARSED:
                self._parts = None
        start = 0
        if self._escaped:
            self._escaped, start = False, 1
        for mark in _MARKS.finditer(fragment, start):
            self._read(mark.group())
            if self.broken:
                self._parts = []
                return

    def _read(self, mark: str) -> None:
        if self._in_string:
            if mark == '"':
                self._in_string = False
            elif mark == "\\":
                self._escaped = True  # (the fragment ended: the next one's first character is escaped)
            return
        if self._closed or (self._depth == 0 and mark != "{") or mark[0] == "\\":
            self.broken = True  # something after the object, an object that does not open with "{"
        elif mark in ("{", "["):
            self._depth += 1
        elif mark in ("}", "]"):
            self._depth -= 1
            self._closed = self._depth == 0
        elif mark == '"':
            self._in_string = True

    @property
    def blank(self) -> bool:
        """Nothing but white space read yet (no mark moves the state from where it starts)."""
        return not (self.broken or self._closed or self._in_string or self._depth)

    @property
    def whole(self) -> bool:
        if self.broken or not self._closed:
            return False
        if self._verdict is None:
            try:
                self._verdict = self._parts is None or isinstance(jsoncodec.loads("".join(self._parts)), dict)
            except ValueError:
                self._verdict = False
        return self._verdict
