"""The upstream transport: httpx's request and response types over aiohttp's pool and C HTTP parser.

httpx's default transport parses HTTP in pure Python (h11) and walks its whole connection pool on every
request; behind it the proxy spent more CPU opening one upstream request than normalizing the stream
that came back (bench/RESULTS.md). ``httpx-aiohttp`` (the transport openai-python ships for the same
reason) keeps httpx's API and hands the I/O to aiohttp.

Two things are set here rather than left to its defaults: the pool has no connection cap (aiohttp's
default of 100 would queue the 101st concurrent stream), and every aiohttp error becomes the httpx error
it means. httpx-aiohttp's map turns "the server closed the connection" into ``ConnectTimeout`` (the
proxy must tell that apart: a pooled keep-alive connection that the upstream closed before answering is
retried once, ``Upstream.open``) and lets through what it does not know, such as a reply that is not
HTTP at all, which would then escape every ``httpx`` handler, the start-up probe's included.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

__all__ = ["UpstreamTransport"]


def _as_httpx(exc: Exception) -> tuple[httpx.TransportError, BaseException | None]:
    """The httpx error an aiohttp error (raw, or as httpx-aiohttp mapped it) means, and its cause."""
    cause = exc.__cause__ if isinstance(exc, httpx.TransportError) else exc
    message = str(exc)
    if isinstance(cause, aiohttp.ClientConnectorError):  # refused, unreachable, DNS: no connection made
        return httpx.ConnectError(message), cause
    if isinstance(cause, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message), cause
    if isinstance(cause, aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout(message), cause
    if isinstance(cause, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        return httpx.RemoteProtocolError(message), cause
    if isinstance(cause, aiohttp.ClientPayloadError):  # a body cut short or badly framed
        return httpx.ReadError(message), cause
    if isinstance(cause, aiohttp.ClientResponseError):  # a reply that is not HTTP, or broken HTTP
        return httpx.ProtocolError(message), cause
    if isinstance(exc, httpx.TransportError):
        return exc, cause
    return httpx.TransportError(message), cause


_FAILURES = (httpx.TransportError, aiohttp.ClientError)


def _unread(content: Any) -> bytes:
    """Bytes aiohttp received but had not handed over when the body failed.

    aiohttp raises a failed body's error before the data it buffered ahead of the failure; h11 hands the
    data over first. An upstream that sends its last event and closes without the chunked terminator
    (llama-cpp-python, when a newer request interrupts a stream: ``[DONE]`` and the FIN arrive together)
    would lose that event. aiohttp offers no public read past a set error, hence its buffer attributes.
    """
    buffer = getattr(content, "_buffer", None)
    if not buffer:
        return b""
    return b"".join(buffer)[getattr(content, "_buffer_offset", 0) :]


class _Body(httpx.AsyncByteStream):
    """The response body, with the same error mapping as the request, losing nothing received."""

    def __init__(self, inner: httpx.AsyncByteStream, content: Any) -> None:
        self._inner = inner
        self._content = content

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._inner:
                yield part
        except _FAILURES as exc:
            if received := _unread(self._content):
                yield received
            error, cause = _as_httpx(exc)
            raise error from cause

    async def aclose(self) -> None:
        await self._inner.aclose()


class UpstreamTransport(AiohttpTransport):
    def __init__(self, keepalive_expiry: float) -> None:
        super().__init__(client=self._session)
        self._keepalive_expiry = keepalive_expiry

    def _session(self) -> aiohttp.ClientSession:
        # Created on the first request, inside the server's event loop, as aiohttp requires.
        connector = aiohttp.TCPConnector(
            limit=0, keepalive_timeout=self._keepalive_expiry, ssl=self.ssl_context
        )
        return aiohttp.ClientSession(connector=connector)

    def connections_in_use(self) -> int:
        """Upstream connections that a response still holds (a leak shows here)."""
        session = self.client
        if not isinstance(session, aiohttp.ClientSession) or session.connector is None:
            return 0
        return len(session.connector._acquired)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await super().handle_async_request(request)
        except _FAILURES as exc:
            error, cause = _as_httpx(exc)
            raise error from cause
        assert isinstance(response.stream, httpx.AsyncByteStream)
        aiohttp_response = getattr(response.stream, "_aiohttp_response", None)
        response.stream = _Body(response.stream, getattr(aiohttp_response, "content", None))
        return response
