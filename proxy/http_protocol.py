"""uvicorn's HTTP/1.1 protocol with each response's head sent in the same write as its first body bytes.

uvicorn writes the status line and headers as soon as the app sends ``http.response.start``, then the
body in a write of its own. With TCP_NODELAY each write is a segment, so a streaming client wakes once
for the head and again for the first event (two segments, seen with strace; bench/RESULTS.md). Here a
head waits for the next write on
its connection, and goes out alone only at the end of the event loop's turn if none came; nothing else
changes, and nothing is held longer than that turn.

And a response to an HTTP/1.0 request is framed by closing the connection, not chunked: uvicorn's
httptools protocol chunks every response without a ``content-length`` whatever the request's version,
and RFC 9112 (section 6.1) forbids ``transfer-encoding`` in a response to HTTP/1.0: a client that
implements only HTTP/1.0 reads the chunk sizes as part of the body (curl decodes them anyway, from the
status line's "HTTP/1.1").
uvicorn closes an HTTP/1.0 connection after its response already, so the close ends the body.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

__all__ = ["HeadWithBodyProtocol"]

_HEAD_START = b"HTTP/1."  # a response's status line; a body write never starts so (chunked: hex size)
_FRAMING = (b"content-length", b"transfer-encoding")
_NO_BODY = (204, 304)


class _HeadHoldingTransport:
    """The connection's transport, holding a response head until the write after it."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is not None:
            data = self._held + data
            self._held = None
        elif data[:7] == _HEAD_START:
            self._held = data
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def _flush(self) -> None:
        if self._held is not None:
            data, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)  # everything else is the transport's own


class HeadWithBodyProtocol(HttpToolsProtocol):
    """``uvicorn.run(app, http=HeadWithBodyProtocol)``: httptools, heads sent with their bodies."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Requests read their transport from here; flow control keeps the real one.
        self.transport = _HeadHoldingTransport(transport, self.loop)  # type: ignore[assignment]

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        # (The request's task starts at the loop's next turn: its send is looked up on the cycle then.)
        if self.scope.get("http_version") == "1.0" and self.cycle is not None:
            self.cycle.send = _framed_by_close(self.cycle)  # type: ignore[method-assign]


def _framed_by_close(cycle: RequestResponseCycle) -> Callable[[Any], Awaitable[None]]:
    """``cycle``'s send with a body of unknown length written as it is, ended by the connection's close:
    uvicorn writes a body unchunked against an expected length, so that length is "more than any"
    until the last part, and then the last part's own."""
    send = cycle.send
    until_close = False

    async def framed(message: Any) -> None:
        nonlocal until_close
        kind = message["type"]
        if kind == "http.response.start":
            framing = {name.lower() for name, _ in message.get("headers", ())} & set(_FRAMING)
            has_body = cycle.scope["method"] != "HEAD" and message["status"] not in _NO_BODY
            if not framing and has_body:
                until_close = True
                cycle.chunked_encoding = False
                cycle.expected_content_length = sys.maxsize
        elif until_close and kind == "http.response.body" and not message.get("more_body", False):
            cycle.expected_content_length = len(message.get("body", b""))
        await send(message)

    return framed
