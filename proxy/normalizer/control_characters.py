"""Raw control characters inside the strings of a tool call's arguments, escaped (Q82).

llama-cpp-python's JSON grammar lets a string hold any character but ``"`` and ``\\`` (its ``char``
rule is ``[^"\\\\]``), so a model may write a raw newline or tab into an argument's value: the
arguments are then not JSON (RFC 8259 section 7: control characters must be escaped), every client's
``json.loads`` of them fails, and so does the Responses route's ``function_call`` item. What the model
meant is plain: the character inside the string, which its escape (``\\n``, ``\\u0001``) says in JSON.

A stream's arguments come in fragments cut anywhere, so :class:`ArgumentStrings` carries across them
whether the text is inside a string and whether the last character was a backslash. A control
character outside a string is left as it is: a newline or tab there is JSON whitespace, and anything
else has no meaning to recover.
"""

from __future__ import annotations

import re

__all__ = ["ArgumentStrings"]

# What changes what a scan knows: an escape (a backslash and the character after it, or a backslash
# that ends the fragment), a quote, a control character; everything between them is copied as it is.
_MARKS = re.compile(r'\\[\s\S]?|["\x00-\x1f]')
_SHORT = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    return _SHORT.get(char) or f"\\u{ord(char):04x}"


class ArgumentStrings:
    """Where one call's arguments stand: inside a string or not, and after a backslash that ended the
    last fragment or not."""

    __slots__ = ("escaped", "in_string")

    def __init__(self) -> None:
        self.in_string = False
        self.escaped = False

    def escape(self, fragment: str) -> str:
        """``fragment`` with the raw control characters inside strings escaped; the same object when
        there were none (the caller counts a repair when the result is not ``fragment``)."""
        out: list[str] = []
        copied = 0
        start = 0
        if self.escaped and fragment:  # the last fragment's backslash escapes this one's first character
            self.escaped = False
            start = 1
            if fragment[0] < " ":  # (that backslash is sent: it becomes an escaped one, see below)
                out.append("\\" + _escape(fragment[0]))
                copied = 1
        for mark in _MARKS.finditer(fragment, start):
            char = mark.group()
            if char[0] == "\\":
                self.escaped = len(char) == 1 and self.in_string
                if len(char) == 2 and char[1] < " " and self.in_string:
                    # A backslash before a raw control character (a shell line's continuation): the
                    # backslash itself, escaped, then the character's escape.
                    out += (fragment[copied : mark.start()], "\\\\" + _escape(char[1]))
                    copied = mark.end()
            elif char == '"':
                self.in_string = not self.in_string
            elif self.in_string:
                out += (fragment[copied : mark.start()], _escape(char))
                copied = mark.end()
        if not out:
            return fragment
        out.append(fragment[copied:])
        return "".join(out)
