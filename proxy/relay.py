"""The relay of a request the proxy does not answer itself (other ``/v1/*`` paths, proxy/passthrough.py):
the client's request sent on to the upstream, its answer relayed as it comes.

Nothing is normalized, but what the proxy promises on every route holds here too: the upstream key
never reaches the client (cut out of headers and body, also when a read splits it), nor does the
upstream's address (a redirect into the upstream becomes a path on the proxy) or its local model path
(a model the proxy named for the upstream is named back as the client asked); the connect, first-byte
and idle timeouts apply; an error becomes an OpenAI error (no traceback, no local path) unless it is
too long to hold; and a fault after the head ends the response without a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from starlette.types import Send

from conformance import jsoncodec
from conformance.api_errors import REDACTED, APIError, secret_in_bodies

from .observability import Exchange
from .upstream import MAX_ERROR_BODY, UpstreamStream, usable_retry_header
from .writer import Worded, send_json

__all__ = ["Redactor", "connection_options", "has_dot_segment", "relay"]

_NOT_RELAYED = frozenset(
    {
        # The server frames the relayed body itself (its length changes when the key is cut out), and
        # hop-by-hop headers are about the upstream connection, not the client's.
        b"content-length",
        b"transfer-encoding",
        b"connection",
        b"keep-alive",
        b"trailer",
        b"upgrade",
        b"te",
        b"proxy-authenticate",
        # The proxy's server sets its own: a second date or server line would contradict it.
        b"date",
        b"server",
    }
)
_SEPARATORS = re.compile(r"[/\\]")
# The proxy's own request id goes to the client; the upstream's is kept under this name.
_UPSTREAM_REQUEST_ID = b"x-upstream-request-id"


def has_dot_segment(path: str) -> bool:
    """Whether ``path`` (percent-decoded) holds a ``.`` or ``..`` segment: /v1/../props would leave /v1
    at the upstream, which resolves dot segments (also %2e%2e), and servers that take a backslash for a
    slash (Windows, and URL parsers that follow WHATWG) resolve ``..\\`` and ``..%5c`` so too."""
    return not {".", ".."}.isdisjoint(_SEPARATORS.split(path))


def connection_options(headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """The header names a ``Connection`` header lists: hop-by-hop, not passed on (RFC 9110 7.6.1)."""
    return frozenset(
        option.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for option in value.split(b",")
    )


class Redactor:
    """Replaces byte strings in a body read in parts: the upstream key with ``<redacted>``, and the
    model name the upstream serves with the one the client asked for.

    The end of a part that may be the start of one of them waits for the next part, so one split across
    reads is still found; only such an end waits, shorter than the longest of them.
    """

    def __init__(self, secret: str | None, renamed: tuple[bytes, bytes] | None = None) -> None:
        self._secret = secret.encode() if secret else b""  # in headers whatever its length
        key = secret_in_bodies(secret)
        pairs = [(key, REDACTED.encode())] if key is not None else []
        self._pairs = pairs + ([renamed] if renamed and renamed[0] else [])
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        """What of ``data`` (after the held bytes) can be sent now, with the replacements made."""
        if not self._pairs:
            return data
        data = self._held + data
        for old, new in self._pairs:
            data = data.replace(old, new)
        cut = min((_partial_at(data, old) for old, _ in self._pairs), default=len(data))
        self._held = data[cut:]
        return data[:cut]

    def end(self) -> bytes:
        """The held bytes, at the end of the body: shorter than what they might have begun, so not it."""
        held, self._held = self._held, b""
        return held

    def text(self, data: bytes) -> bytes:
        """``data`` (a header value) whole, the secret replaced."""
        return data.replace(self._secret, REDACTED.encode()) if self._secret else data


def _partial_at(data: bytes, wanted: bytes) -> int:
    """Where the end of ``data`` that is a proper start of ``wanted`` begins (``len(data)`` if none)."""
    start = data.find(wanted[:1], max(len(data) - len(wanted) + 1, 0))
    while start != -1 and not wanted.startswith(data[start:]):
        start = data.find(wanted[:1], start + 1)
    return len(data) if start == -1 else start


async def relay(
    send: Send,
    open_upstream: Callable[[], Awaitable[UpstreamStream]],
    exchange: Exchange,
    secret: str | None,
    *,
    head_only: bool = False,
    renamed: tuple[str, str] | None = None,
    client_location: Callable[[bytes], bytes] = lambda location: location,
    worded: Worded | None = None,
) -> None:
    """Answer with what the upstream answers to ``open_upstream()``; ``head_only`` for a HEAD request
    (its response has no body, whatever its headers say). ``renamed``: the model name the upstream got
    and the one the client asked for, named back in the answer. ``client_location``: a redirect's
    ``Location`` as the client must see it. ``worded``: an error the upstream answered (read whole), or
    the proxy's, in the protocol of the path (``FrontEnd.error``): a 404 beneath ``/v1/messages`` had
    OpenAI's body, which an Anthropic SDK cannot read (found by black-box testing)."""
    redactor = Redactor(secret, renamed and (_json_string(renamed[0]), _json_string(renamed[1])))
    stream: UpstreamStream | None = None
    started = False
    try:
        stream = await open_upstream()
        exchange.upstream_status = stream.status
        first, complete = b"", head_only
        if stream.status >= 400 and not head_only:
            first, complete = await stream.read_upto(MAX_ERROR_BODY)
            # Read whole, an error becomes an OpenAI error (tracebacks and local paths out, status
            # mapped); one too long to hold (a 422 that echoes a large input) is relayed if it says it
            # is JSON, and judged by its start if not.
            if complete or "json" not in stream.content_type:
                raise stream.error_from(first[:MAX_ERROR_BODY])
        headers = _relayed_headers(stream.response.headers.raw, redactor, client_location, stream.decoded)
        await send({"type": "http.response.start", "status": stream.status, "headers": headers})
        started = True
        if first:
            await send({"type": "http.response.body", "body": redactor.feed(first), "more_body": True})
        while not complete and (data := await stream.read()) is not None:
            await send({"type": "http.response.body", "body": redactor.feed(data), "more_body": True})
        await send({"type": "http.response.body", "body": redactor.end()})
    except APIError as raised:
        error = raised.redacted(secret)
        exchange.take_error(error)  # the access log line says why
        if not started:
            body = error.body if worded is None else worded(error.body, error.status)
            await send_json(send, error.status, body, error.headers)
        # Otherwise the head is out. Returning without the body's end makes the server close the
        # connection, so the client sees the body cut short rather than one that looks complete.
    finally:
        if stream is not None:
            await stream.aclose()


def _relayed_headers(
    raw: list[tuple[bytes, bytes]],
    redactor: Redactor,
    client_location: Callable[[bytes], bytes],
    decoded: bool,
) -> list[tuple[bytes, bytes]]:
    """The upstream's headers as the client gets them; ``decoded``: the body is relayed decompressed."""
    listed = connection_options(raw)
    headers: list[tuple[bytes, bytes]] = []
    for name, value in raw:
        name = name.lower()
        if name in _NOT_RELAYED or name in listed or name.startswith(b"access-control-"):
            continue  # CORS: the proxy's own policy (--cors-origin) answers browsers, not the upstream's
        if not usable_retry_header(name, value) or (decoded and name == b"content-encoding"):
            continue  # (a retry header holding no delay: an upstream was seen to put its key there)
        if name in (b"x-request-id", b"request-id"):  # (the proxy's own id goes under both names)
            if any(kept == _UPSTREAM_REQUEST_ID for kept, _ in headers):
                continue  # (an upstream that names its request both ways: one of them kept)
            name = _UPSTREAM_REQUEST_ID
        elif name in (b"location", b"content-location"):
            value = client_location(value)
        headers.append((name, redactor.text(value)))
    return headers


def _json_string(text: str) -> bytes:
    return jsoncodec.dumps(text)
