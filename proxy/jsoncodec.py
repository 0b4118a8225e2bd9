"""JSON on the proxy's hot path (every upstream event in, every chunk out): orjson, with the standard
library for what orjson refuses, so the proxy reads and writes exactly what it did with ``json`` alone.

Reading, orjson refuses ``NaN``/``Infinity``, which Python's parser takes and an upstream may send, and
it turns an integer beyond 64 bits into a float, losing digits; so text holding a run of 20 digits (the
shortest that can overflow) is read by ``json``, as is whatever orjson refuses. Writing, orjson refuses
those integers and strings with lone surrogates (a JSON escape of half an emoji decodes to one); ``json``
writes them, the surrogate as its escape.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["dumps", "loads"]

# Digits become "0" and every other byte ".", so that a run of 20 digits is a plain substring search:
# a tenth of the cost of a regular expression, which would cost more than parsing with ``json``.
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x2E for i in range(256))
_TWENTY_DIGITS = b"0" * 20


def _orjson_reads_exactly(data: str | bytes) -> bool:
    """False when ``data`` may hold an integer orjson would read as a float (a false alarm costs speed)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return _TWENTY_DIGITS not in raw.translate(_DIGITS_AS_ZEROS)


def loads(data: str | bytes, slowly: Callable[[str | bytes], Any] = json.loads) -> Any:
    """orjson where it reads ``data`` exactly, else ``slowly`` (which also words any error)."""
    if _orjson_reads_exactly(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return slowly(data)


def dumps(obj: Any) -> bytes:
    """Compact JSON as UTF-8 bytes."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":")).encode()
