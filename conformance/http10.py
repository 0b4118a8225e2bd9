"""uvicorn's httptools protocol with a response to an HTTP/1.0 request framed by the connection's close.

uvicorn's httptools protocol chunks every response without a ``content-length`` whatever the request's
version, and RFC 9112 (section 6.1) forbids ``transfer-encoding`` in a response to HTTP/1.0: a client
that implements only HTTP/1.0 reads the chunk sizes as part of the body (curl decodes them anyway, from
the status line's "HTTP/1.1"). uvicorn closes an HTTP/1.0 connection after its response already, so
that close ends the body. Every server of the project speaks through this protocol: the proxy (with
more of its own, proxy/http_protocol.py), the bundled backend and the replay server.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

__all__ = ["Http10FramingProtocol"]

_FRAMING = {b"content-length", b"transfer-encoding"}
_NO_BODY = (204, 304)


class Http10FramingProtocol(HttpToolsProtocol):
    """``uvicorn.run(app, http=Http10FramingProtocol)``: httptools, HTTP/1.0 answered unchunked."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        # (The request's task starts at the loop's next turn: its send is looked up on the cycle then.)
        if self.scope.get("http_version") == "1.0" and self.cycle is not None:
            self.cycle.send = _framed_by_close(self.cycle)  # type: ignore[assignment]


def _framed_by_close(cycle: RequestResponseCycle) -> Callable[[Any], Coroutine[Any, Any, None]]:
    """``cycle``'s send with a body of unknown length written as it is, ended by the connection's close:
    uvicorn writes a body unchunked against an expected length, so that length is "more than any"
    until the last part, and then the last part's own."""
    send = cycle.send
    until_close = False

    async def framed(message: Any) -> None:
        nonlocal until_close
        kind = message["type"]
        if kind == "http.response.start":
            framing = {name.lower() for name, _ in message.get("headers", ())} & _FRAMING
            has_body = cycle.scope["method"] != "HEAD" and message["status"] not in _NO_BODY
            if not framing and has_body:
                until_close = True
                cycle.chunked_encoding = False
                cycle.expected_content_length = sys.maxsize
        elif until_close and kind == "http.response.body" and not message.get("more_body", False):
            cycle.expected_content_length = len(message.get("body", b""))
        await send(message)

    return framed
