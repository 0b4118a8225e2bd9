"""Other ``/v1/*`` paths: the client's request sent on to the upstream, its answer relayed as it comes.

Nothing is normalized, but what the proxy promises on every route holds here too: the upstream key
never reaches the client (cut out of headers and body, also when a read splits it), the connect,
first-byte and idle timeouts apply, an error page that is not JSON becomes an OpenAI error, and a
fault after the head ends the response without a traceback.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.types import Send

from . import jsoncodec
from .errors import MIN_SECRET_IN_BODY, REDACTED, ProxyError, error_from_http
from .observability import Exchange
from .respond import send_json
from .upstream import MAX_ERROR_BODY, UpstreamStream

__all__ = ["Redactor", "relay"]

# The server frames the relayed body itself (its length changes when the key is cut out), and
# hop-by-hop headers are about the upstream connection, not the client's.
_NOT_RELAYED = frozenset(
    {b"content-length", b"transfer-encoding", b"connection", b"keep-alive", b"trailer", b"upgrade", b"te"}
)


class Redactor:
    """Cuts ``secret`` out of a body read in parts.

    The end of a part that may be the start of the secret waits for the next part, so a secret split
    across reads is still found; at most ``len(secret) - 1`` bytes wait, and only such an end.
    """

    def __init__(self, secret: str | None) -> None:
        self._secret = secret.encode() if secret else b""
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        """What of ``data`` (after the held bytes) can be sent now, the secret replaced."""
        secret = self._secret
        if len(secret) < MIN_SECRET_IN_BODY:
            return data
        data = (self._held + data).replace(secret, REDACTED.encode())
        start = data.find(secret[:1], max(len(data) - len(secret) + 1, 0))
        while start != -1 and not secret.startswith(data[start:]):
            start = data.find(secret[:1], start + 1)
        cut = len(data) if start == -1 else start
        self._held = data[cut:]
        return data[:cut]

    def end(self) -> bytes:
        """The held bytes, at the end of the body: shorter than the secret, so not it."""
        held, self._held = self._held, b""
        return held

    def text(self, data: bytes) -> bytes:
        """``data`` (a header value) whole, the secret replaced."""
        return data.replace(self._secret, REDACTED.encode()) if self._secret else data


async def relay(
    send: Send,
    open_upstream: Callable[[], Awaitable[UpstreamStream]],
    exchange: Exchange,
    secret: str | None,
    *,
    head_only: bool = False,
) -> None:
    """Answer with what the upstream answers to ``open_upstream()``; ``head_only`` for a HEAD request
    (its response has no body, whatever its headers say)."""
    redactor = Redactor(secret)
    stream: UpstreamStream | None = None
    started = False
    try:
        stream = await open_upstream()
        exchange.upstream_status = stream.status
        first, complete = b"", head_only
        if stream.status >= 400 and not head_only:
            first, complete = await stream.read_upto(MAX_ERROR_BODY)
            # Read whole, an error body is judged by what it is; one too long to hold (a 422 that echoes
            # a large input) by what it says it is.
            if not (_is_json(first) if complete else "json" in stream.content_type):
                # An HTML or plain-text error page (tracebacks, local paths): an OpenAI error, status mapped.
                raise error_from_http(stream.status, stream.content_type, first[:MAX_ERROR_BODY])
        headers = [
            (name.lower(), redactor.text(value))
            for name, value in stream.response.headers.raw
            if name.lower() not in _NOT_RELAYED
        ]
        await send({"type": "http.response.start", "status": stream.status, "headers": headers})
        started = True
        if first:
            await send({"type": "http.response.body", "body": redactor.feed(first), "more_body": True})
        while not complete and (data := await stream.read()) is not None:
            await send({"type": "http.response.body", "body": redactor.feed(data), "more_body": True})
        await send({"type": "http.response.body", "body": redactor.end()})
    except ProxyError as raised:
        error = raised.redacted(secret)
        exchange.error = error.message  # the access log line says why
        if not started:
            await send_json(send, error.status, error.body)
        # Otherwise the head is out. Returning without the body's end makes the server close the
        # connection, so the client sees the body cut short rather than one that looks complete.
    finally:
        if stream is not None:
            await stream.aclose()


def _is_json(body: bytes) -> bool:
    try:
        jsoncodec.loads(body)
    except (ValueError, RecursionError):  # json's fallback recurses on deep nesting
        return False
    return True
