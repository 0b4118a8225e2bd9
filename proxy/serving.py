"""What every route of the proxy reads, and the steps every route takes before its own work.

``Serving`` is the app's state: its settings, the pool of upstreams (one ``--upstream`` is a pool of
one: proxy/routing/), the metrics, and the protocols' front-ends it serves (proxy/routes.py). The steps
are the client's key, its body within ``--max-body``, and the client's headers an upstream may see.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from conformance.api_errors import REDACTED, APIError, secret_in_bodies
from conformance.browser_origin import refused_origin
from conformance.protocols.front_end import FrontEnd

from .config import ProxyConfig
from .observability import Exchange, Metrics, exchange_of
from .relay import connection_options
from .routing import Router

__all__ = [
    "NOT_FORWARDED",
    "NOT_FORWARDED_TO_GENERATION",
    "Serving",
    "authorized",
    "failed",
    "forward_headers",
    "read_body",
    "read_json_body",
    "refusal",
    "refused_client",
    "unknown_url",
]

# Not forwarded: hop-by-hop, the client's credentials (the upstream gets its own key), and what the
# proxy sets itself for the upstream request.
NOT_FORWARDED = frozenset(
    {
        b"host",
        b"content-length",
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"authorization",
        b"api-key",
        b"x-api-key",
        b"accept-encoding",
        b"upgrade",
        b"te",
        b"trailer",
        b"proxy-authorization",
        b"cookie",
        # The proxy answers browsers by its own CORS policy (--cors-origin): an upstream that allows any
        # origin (llama-server echoes it back) must not see one, and its CORS headers are not relayed.
        b"origin",
    }
)
NOT_FORWARDED_TO_GENERATION = NOT_FORWARDED | {b"content-type", b"content-encoding", b"accept", b"user-agent"}
"""The headers a generating request does not pass on: the proxy writes its own request's body."""


@dataclass(slots=True)
class Serving:
    config: ProxyConfig
    pool: Router
    metrics: Metrics
    front_ends: tuple[FrontEnd, ...]

    def front_end_at(self, path: str) -> FrontEnd | None:
        """The front-end whose path ``path`` is or lies under (``/v1/messages/batches``: the Messages
        API's), whose protocol a client there speaks; None for any other path."""
        for front_end in self.front_ends:
            if any(path == own or path.startswith(own + "/") for own in front_end.paths):
                return front_end
        return None

    def refused_at(self, path: str, error: APIError) -> JSONResponse:
        """The proxy's own refusal of a request to ``path`` off the front-ends' routes (a method they do
        not take, a path relayed to the upstream), in the words of the protocol that path belongs to:
        an Anthropic client's ``GET /v1/messages`` had an OpenAI body, which its SDK cannot read."""
        return _worded(self.front_end_at(path), error)

    def without_keys(self, text: str) -> str:
        """``text`` (a stored answer or its input, read back as JSON) with every upstream key the proxy
        holds cut out: the command line's and each replica's from the file. (A key is letters, digits,
        dashes: written the same inside JSON.)"""
        keys = {self.config.upstream_api_key}
        keys.update(replica.config.upstream_api_key for replica in self.pool.replicas.values())
        for key in keys:
            if (cut := secret_in_bodies(key)) is not None:
                text = text.replace(cut.decode(), REDACTED)
        return text


def authorized(request: HTTPConnection, api_key: str | None) -> bool:
    """Whether the client sent ``api_key``: as a bearer token (OpenAI's clients), in ``api-key``
    (Azure's), or in ``x-api-key`` (Anthropic's: Claude Code, the Anthropic SDKs); on a request, or on
    a WebSocket's handshake."""
    if not api_key:
        return True
    headers = request.headers
    header = headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        supplied = header[7:].strip()
    else:
        supplied = headers.get("x-api-key") or headers.get("api-key", "")
    return hmac.compare_digest(supplied.encode(), api_key.encode())


_READ_ONLY = frozenset({"GET", "HEAD", "OPTIONS"})


def refused_client(connection: HTTPConnection, config: ProxyConfig) -> APIError | None:
    """Why the proxy will not take a request or a WebSocket's handshake, if it will not: a browser page
    of an origin ``--cors-origin`` does not allow asking it to do something (any method but a read; a
    WebSocket, whose answers no same-origin rule hides: conformance/browser_origin.py), a 403; or a
    missing or wrong API key, a 401."""
    scope = connection.scope
    if scope.get("method") not in _READ_ONLY:
        what = "WebSocket connections" if scope["type"] == "websocket" else "Requests"
        refused = refused_origin(connection.headers, config.cors_origins, what)
        if refused is not None:
            return refused
    if not authorized(connection, config.api_key):
        return APIError.make("invalid or missing API key", 401, code="invalid_api_key")
    return None


async def read_body(request: Request, limit: int) -> bytes | Response:
    """The request's body, or the response that ends it: 499 (sent to no one, logged and counted)
    when the client leaves while sending it. Raises a 413 ``APIError`` above ``limit`` (worded by the
    route in the client's protocol)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    parts: list[bytes] = []
    size = 0
    while True:  # receive() itself: Request.stream() is an async generator, which costs more per request
        message = await request.receive()
        if message["type"] == "http.disconnect":
            exchange_of(request.scope).disconnected = True
            return Response(status_code=499)
        part = message.get("body", b"")
        size += len(part)
        if size > limit:
            raise _too_large(limit)
        parts.append(part)
        if not message.get("more_body", False):
            return b"".join(parts)


async def read_json_body(request: Request, limit: int) -> bytes | Response:
    """``read_body`` of a body the proxy reads as JSON, which it can read only as sent: a 415 for a body
    in a content coding (RFC 9110 section 15.5.16), saying so. Before, its ``Content-Encoding`` went to
    the upstream with the proxy's own JSON (which the upstream then refused) and a gzipped body was
    "not valid JSON" (found by black-box testing)."""
    coding = request.headers.get("content-encoding", "identity").strip().lower()
    if coding not in ("", "identity"):
        shown = _echoed(coding[:50])
        message = f"Content-Encoding '{shown}' is not supported: send the request body uncompressed"
        refused = APIError.make(message, 415, code="unsupported_content_encoding")
        refused.headers = [(b"accept-encoding", b"identity")]
        raise refused
    return await read_body(request, limit)


def _too_large(limit: int) -> APIError:
    return APIError.make(f"request body larger than {limit} bytes", 413, code="request_too_large")


def forward_headers(scope: Scope, dropped: frozenset[bytes]) -> list[tuple[bytes, bytes]]:
    """The client's headers that the upstream gets too (names are lower case in ASGI): not ``dropped``,
    and not those the client's ``Connection`` header names (hop-by-hop, RFC 9110 section 7.6.1)."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    listed = connection_options(headers)
    return [(k, v) for k, v in headers if k not in dropped and k not in listed]


def failed(raised: APIError, exchange: Exchange, secret: str | None) -> Response:
    """An error answered before any upstream output, logged with the exchange, the key cut out."""
    error = raised.redacted(secret)
    exchange.take_error(error)
    return error.response()


def unknown_url(request: Request) -> APIError:
    """The 404 of a path nothing answers, naming it as far as it can be shown (a control character in
    it, ``%00`` in the URL, is written as its code: the path is the client's, echoed)."""
    path = _echoed(request.url.path[:300])
    return APIError.make(f"unknown request URL: {request.method} {path}", 404, code="unknown_url")


def _echoed(text: str) -> str:
    """The client's own text as an error message echoes it: a character that is not printable (a control
    character, ``%00`` in a URL) written as its code."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def refusal(front_end: FrontEnd, error: APIError, exchange: Exchange) -> Response:
    """The proxy's own refusal of a request, in the protocol's words, and on the request's log line (it
    logged ``"error": null`` for these, issue 32)."""
    exchange.take_error(error)
    return _worded(front_end, error)


def _worded(front_end: FrontEnd | None, error: APIError) -> JSONResponse:
    """``error`` as ``front_end``'s protocol words it (OpenAI's without one)."""
    return error.response(None if front_end is None else front_end.error(error.body, error.status))
