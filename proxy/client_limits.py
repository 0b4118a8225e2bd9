"""What one client may hold of the proxy: its request head, its pipelined requests, its time, and the
process's connections. Everything here happens in the HTTP protocol, before a request reaches the app
(and so before its API key is checked).

uvicorn's httptools protocol, left as it is, accepts a head of any size (httptools keeps the pieces of
a header until it ends: 64 MB of headers took the proxy from 46 MB to about 1 GB), queues any number of
pipelined requests (13 MB of pipelined ``GET /health`` that the client never read added 736 MB), and
keeps a connection that sends nothing, or one byte every 10 s, for ever (3,000 of them, with the proxy
at 1,024 open files, made every real request fail). Here:

- a head longer than ``MAX_HEAD_BYTES`` is answered 431 and its connection closed;
- more than ``MAX_PIPELINED`` requests waiting behind the one being answered close the connection (no
  browser or client library pipelines; answers cannot be sent out of order, so there is no error to
  send);
- a request head must arrive within ``--client-timeout`` seconds of its first byte (of the connection,
  for its first request), and then its body within as many again: 408 and the connection closed;
  between requests uvicorn closes a keep-alive connection idle for 5 s;
- past ``--max-connections`` open connections a request is answered 503 and its connection closed,
  except ``GET /health``, which a load balancer needs to see the process alive; such a connection gets
  ``OVER_CAP_TIMEOUT`` seconds for its head, so that idle ones past the cap hold no file for long;
- so is a connection past ``--max-connections-per-client`` from one client address: one client that
  reopened about 38 connections a second held the whole cap before any API key was read, and another
  got 503 on 71 of 72 requests over 75 s (issue 32).

Behind a reverse proxy every client has the proxy's address, and the share would throttle them all
together. A peer named by ``--trusted-proxies`` (an address or a network) is left out of the per-client
share; each of its requests counts instead, until its response is complete, in the share of the client
it was forwarded for: the right-most address of ``X-Forwarded-For`` that is not itself a trusted proxy
(each proxy appends the address it was reached from, so that one is the last that no trusted hop
wrote), or, without that header, of ``Forwarded``'s ``for=`` (RFC 7239). ``X-Forwarded-For`` is read
first because the usual fronts (nginx's ``$proxy_add_x_forwarded_for``, HAProxy's ``forwardfor``,
Envoy, Caddy) append to it and pass a client's ``Forwarded`` on untouched: read first, that header would
let a client behind them name itself. A front that writes only ``Forwarded`` must drop a client's
``X-Forwarded-For`` (docs/proxy.md, Hostile clients, says so). A connection forwards one
request at a time, so the requests one client has open through the proxy are the connections it would
hold without it. The request's ``client`` (its access-log line's) is that address. A forwarded header
from any other peer is ignored, so a client cannot name another one. Nothing is trusted unless named:
uvicorn's own reading of ``X-Forwarded-For`` (``proxy_headers``, which trusts 127.0.0.1 unless told
otherwise) is turned off by ``serve`` (proxy/workers.py), so these headers are read here and only here.

A WebSocket handshake (the Responses API's WebSocket mode, issue 38) is a request head like any other,
under the same timeout and caps: uvicorn upgrades it without asking the app, so the caps are checked
here, and a handshake past them is answered 503. The socket it becomes (``LimitedWebSocketProtocol``,
websockets' sans-I/O protocol) keeps counting in its client's share until it closes; its time is the
app's (the spec's 60 minutes) and its keepalive pings', not the head's timeout.

Every connection is an open file: ``serve`` raises its soft limit on open files to the hard one
(``raise_open_file_limit``), as servers do, so that these limits, not a default of 1,024, bound them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
from collections import deque
from typing import Any, Literal

import httptools
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import STATUS_LINE
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from conformance import jsoncodec
from conformance.openai_errors import error_body
from conformance.protocols import protocol_for_path

from . import graceful
from .config import ProxyConfig
from .http_protocol import HeadWithBodyProtocol

__all__ = [
    "MAX_HEAD_BYTES",
    "MAX_PIPELINED",
    "OVER_CAP_TIMEOUT",
    "LimitedClientProtocol",
    "LimitedWebSocketProtocol",
    "raise_open_file_limit",
]

MAX_HEAD_BYTES = 64 * 1024
"""The request line and headers together; Node.js allows 16 KiB, nginx 8 KiB per line."""
MAX_PIPELINED = 8
"""Requests received while another is answered on the same connection."""
OVER_CAP_TIMEOUT = 1.0
"""Seconds for the head of a connection opened past ``--max-connections`` (at most --client-timeout)."""
_HEALTH = b"/health"
_PER_CLIENT: dict[str, int] = {}
"""Open connections of this worker by client address, and requests open through a trusted proxy by the
address they were forwarded for."""
_OPEN_FILES = 1 << 20  # the target where the hard limit is unlimited (Linux's default nr_open)


def raise_open_file_limit() -> int | None:
    """The soft limit on open files raised to the hard limit; the limit now (None where there is none)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):  # a hard limit above what the kernel allows
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class _Refused(Exception):
    """Raised from a parser callback to stop parsing the rest of what the client sent."""


def _error(path: bytes | str | None, status: int, message: str, code: str) -> bytes:
    """The error body for a request to ``path``, in its protocol's words (Anthropic's on
    ``/v1/messages``: its SDKs read no other), written before the request reaches its route."""
    body = error_body(message, status, code=code)
    protocol = protocol_for_path(path.decode("latin-1") if isinstance(path, bytes) else path)
    if protocol is not None and protocol.error is not None:
        body = protocol.error(body, status)
    return jsoncodec.dumps(body)


def _error_response(
    path: bytes | None, status: int, message: str, code: str, default_headers: list[tuple[bytes, bytes]]
) -> bytes:
    """A whole error response that closes its connection, written without the app."""
    body = _error(path, status, message, code)
    head = [STATUS_LINE[status]]
    for name, value in default_headers:
        head += (name, b": ", value, b"\r\n")
    head += (b"content-type: application/json\r\ncontent-length: ", b"%d" % len(body), b"\r\n")
    head += (b"connection: close\r\n\r\n", body)
    return b"".join(head)


async def _busy(scope: Scope, receive: Receive, send: Send) -> None:
    """The answer past ``--max-connections``: 503, and the connection closed after it."""
    body = _error(
        scope["path"], 503, "the proxy has too many open connections; retry later", "too_many_connections"
    )
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"connection", b"close"),
        (b"retry-after", b"1"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=8)
def trusted_networks(trusted: tuple[str, ...]) -> tuple[_Network, ...]:
    """``--trusted-proxies`` as networks (an address is a network of one), read once per setting."""
    return tuple(ipaddress.ip_network(item, strict=False) for item in trusted)


def is_trusted(host: str, networks: tuple[_Network, ...]) -> bool:
    """Whether ``host`` is one of the trusted proxies (an IPv4 peer of a dual-stack socket, written
    ``::ffff:a.b.c.d``, as its IPv4 address)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)


def _hop(text: str) -> str:
    """One hop's address without its quotes, brackets and port: ``"[2001:db8::1]:4711"`` is
    ``2001:db8::1``, ``192.0.2.60:8080`` is ``192.0.2.60``; anything else (``unknown``) as it is."""
    text = text.strip().strip('"')
    if text.startswith("["):
        return text[1:].partition("]")[0]
    return text.partition(":")[0] if text.count(":") == 1 else text


def _forwarded_for(value: str) -> list[str]:
    """The ``for=`` of each element of a ``Forwarded`` header (RFC 7239 section 4), in order."""
    hops = []
    for element in value.split(","):
        for pair in element.split(";"):
            name, _, given = pair.partition("=")
            if name.strip().lower() == "for":
                hops.append(given)
    return hops


def forwarded_client(headers: list[tuple[bytes, bytes]], networks: tuple[_Network, ...]) -> str | None:
    """The client a trusted proxy forwarded a request for (``headers`` as ASGI's, names in lower case):
    the right-most hop of ``X-Forwarded-For`` that is no trusted proxy, the left-most where all are; of
    ``Forwarded``'s ``for=`` where there is no ``X-Forwarded-For``; None where neither names one."""
    listed = [value.decode("latin-1") for name, value in headers if name == b"x-forwarded-for"]
    if listed:
        hops = [hop for value in listed for hop in value.split(",")]
    else:
        standard = [value.decode("latin-1") for name, value in headers if name == b"forwarded"]
        hops = [hop for value in standard for hop in _forwarded_for(value)]
    addresses = [address for address in map(_hop, hops) if address]
    for address in reversed(addresses):
        if not is_trusted(address, networks):
            return address
    return addresses[0] if addresses else None


def _peer(transport: asyncio.BaseTransport) -> str | None:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else None


def _counted_in(client: str | None) -> str | None:
    """``client``, counted in its share (None: no client to count)."""
    if client is not None:
        _PER_CLIENT[client] = _PER_CLIENT.get(client, 0) + 1
    return client


def _counted_out(client: str | None) -> None:
    if client is None:
        return
    left = _PER_CLIENT.get(client, 1) - 1
    if left > 0:
        _PER_CLIENT[client] = left
    else:
        _PER_CLIENT.pop(client, None)  # (a client gone holds no entry: the table stays bounded)


_CLOSE_GRACE = 2.0
"""Seconds a socket whose keepalive timed out has to take its close frame before it is cut."""


class LimitedWebSocketProtocol(WebSocketsSansIOProtocol):
    """The socket an upgraded request becomes, counted in its client's share while it is open: the count
    its handshake held is handed over (``held``), with the handshake's client (forwarded, behind a
    trusted proxy), which the socket's scope then names."""

    def __init__(
        self,
        *args: Any,
        held: str | None = None,
        client: tuple[str, int] | None = None,
        shutdown_timeout: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._client = held
        self._handshake_client = client
        self._shutdown_timeout = shutdown_timeout
        self._open = True  # until the connection is lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._handshake_client is not None:
            self.client = self._handshake_client

    def connection_lost(self, exc: Exception | None) -> None:
        self._open = False
        client, self._client = self._client, None
        _counted_out(client)
        super().connection_lost(exc)

    def keepalive_timeout(self) -> None:
        """No pong within the ping timeout: uvicorn writes its close frame and closes the transport, which
        first waits for everything buffered to be sent; a client that stopped reading never takes it, so
        the socket and its turn stayed open for good (found by black-box testing: 140 s and on, where
        docs/responses.md promised about 40). The connection is aborted once the close had its chance."""
        super().keepalive_timeout()
        self.loop.call_later(_CLOSE_GRACE, self._abort_if_open)

    def _abort_if_open(self) -> None:
        if self._open:
            self.transport.abort()

    def shutdown(self) -> None:
        """uvicorn's server is stopping: an open socket is not closed now (uvicorn closed it with 1012 at
        once, cancelling the turn under way upstream), but by the app once its turn is answered, or at
        the deadline where the turn is ended as an HTTP response is (proxy/graceful.py); uvicorn waits
        for it as for a connection still sending."""
        if not self.handshake_complete or self.close_sent:
            super().shutdown()
            return
        self.stop_keepalive()
        graceful.begin_shutdown(self.loop, self._shutdown_timeout)


def proxy_config_of(app: Any) -> ProxyConfig | None:
    """The ProxyConfig of the proxy app inside uvicorn's wrappers (None for another app)."""
    for _ in range(8):  # uvicorn wraps the app in at most a few middlewares, each holding ``.app``
        state = getattr(app, "state", None)
        serving = getattr(state, "serving", None) if state is not None else None
        if serving is not None:
            config = getattr(serving, "config", None)
            return config if isinstance(config, ProxyConfig) else None
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


class LimitedClientProtocol(HeadWithBodyProtocol):
    """``uvicorn.run(app, http=LimitedClientProtocol)``: the proxy's protocol, with the limits above.

    The timeout and the connection cap are the proxy app's settings (``ProxyConfig``), read from the
    app uvicorn serves, so that spawned workers get them with the rest of their configuration.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = proxy_config_of(self.app) or ProxyConfig(upstream="")
        self._timeout = config.client_timeout
        self._max_connections = config.max_connections
        self._max_per_client = config.max_connections_per_client
        self._client: str | None = None  # its address, counted in _PER_CLIENT while it is open
        self._networks = trusted_networks(config.trusted_proxies)
        self._trusted = False  # the peer is a trusted proxy: its requests count, not the connection
        self._forwarded: deque[str | None] = deque()
        """Of a trusted proxy's connection: each request's client, counted until its response is
        complete, oldest first (None: it named none)."""
        self._shutdown_timeout = config.shutdown_timeout
        self._phase: Literal["head", "body"] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._head_bytes = 0  # of the current head, as the parser's callbacks hand it over
        self._head_chunks = 0  # of the reads that fell wholly within the current head
        self._heads = 0  # heads begun on this connection
        self._refused = False
        if self.ws_protocol_class is not None:  # (None: uvicorn told to serve no WebSocket)
            self.ws_protocol_class = LimitedWebSocketProtocol

    # -- the connection --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = _peer(transport)
        self._trusted = bool(self._networks) and peer is not None and is_trusted(peer, self._networks)
        self._client = None if self._trusted else _counted_in(peer)
        if self._over_cap():
            self._timeout = min(self._timeout, OVER_CAP_TIMEOUT)  # for /health, or it goes soon
        self._start("head")  # a connection that never sends a byte is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        self._count_out()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        if self._forwarded:  # (a trusted proxy's: answered in order, as they came)
            _counted_out(self._forwarded.popleft())
        super().on_response_complete()

    def data_received(self, data: bytes) -> None:
        # uvicorn's own, with the refusals below in place of its 400 for a callback's exception.
        if self._refused:
            return
        self._unset_keepalive_if_required()
        if self._phase is None:
            self._start("head")
        heads, in_head = self._heads, self._phase == "head"
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if not self._refused:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if in_head and self._phase == "head" and heads == self._heads:
            # httptools keeps an unfinished header to itself: what it holds is counted by the reads.
            self._head_chunks += len(data)
            if self._head_chunks > MAX_HEAD_BYTES:
                self._too_large()

    def handle_websocket_upgrade(self) -> None:
        """A WebSocket handshake's head has come: past the caps it is answered 503 as a request is;
        else the connection becomes a socket (``LimitedWebSocketProtocol``), which counts itself from
        now on, and the head's timer stops."""
        self._stop()  # (before a refusal too: it answers the head, not a body of this request)
        if self._over_cap():
            self._refuse(503, "the proxy has too many open connections; retry later", "too_many_connections")
            return
        if self._forwarded:
            held = self._forwarded.pop()  # the handshake's own, the last request
        else:
            held, self._client = self._client, None
        self._count_out()  # (this protocol's connection_lost is never called: the socket's is)
        socket = functools.partial(
            LimitedWebSocketProtocol,
            held=held,
            client=self.scope["client"],
            shutdown_timeout=self._shutdown_timeout,
        )
        self.ws_protocol_class = socket  # type: ignore[assignment]
        super().handle_websocket_upgrade()

    def shutdown(self) -> None:
        """uvicorn's server is stopping: open responses are ended at the deadline (proxy/graceful.py)."""
        graceful.begin_shutdown(self.loop, self._shutdown_timeout)
        super().shutdown()

    # -- parser callbacks --------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._heads += 1
        self._head_bytes = self._head_chunks = 0
        if self._phase is None:
            self._start("head")

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._phase = "body"  # the body's time counts from here; the timer moves when it fires
        self._deadline = self.loop.time() + self._timeout
        if self._trusted:
            client = forwarded_client(self.headers, self._networks)
            if client is not None:
                self.scope["client"] = (client, 0)  # (no port: the proxy's own is not the client's)
            self._forwarded.append(_counted_in(client))
        if self._over_cap() and httptools.parse_url(self.url).path != _HEALTH:
            # uvicorn's own choice of app (its limit_concurrency) answers plain text and counts tasks.
            app, self.app = self.app, _busy
            try:
                super().on_headers_complete()
            finally:
                self.app = app
        else:
            super().on_headers_complete()
        if len(self.pipeline) > MAX_PIPELINED:
            self._refused = True
            self.logger.warning("closed a connection with more than %d pipelined requests", MAX_PIPELINED)
            self.transport.close()
            raise _Refused

    def on_message_complete(self) -> None:
        self._stop()
        super().on_message_complete()

    # -- the limits --------------------------------------------------------------------------------

    def _over_cap(self) -> bool:
        """Past the process's cap, or this client past its share of it, as a request arrives (the
        client of a trusted proxy's connection: its last request's)."""
        client = self._forwarded[-1] if self._forwarded else self._client
        held = _PER_CLIENT.get(client, 0) if client is not None else 0
        return len(self.connections) > self._max_connections or held > self._max_per_client

    def _count_out(self) -> None:
        """What this connection holds in the shares, given back: its client's, its open requests'."""
        client, self._client = self._client, None
        _counted_out(client)
        while self._forwarded:
            _counted_out(self._forwarded.popleft())

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            self._too_large()
            raise _Refused

    def _too_large(self) -> None:
        self._refuse(431, f"the request head is larger than {MAX_HEAD_BYTES} bytes", "request_head_too_large")

    def _refuse(self, status: int, message: str, code: str) -> None:
        """Answer ``status`` where that answer would be the next on the connection, and close it."""
        self._refused = True
        cycle, phase = self.cycle, self._phase
        self._stop()
        if phase == "body":
            # This request's own cycle: the app waits for a body that will not come. It sees the client
            # gone and answers no one; the 408 goes out unless the app has answered already.
            answer = not cycle.response_started
            if not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()
        else:  # a head: the cycle, if any, is the previous request's
            answer = cycle is None or cycle.response_complete
        if answer:
            # The refused request's path (its head's, as far as it came; none before its first byte).
            path = getattr(self, "url", b"").split(b"?", 1)[0]
            self.transport.write(
                _error_response(path, status, message, code, self.server_state.default_headers)
            )
        self.transport.close()

    def _start(self, phase: Literal["head", "body"]) -> None:
        self._phase = phase
        self._deadline = self.loop.time() + self._timeout
        if self._timer is None:
            self._timer = self.loop.call_at(self._deadline, self._expire)

    def _stop(self) -> None:
        self._phase = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        """The timer, set once per request and moved only when it fires early (a body's time starts
        at its head's end): a request costs one timer, not two."""
        self._timer = None
        if self._phase is None or self.transport.is_closing():
            return
        if self.loop.time() < self._deadline or (
            self._phase == "head" and self.cycle is not None and not self.cycle.response_complete
        ):
            # Early, or a pipelined head while an answer is still being sent: wait on.
            deadline = max(self._deadline, self.loop.time() + 1.0)
            self._timer = self.loop.call_at(deadline, self._expire)
            return
        what = "request head" if self._phase == "head" else "request body"
        self._refuse(408, f"the {what} did not arrive within {self._timeout:g} s", "request_timeout")
