"""JSON on the hot paths (every upstream event the proxy reads, every chunk the proxy and the backend
write): orjson, with the standard library for what orjson refuses, so that they read and write exactly
what ``json`` alone would.

Reading, orjson refuses ``NaN``/``Infinity``, which Python's parser takes and an upstream may send, and
it turns an integer beyond 64 bits into a float, losing digits; so text holding a run of 20 digits (the
shortest that can overflow) is read by ``json``, as is whatever orjson refuses. Writing, orjson refuses
those integers and strings with lone surrogates (a JSON escape of half an emoji decodes to one); ``json``
writes them, the surrogate as its escape.

Nesting: a document nested past the parsers' depth (orjson stops at 1,024 levels, Python's parser at its
recursion limit, about 1,000 less the stack in use) raises ``RecursionError`` in Python's parser, which
is no ``ValueError``: an upstream answering an array nested 5,000 deep then took every caller that
catches ``ValueError`` down with a 500 (issue 18). One nested 1,000 deep was read, and writing it back
failed mid-stream (orjson writes 254 levels; ``json`` past that ran out of stack). ``loads`` raises
``TooDeep``, a ``ValueError``, for anything deeper than ``MAX_DEPTH``, so every reader of JSON treats it
as the invalid JSON it is for the proxy, in this one place. Only a text holding more brackets than that
is measured, so an everyday event costs two counts of its characters.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["MAX_DEPTH", "TooDeep", "dumps", "loads", "lone_surrogate", "too_deep"]

MAX_DEPTH = 254
"""The deepest nesting of arrays and objects read: as deep as orjson writes."""

# Digits become "0" and every other byte ".", so that a run of 20 digits is a plain substring search:
# a tenth of the cost of a regular expression, which would cost more than parsing with ``json``.
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x2E for i in range(256))
_TWENTY_DIGITS = b"0" * 20


class TooDeep(ValueError):
    """JSON nested deeper than the parsers go: invalid JSON for the proxy's purposes."""

    def __init__(self) -> None:
        super().__init__("the JSON is nested too deeply")


def _orjson_reads_exactly(data: str | bytes) -> bool:
    """False when ``data`` may hold an integer orjson would read as a float (a false alarm costs speed)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return _TWENTY_DIGITS not in raw.translate(_DIGITS_AS_ZEROS)


def loads(data: str | bytes, slowly: Callable[[str | bytes], Any] = json.loads) -> Any:
    """orjson where it reads ``data`` exactly, else ``slowly`` (which also words any error); ``TooDeep``
    for a document nested past what the parsers can recurse through."""
    obj: Any = _NOTHING
    if _orjson_reads_exactly(data):
        with contextlib.suppress(orjson.JSONDecodeError):
            obj = orjson.loads(data)
    if obj is _NOTHING:
        try:
            obj = slowly(data)
        except RecursionError:
            raise TooDeep from None
    if too_deep(data, obj):
        raise TooDeep
    return obj


_NOTHING = object()
_COUNTED = 4096
"""Up to this length the brackets are counted; past it orjson writing the document again is the cheaper
measure (two counts of an agent's 55 KB request took 48 us, writing it 8 us)."""


def too_deep(data: str | bytes, obj: Any, allowed: int = MAX_DEPTH) -> bool:
    """Whether ``obj`` (read from ``data``) is nested deeper than ``allowed`` levels."""
    if len(data) <= _COUNTED or allowed != MAX_DEPTH:
        if isinstance(data, str):
            opened = data.count("[") + data.count("{")
        else:
            opened = data.count(b"[") + data.count(b"{")
        if opened <= allowed:
            return False
    if allowed == MAX_DEPTH:
        try:
            orjson.dumps(obj)  # orjson measures it in C, refusing past MAX_DEPTH
            return False
        except orjson.JSONEncodeError as exc:
            if "ecursion" in str(exc):
                return True
    # Less room than orjson's (a value inside others), or orjson refused it for another reason (an
    # integer beyond 64 bits): measured here.
    level: list[tuple[Any, int]] = [(obj, 1)]
    while level:
        value, depth = level.pop()
        if depth > allowed:
            return True
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        level.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def lone_surrogate(obj: Any) -> bool:
    """Whether a string of ``obj`` holds half of a surrogate pair, which no UTF-8 text can: orjson
    refuses to write one, in C; what it refuses for another reason (an integer beyond 64 bits) is asked
    of ``json``, in Python (a 50 KB request in a tenth of the time)."""
    try:
        orjson.dumps(obj)
        return False
    except orjson.JSONEncodeError:
        pass
    try:
        json.dumps(obj, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    return False


def dumps(obj: Any) -> bytes:
    """Compact JSON as UTF-8 bytes."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":")).encode()
