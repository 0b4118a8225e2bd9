"""Requests from browser pages of another origin: refused unless the server was told to allow it.

A browser sends ``Origin`` with every POST and every WebSocket handshake (openai-python, openai-node on
node, Codex CLI, Claude Code and curl send none). The same-origin rule hides a response from a page of
another origin only where the server does not allow it by CORS; it does not stop the request. So without
this check any web page a user opens could make the local server generate (a "simple" POST with
``content-type: text/plain`` needs no preflight, and the body was read as JSON all the same), store
Responses under ``store: true``, or, over a WebSocket, which no same-origin rule covers, read the answers
(issue 38's black-box test drove a keyless server so from a page of another origin). A request that
carries an ``Origin`` the server's ``--cors-origin`` list does not name (``*``: any) is therefore a 403
``origin_not_allowed`` before it is read; a page that is allowed gets CORS headers as before."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .api_errors import APIError

__all__ = ["refused_origin"]


def refused_origin(headers: Mapping[str, str], allowed: Sequence[str], what: str) -> APIError | None:
    """The 403 for ``what`` ("Requests", "WebSocket connections") from a page whose ``Origin`` is not in
    ``allowed``, else None (no ``Origin``: no browser page)."""
    origin = headers.get("origin")
    if origin is None or "*" in allowed or origin in allowed:
        return None
    return APIError.make(
        f"{what} from this origin are not allowed; start the server with --cors-origin naming it.",
        403,
        code="origin_not_allowed",
    )
