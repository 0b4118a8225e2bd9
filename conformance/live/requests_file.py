"""Requests to record, from the command line or a file (JSON array or JSON lines of request objects)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from conformance.probe import RequestSpec

__all__ = ["NamedRequest", "load_requests", "parse_body", "safe_name"]

NamedRequest = tuple[str, RequestSpec]
# Dots are left out too: the transcript core takes the last dotted part of a name for a suffix.
_SAFE = re.compile(r"[^A-Za-z0-9_-]+")


def parse_body(text: str) -> Any:
    """JSON text, or ``@FILE`` for a file holding it (as curl takes it)."""
    raw = Path(text[1:]).read_text() if text.startswith("@") else text
    return json.loads(raw)


def safe_name(raw: Any, fallback: str) -> str:
    """A transcript file name from user text: letters, digits, ``_`` and ``-`` only."""
    name = _SAFE.sub("-", raw).strip("-") if isinstance(raw, str) else ""
    return name or fallback


def _spec(item: Any, where: str) -> RequestSpec:
    if not isinstance(item, dict) or not isinstance(item.get("path"), str):
        raise ValueError(f"{where}: each request is an object with a 'path' string")
    headers = item.get("headers") or {}
    if not isinstance(headers, dict):
        raise ValueError(f"{where}: 'headers' must be an object")
    method = str(item.get("method") or "POST").upper()
    return RequestSpec(item["path"], item.get("body"), method=method, headers=headers)


def load_requests(path: Path) -> list[NamedRequest]:
    """``[{"name", "path", "body", "method"?, "headers"?}, ...]`` as JSON or one object per line."""
    text = path.read_text()
    try:
        loaded = json.loads(text)
        items = loaded if isinstance(loaded, list) else [loaded]
    except json.JSONDecodeError:
        try:
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path}: neither a JSON array nor JSON lines ({exc.msg}, line {exc.lineno})"
            ) from None
    if not items:
        raise ValueError(f"{path}: holds no request")
    named: list[NamedRequest] = []
    first: dict[str, int] = {}  # each transcript name, and the request that has it
    for index, item in enumerate(items, 1):
        spec = _spec(item, f"{path} request {index}")
        name = safe_name(item.get("name"), f"request-{index:03d}")
        if name in first:
            # The second would be written over the first's transcript, and nothing said it.
            raise ValueError(f"{path}: requests {first[name]} and {index} are both named {name!r}")
        first[name] = index
        named.append((name, spec))
    return named
