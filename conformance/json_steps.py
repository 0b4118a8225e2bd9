"""A large JSON body read in small steps, so that the thread reading it lets the event loop run.

The proxy parses a large request body in a worker thread, but a parser written in C holds the GIL for
the whole document: orjson read a 14 MB body of 400,000 one-word Responses input items in 250-313 ms,
and ``GET /health`` waited 264 ms beside it (issue 32, item 1; the goal is 250 ms for any body under
``--max-body``). Here each value is read by the standard parser's C scanner over a window of at most
``WINDOW`` characters of the text; a container longer than that is walked in Python instead, its
members read the same way. So no C call reads more than a window, however the values are nested (one
message of 350,000 content parts held the loop 497 ms when each message was one step), and the
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

__all__ = ["MANY_VALUES", "WALK_DEPTH", "WINDOW", "loads_in_steps", "worth_steps"]

WINDOW = 1 << 18
"""Characters one C call reads at most: 256 KiB of the smallest values is a few ms of parsing."""
WALK_DEPTH = 6
"""Levels of containers longer than a window that are walked (``tools[i].function.parameters.
properties`` is five deep); a longer one deeper is read in one call. Each walked container costs up to
two failed reads of a window first, so without this bound a body of 60 chains of arrays 250 deep around
300 KB each cost some 8 G characters of scanning (a read-only review's estimate) where orjson takes
tens of ms; with it a body costs at most 2 x WALK_DEPTH times its size in failed reads."""
MANY_VALUES = 50_000
"""Commas past which a body is read in steps: orjson reads that many small values in a few ms."""
_SPACE = re.compile(r"[ \t\n\r]*")


def worth_steps(raw: bytes) -> bool:
    """Whether ``raw`` may hold so many values that one C call reading it would hold the loop."""
    # A comma per value and a byte at least for each: a body that short holds too few for a count
    # (which costs 24 us per 55 KB).
    return len(raw) > 2 * MANY_VALUES and raw.count(b",") > MANY_VALUES


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
    every step is written out because a step costs microseconds on 400,000 items."""

    def __init__(self, text: str, decoder: json.JSONDecoder) -> None:
        self.text = text
        # The decoder's C scanner and string reader: instance attributes its type stubs do not name.
        self.scan: Callable[[str, int], tuple[Any, int]] = vars(decoder)["scan_once"]
        self.string: Callable[[str, int, bool], tuple[str, int]] = vars(decoder)["parse_string"]
        self.strict = decoder.strict
        self.match = _SPACE.match
        self.window = ""
        """A slice of ``text`` that values are read from, so that no read runs past it."""
        self.window_at = 0
        """Where ``window`` starts in ``text``."""

    def space(self, at: int) -> int:
        return self.match(self.text, at).end()  # type: ignore[union-attr]  # [ \t\n\r]* always matches

    def value(self, at: int, depth: int) -> tuple[Any, int]:
        read = self.within_window(at) if depth < WALK_DEPTH else self.whole(at)
        if read is None:
            opener = self.text[at : at + 1]
            if opener in ("{", "[") and depth >= jsoncodec.MAX_DEPTH:
                raise jsoncodec.TooDeep
            if opener == "{":
                return self.members(at + 1, depth + 1)
            if opener == "[":
                return self.elements(at + 1, depth + 1)
            read = self.whole(at)  # a string longer than a window: read at the speed of a copy
        value, end = read
        allowed = jsoncodec.MAX_DEPTH - depth
        text = self.text
        if text.count("[", at, end) + text.count("{", at, end) > allowed and jsoncodec.too_deep(
            text[at:end], value, allowed
        ):
            raise jsoncodec.TooDeep
        return value, end

    def within_window(self, at: int) -> tuple[Any, int] | None:
        """The value at ``at`` and where it ends, read by one C call over at most ``WINDOW``
        characters; None when it is longer."""
        if not self.window_at <= at < self.window_at + len(self.window):
            self.move_window(at)
        rest = self.window_at + len(self.window) < len(self.text)  # text the window leaves out
        while True:
            try:
                value, end = self.scan(self.window, at - self.window_at)
            except StopIteration as err:
                failed: json.JSONDecodeError = json.JSONDecodeError("Expecting value", self.window, err.value)
            except json.JSONDecodeError as err:
                failed = err
            except RecursionError:
                raise jsoncodec.TooDeep from None
            else:
                # A number the window cut may still read as one ("10." as 10, "1e+" as 1): what ends
                # within two characters of the window's end is read again, as for a cut.
                if not (rest and end > len(self.window) - 3):
                    return value, end + self.window_at
                failed = json.JSONDecodeError("cut by the window", self.window, end)
            if not rest:
                raise json.JSONDecodeError(failed.msg, self.text, failed.pos + self.window_at) from None
            if self.window_at == at:
                return None  # longer than a window
            self.move_window(at)
            rest = self.window_at + len(self.window) < len(self.text)

    def move_window(self, at: int) -> None:
        self.window_at = at
        self.window = self.text[at : at + WINDOW]

    def whole(self, at: int) -> tuple[Any, int]:
        try:
            return self.scan(self.text, at)
        except StopIteration as err:
            raise json.JSONDecodeError("Expecting value", self.text, err.value) from None
        except RecursionError:
            raise jsoncodec.TooDeep from None

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
