"""A JSON Schema ``pattern`` rewritten so that llama.cpp's schema-to-grammar converter grammars the JSON
text of a matching string, not the string itself.

One converter, in two languages: llama.cpp's (``common/json-schema-to-grammar.cpp``, llama-server's
``response_format`` and ``json_schema``) and its Python port in llama-cpp-python (its server's, and the
bundled backend's: backend/grammars.py). Both copy a pattern into GBNF as if the string were written
raw: ``^a"b$`` let the model write ``"a"b"``, invalid JSON (the bundled backend's answer; llama-server
answered its 500 "The model produced output that does not match the expected peg-native format",
measured on b11434), ``.`` and ``[^x]`` admitted a raw quote, backslash or newline, and an escape such as
``\\d`` or ``\\.`` became a GBNF escape that llama.cpp cannot parse: the backend's 400, and llama-server's
warning "accepting any string", the schema then unenforced (measured: ``^\\d{3}\\.x$`` answered with
prose). Here every character class (``[...]``, ``.``, ``\\d``, ``\\w``, ``\\s`` and their negations, an
escaped character, a quote, a control character) becomes a group: one GBNF class of the characters
JSON writes as themselves, and the escapes JSON writes for the others (``\\"``, ``\\\\``, ``\\n``...),
in the converters' own escapes, which both read alike. Control characters without a short escape are
left out: the string then matches a narrower pattern, never a wrong one. A pattern Python's ``re``
cannot compile, or with a construct this rewrite does not carry (lookaround, backreferences, word
boundaries, anchors inside it), raises a ValueError (the caller's 400).
"""

from __future__ import annotations

import re
from typing import Any

from conformance.schema_refs import DATA_KEYWORDS

__all__ = ["json_text_pattern", "patterns_as_json_text"]

Ranges = list[tuple[int, int]]

_MAX = 0x10FFFF
_SETS: dict[str, Ranges] = {
    "d": [(0x30, 0x39)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "s": [(0x09, 0x0D), (0x20, 0x20)],
}
_CONTROLS = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B}
# What JSON writes only as an escape (RFC 8259 section 7), with the escape as the converter's input: two
# backslashes are its GBNF escape of one, and a quote is escaped by the converter itself. 0x7F is written
# raw by JSON but left out of strings by this project's grammars (backend.grammars' ``char``).
_WRITTEN_ESCAPED = {
    0x22: '\\\\"',
    0x5C: "\\\\\\\\",
    0x08: "\\\\b",
    0x09: "\\\\t",
    0x0A: "\\\\n",
    0x0C: "\\\\f",
    0x0D: "\\\\r",
}
_NON_ASCII = (0x80, 0x10FFFF)
_NEVER_RAW: Ranges = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F)]
_QUANTIFIER = re.compile(r"(\d*),?(\d*)\}")
MAX_REPETITION = 1000
"""The count a quantifier may ask (the bundled backend's bound on a schema's counts, schema_support)."""
MAX_GROUP_DEPTH = 100
"""Groups a pattern may nest: the converter recurses into each, and 500 passed Python's recursion limit
(its message, not this bound, was the 400)."""
# Metacharacters the converter reads as a literal when escaped (its ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS).
_CONVERTER_ESCAPES = set("[]()|{}*+?")


def json_text_pattern(pattern: str) -> str:
    """``pattern`` (``^...$``) rewritten for the converter; ValueError where it cannot be."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"pattern /{pattern[:60]}/ is not a valid regular expression ({exc.msg})") from None
    except RecursionError:  # (re's parser recurses into each group)
        raise ValueError(f"groups nested deeper than {MAX_GROUP_DEPTH}") from None
    if not (pattern.startswith("^") and pattern.endswith("$") and len(pattern) >= 2):
        raise ValueError('Pattern must start with "^" and end with "$"')
    body = _Rewrite(pattern[1:-1]).body()
    # In a group: the C++ converter wraps the body so, its Python port does not, and '^a|b$' there was
    # '"\\"" "a" | "b" "\\""', whose first branch leaves the string open (found reviewing this module).
    return f"^({body})$" if body else "^$"


def patterns_as_json_text(schema: Any, *, drop_unenforceable: bool = False) -> Any:
    """A copy of ``schema`` with the ``pattern`` of every object in it rewritten by
    :func:`json_text_pattern`, wherever it is (the converters also read tuple ``items`` and whatever a
    ``$ref`` points at, ``#/components/...`` included), but in data (``enum``, ``const``...). A pattern
    that cannot be raises its ValueError, or with ``drop_unenforceable`` is left out: the string is then
    any string, as llama.cpp's converter takes a pattern it does not support."""
    if isinstance(schema, list):
        return [patterns_as_json_text(item, drop_unenforceable=drop_unenforceable) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        key: value
        if key in DATA_KEYWORDS
        else patterns_as_json_text(value, drop_unenforceable=drop_unenforceable)
        for key, value in schema.items()
    }
    if isinstance(out.get("pattern"), str):
        try:
            out["pattern"] = json_text_pattern(out["pattern"])
        except ValueError:
            if not drop_unenforceable:
                raise
            del out["pattern"]
    return out


class _Rewrite:
    """One pass over a pattern's body (between its anchors), position by position."""

    def __init__(self, body: str) -> None:
        self.text = body
        self.at = 0
        self.depth = 0
        self.counted = False  # (the unit before was a quantifier)
        self.set_in_class = False  # (the class being read holds \\d, \\w, \\s or a negation of one)

    def body(self) -> str:
        out = []
        while self.at < len(self.text):
            out.append(self._unit())
        return "".join(out)

    def _unit(self) -> str:
        after_count = self.counted
        self.counted = False
        c = self.text[self.at]
        self.at += 1
        if c in "*+?":
            return self._quantifier(c, after_count)
        if c == "\\":
            return self._escape_outside()
        if c == "[":
            return _group(self._class())
        if c == ".":
            return _group(_complement([(0x0A, 0x0A), (0x0D, 0x0D)]))
        if c in "^$":
            raise ValueError(f"an anchor inside the pattern (at {self.at}) is not supported")
        if c in "()":
            return self._parenthesis(c)
        if c == "{":
            return self._braces()
        if c in "]}":
            # A regex's lone ] or } is that character; the converter's port read it as nothing and
            # looped without end on it (a worker thread at 100% CPU for good, black-box testing).
            return _escaped(c)
        if c == '"' or ord(c) < 0x20 or ord(c) >= 0x7F:
            # (and non-ASCII as a class: the C++ converter reads a literal byte by byte, so a quantifier
            # after one would repeat its last byte alone)
            return _group([(ord(c), ord(c))])
        return c

    def _quantifier(self, c: str, after_count: bool) -> str:
        """``*``, ``+``, ``?``; after another quantifier, a lazy ``?`` is dropped (it changes no string
        that matches whole) and a possessive ``+`` refused: the converter read either as a quantifier of
        the repetition (``^a+?$`` took the empty string)."""
        if not after_count:
            self.counted = True
            return c
        if c == "?":
            return ""
        raise ValueError("possessive quantifiers (*+, ++, ?+, {m,n}+) are not supported")

    def _braces(self) -> str:
        """A quantifier ``{m}``, ``{m,}``, ``{m,n}`` as it is; else the brace is that character, as a regex
        reads it."""
        counts = _QUANTIFIER.match(self.text, self.at)
        if counts is None or counts.group(0) == "}":  # (a{} is those three characters)
            return _escaped("{")
        if any(int(n) > MAX_REPETITION for n in counts.groups() if n):
            # (the converter writes each repetition as a nested rule: 20,000 overflowed llama.cpp's parser)
            raise ValueError(f"a pattern repeating more than {MAX_REPETITION} times")
        self.at = counts.end()
        self.counted = True
        return "{" + counts.group(0)

    def _parenthesis(self, c: str) -> str:
        if c == ")":
            self.depth -= 1
            return c
        if self.text.startswith("?:", self.at):
            self.at += 2  # (a group that captures nothing: the same strings)
        elif self.text.startswith("?", self.at):
            raise ValueError(f"group syntax (? (at {self.at}) is not supported")
        self.depth += 1
        if self.depth > MAX_GROUP_DEPTH:
            raise ValueError(f"groups nested deeper than {MAX_GROUP_DEPTH}")
        return c

    def _escape_outside(self) -> str:
        c = self._next("a pattern ends with a lone backslash")
        if c in _CONVERTER_ESCAPES:
            return _escaped(c)
        ranges = self._escaped_set(c)
        return _group(self._escaped_one(c) if ranges is None else ranges)

    def _class(self) -> Ranges:
        negated = self.text.startswith("^", self.at)
        self.at += negated
        ranges: Ranges = []
        self.set_in_class = False
        first = True
        while first or not self.text.startswith("]", self.at):
            if self.at >= len(self.text):
                raise ValueError("unbalanced square brackets")
            ranges += self._class_item()
            first = False
        self.at += 1
        if negated and self.set_in_class:
            ranges.append(_NON_ASCII)  # ([^\\d] leaves out other scripts' digits too: ASCII alone is left)
        return _complement(ranges) if negated else ranges

    def _class_item(self) -> Ranges:
        low = self._class_member()
        is_range = self.text.startswith("-", self.at) and not self.text.startswith("-]", self.at)
        if not is_range or len(low) != 1 or low[0][0] != low[0][1]:
            return low
        self.at += 1
        high = self._class_member()
        if len(high) != 1 or high[0][0] != high[0][1]:
            raise ValueError("a range in a character class ends in a set")
        return [(low[0][0], high[0][0])]

    def _class_member(self) -> Ranges:
        c = self._next("unbalanced square brackets")
        if c != "\\":
            return [(ord(c), ord(c))]
        c = self._next("unbalanced square brackets")
        if c == "b":
            return [(0x08, 0x08)]  # a backspace inside a class, as in Python's and ECMAScript's regexes
        ranges = self._escaped_set(c)
        if ranges is not None:
            self.set_in_class = True
            return ranges
        return self._escaped_one(c)

    def _escaped_set(self, c: str) -> Ranges | None:
        """``\\d``, ``\\w``, ``\\s`` and their negations."""
        if c in _SETS:
            return list(_SETS[c])
        if c.lower() in _SETS and c.isupper():
            # ASCII alone: Python's \\d, \\w and \\s hold other scripts' digits, letters and spaces too,
            # so the complement of their ASCII part would admit some (^\\S$ took a no-break space).
            return _complement([*_SETS[c.lower()], _NON_ASCII])
        return None

    def _escaped_one(self, c: str) -> Ranges:
        """The one character an escape other than a set's names: a punctuation mark itself, a control
        (``\\n``), a code (``\\x41``, ``\\u00e9``)."""
        if not c.isalnum():
            return [(ord(c), ord(c))]
        if c in _CONTROLS:
            return [(_CONTROLS[c], _CONTROLS[c])]
        digits = {"x": 2, "u": 4}.get(c)
        code = self.text[self.at : self.at + digits] if digits else ""
        if digits is None or not re.fullmatch(r"[0-9a-fA-F]+", code) or len(code) != digits:
            raise ValueError(f"the escape \\{c} in a pattern is not supported")
        self.at += digits
        return [(int(code, 16), int(code, 16))]

    def _next(self, missing: str) -> str:
        if self.at >= len(self.text):
            raise ValueError(missing)
        self.at += 1
        return self.text[self.at - 1]


def _escaped(c: str) -> str:
    """A metacharacter as itself, in a group of its own: the converter adds the character an escape
    names to the literal before it, so that a quantifier after it (``a\\(+``) repeated the whole."""
    return "(\\" + c + ")"


def _merged(ranges: Ranges) -> Ranges:
    merged: Ranges = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _complement(ranges: Ranges) -> Ranges:
    out: Ranges = []
    start = 0
    for low, high in _merged(ranges):
        if low > start:
            out.append((start, low - 1))
        start = max(start, high + 1)
    if start <= _MAX:
        out.append((start, _MAX))
    return out


def _group(ranges: Ranges) -> str:
    """The characters of ``ranges`` as JSON writes them: a GBNF class of those written raw, and the
    escapes of those that JSON escapes, as one group the converter copies (a quantifier after it applies
    to the whole)."""
    merged = _merged(ranges)
    raw = _merged([(low, high) for low, high in _complement(_NEVER_RAW + _complement(merged))])
    branches = ["[" + "".join(_class_span(low, high) for low, high in raw) + "]"] if raw else []
    branches += [text for code, text in _WRITTEN_ESCAPED.items() if _holds(merged, code)]
    if not branches:
        raise ValueError("a character class in a pattern holds only characters JSON cannot write here")
    return "(" + "|".join(branches) + ")"


def _holds(ranges: Ranges, code: int) -> bool:
    return any(low <= code <= high for low, high in ranges)


def _class_span(low: int, high: int) -> str:
    return _gbnf_char(low) if low == high else f"{_gbnf_char(low)}-{_gbnf_char(high)}"


def _gbnf_char(code: int) -> str:
    if code < 0x100:
        return f"\\x{code:02X}"
    if code < 0x10000:
        return f"\\u{code:04X}"
    return f"\\U{code:08X}"
