"""The wire protocols: one package each, every one a front-end over the one core.

The registry below is what the judge, ``validate`` and ``check`` know; the proxy and the backend each
serve a table of the same packages' front-ends (proxy/routes.py, backend/routes.py). A new protocol is
a new package here (its request and schema, its translation to and from the core's chat stream, its
error body, its rules, its probes), one line below, and one line in each of those tables:
docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from conformance.request import Request

from .chat import CHAT
from .completions import COMPLETIONS
from .messages import MESSAGES
from .responses import RESPONSES
from .wire import WireProtocol

__all__ = ["PROTOCOLS", "WireProtocol", "protocol_for_path", "protocol_named", "recorded_request"]

PROTOCOLS: tuple[WireProtocol, ...] = (
    CHAT,
    COMPLETIONS,
    RESPONSES,
    MESSAGES,
)

_BY_NAME = {protocol.name: protocol for protocol in PROTOCOLS}


def protocol_named(name: str | None) -> WireProtocol | None:
    return _BY_NAME.get(name) if name is not None else None


def protocol_for_path(path: str | None) -> WireProtocol | None:
    """The protocol a request path is one of (a query string, a trailing slash and the ``/v1`` prefix
    aside: a recording may name ``/chat/completions``); the longest path decides, so that
    ``/chat/completions`` is chat and not ``/completions``, and ``/v1/responses/{id}`` is none."""
    if not path:
        return None
    path = path.split("?", 1)[0].rstrip("/")
    found: WireProtocol | None = None
    longest = 0
    for protocol in PROTOCOLS:
        for own in protocol.recorded_paths:
            tail = own.removeprefix("/v1")
            if path.endswith(tail) and len(tail) > longest:
                found, longest = protocol, len(tail)
    return found


def _names(path: Any, own: str) -> bool:
    """Whether a recorded ``path`` is ``own`` (as ``protocol_for_path`` reads paths)."""
    return isinstance(path, str) and path.split("?", 1)[0].rstrip("/").endswith(own.removeprefix("/v1"))


def recorded_request(request: Mapping[str, Any] | None, name: str | None = None) -> Request:
    """A transcript's recorded ``request`` (``{method, path, body}``) as the judge reads it, in the
    protocol its path names (else ``name``); unknown when there is none."""
    if not request:
        return Request()
    protocol = protocol_for_path(request.get("path")) or protocol_named(name)
    body = request.get("body")
    if isinstance(body, Mapping):
        if protocol is None:
            return Request.from_body(None, body)
        read = protocol.read_request(body)
        counting = protocol.count_path is not None and _names(request.get("path"), protocol.count_path)
        return replace(read, schema=None) if counting else read
    if isinstance(body, str):
        endpoint = protocol.name if protocol is not None else None
        schema = protocol.request_schema if protocol is not None else None
        return Request(known=True, endpoint=endpoint, schema=schema, raw=body)
    return Request()
