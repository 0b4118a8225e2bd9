"""JSON on the proxy's hot path (every upstream event in, every chunk out): orjson, with the standard
library for what orjson refuses, so the proxy reads and writes exactly what it did with ``json`` alone.

orjson refuses ``NaN``/``Infinity`` and integers beyond 64 bits, which Python's parser takes and an
upstream may send; writing, it refuses those integers and strings with lone surrogates (a JSON escape of
half an emoji decodes to one). Those rare cases go through ``json``, which writes the surrogate escaped.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps", "loads"]


def loads(data: str | bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps(obj: Any) -> bytes:
    """Compact JSON as UTF-8 bytes."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":")).encode()
