"""uvicorn's HTTP/1.1 protocol with each response's head sent in the same write as its first body bytes.

uvicorn writes the status line and headers as soon as the app sends ``http.response.start``, then the
body in a write of its own. With TCP_NODELAY each write is a segment, so a streaming client wakes once
for the head and again for the first event (two segments, seen with strace; bench/RESULTS.md). Here a
head waits for the next write on
its connection, and goes out alone only at the end of the event loop's turn if none came; nothing else
changes, and nothing is held longer than that turn.

A response to an HTTP/1.0 request is framed by the connection's close (conformance/http10.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from conformance.http10 import Http10FramingProtocol

__all__ = ["HeadWithBodyProtocol"]

_HEAD_START = b"HTTP/1."  # a response's status line; a body write never starts so (chunked: hex size)


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


class HeadWithBodyProtocol(Http10FramingProtocol):
    """``uvicorn.run(app, http=HeadWithBodyProtocol)``: httptools, heads sent with their bodies."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Requests read their transport from here; flow control keeps the real one.
        self.transport = _HeadHoldingTransport(transport, self.loop)  # type: ignore[assignment]
