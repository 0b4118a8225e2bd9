"""A large JSON body read in small steps, so that the thread reading it lets the event loop run.

The proxy parses a large request body in a worker thread, but a parser written in C holds the GIL for
the whole document: orjson read a 14 MB body of 400,000 one-word Responses input items in 250-313 ms,
and ``GET /health`` waited 264 ms beside it (issue 32, item 1; the goal is 250 ms for any body under
``--max-body``). Here the top ``SPLIT_DEPTH`` levels of arrays and objects are walked in Python and each
value below them (a message, a content part) is read by the standard parser's C scanner, so the
interpreter can hand the GIL to the event loop between any two of them (every
``sys.getswitchinterval()``, 5 ms by default). The walk costs several times orjson's CPU, so only a
body whose commas say that it holds many values takes it (``worth_steps``): a prompt of a few long
strings, however large, is read by orjson at once.

What it reads is what Python's ``json`` reads (orjson's fallback in ``jsoncodec.loads``): the same
values, the same errors with the same line and column, and ``TooDeep`` past ``jsoncodec.MAX_DEPTH``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from conformance import jsoncodec

__all__ = ["MANY_VALUES", "SPLIT_DEPTH", "loads_in_steps", "worth_steps"]

SPLIT_DEPTH = 2
"""Levels walked in Python: a body and its arrays, so that each message or input item is one step. A
level deeper (each item's fields) cost 5x more again on 400,000 items (13.6 s against 2.9 s, orjson
0.74 s, on a loaded 2-core machine), so one item of very many parts is still read in one step."""
MANY_VALUES = 50_000
"""Commas past which a body is read in steps: orjson reads that many small values in a few ms."""
_SPACE = re.compile(r"[ \t\n\r]*")


def worth_steps(raw: bytes) -> bool:
    """Whether ``raw`` may hold so many values that one C call reading it would hold the loop."""
    return raw.count(b",") > MANY_VALUES


def loads_in_steps(text: str, decoder: json.JSONDecoder) -> Any:
    """``text`` read as ``decoder.decode`` would, in steps; ``json.JSONDecodeError`` or
    ``jsoncodec.TooDeep`` as the standard parser would raise them."""
    reader = _Reader(text, decoder)
    value, end = reader.value(reader.space(0), 0)
    end = reader.space(end)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


class _Reader:
    """The walk; ``scan`` is the C scanner behind ``decoder.raw_decode`` (no wrapper per value), and
    every step is written out because a walk step costs microseconds on 400,000 items."""

    def __init__(self, text: str, decoder: json.JSONDecoder) -> None:
        self.text = text
        # The decoder's C scanner and string reader: instance attributes its type stubs do not name.
        self.scan: Callable[[str, int], tuple[Any, int]] = vars(decoder)["scan_once"]
        self.string: Callable[[str, int, bool], tuple[str, int]] = vars(decoder)["parse_string"]
        self.strict = decoder.strict
        self.match = _SPACE.match

    def space(self, at: int) -> int:
        return self.match(self.text, at).end()  # type: ignore[union-attr]  # [ \t\n\r]* always matches

    def value(self, at: int, depth: int) -> tuple[Any, int]:
        text = self.text
        opener = text[at : at + 1]
        if depth < SPLIT_DEPTH and opener == "{":
            return self.members(at + 1, depth + 1)
        if depth < SPLIT_DEPTH and opener == "[":
            return self.elements(at + 1, depth + 1)
        try:
            value, end = self.scan(text, at)
        except StopIteration as err:
            raise json.JSONDecodeError("Expecting value", text, err.value) from None
        except RecursionError:
            raise jsoncodec.TooDeep from None
        allowed = jsoncodec.MAX_DEPTH - depth
        if text.count("[", at, end) + text.count("{", at, end) > allowed and jsoncodec.too_deep(
            text[at:end], value, allowed
        ):
            raise jsoncodec.TooDeep
        return value, end

    def members(self, at: int, depth: int) -> tuple[dict[str, Any], int]:
        text, space, value = self.text, self.space, self.value
        found: dict[str, Any] = {}
        at = space(at)
        if text[at : at + 1] == "}":
            return found, at + 1
        while True:
            if text[at : at + 1] != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, at)
            key, at = self.string(text, at + 1, self.strict)
            at = space(at)
            if text[at : at + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, at)
            found[key], at = value(space(at + 1), depth)
            at = space(at)
            sign = text[at : at + 1]
            if sign == "}":
                return found, at + 1
            if sign != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
            at = space(at + 1)

    def elements(self, at: int, depth: int) -> tuple[list[Any], int]:
        text, space, value = self.text, self.space, self.value
        found: list[Any] = []
        at = space(at)
        if text[at : at + 1] == "]":
            return found, at + 1
        while True:
            item, at = value(at, depth)
            found.append(item)
            at = space(at)
            sign = text[at : at + 1]
            if sign == "]":
                return found, at + 1
            if sign != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
            at = space(at + 1)
