"""The upstream transport: httpx's request and response types over pooled asyncio connections,
with responses parsed by httptools (llhttp, the C parser uvicorn uses for the client side).

The proxy's own time to first token is mostly the cost of one upstream request: httpx's default
transport parses HTTP in pure Python (h11) and walks its pool on every request, and aiohttp (through
httpx-aiohttp) builds a session request, a response object, a tracing context and a body-writing task
for each. A request written in one ``transport.write`` and parsed by llhttp as the bytes arrive costs
less: 1.39 against 1.23 ms of the proxy's CPU per request in an A/B of this transport against
httpx-aiohttp, and the A/B of requests as bytes, 26 against 4 µs (bench/RESULTS.md).
The proxy sends one kind of request (a bytes body, no redirects, no cookies, no HTTP/2), so this module
keeps only that path and leaves the client API to ``httpx.AsyncClient``. The completion requests skip
even ``httpx.Request``: ``UpstreamTransport.send`` takes them as bytes (``request_bytes``).

Faults are httpx errors, as an httpx transport's must be (proxy/upstream_faults.py maps each to the
proxy's error classes):

- nothing can be connected: ``ConnectError``; the connect takes too long: ``ConnectTimeout``;
- the connection closes before any response byte: ``RemoteProtocolError``; when it was a pooled
  keep-alive connection the upstream dropped while idle (llama-server does), ``send`` first retries
  once on a fresh connection;
- a reply that is not HTTP, or whose head (status line and headers) runs past ``MAX_HEAD`` bytes:
  ``ProtocolError`` (not retried; the head's bytes are counted as they arrive: a 400 MB head took
  the proxy's memory up by as much, issue 18);
- a body cut short or badly framed: ``ReadError``, raised only after every byte received before it has
  been handed over (an upstream that sends ``[DONE]`` and closes without the chunked terminator loses
  nothing).

Every concurrent stream holds its own connection, as a client of a streaming server must; the pool
holds at most ``max_connections`` open at once (``--max-upstream-connections``), and a request past
that waits, first come first served, for one to close or come back idle (a 1 KB request fanned out to
25,600 upstream requests at once had run the proxy out of files). The wait is for a place in
``admission`` (proxy/admission.py: a fan-out's places are taken together), then, rarely, for an idle
connection to another origin to close. An idle connection is closed
``keepalive_expiry`` seconds after its last use by a timer, not only when the next request looks at the
pool (10,000 idle sockets were still open a minute after that fan-out).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import cast

import httptools
import httpx

from .admission import Admission, Reservation

__all__ = ["MAX_HEAD", "Origin", "ResponseBody", "UpstreamTransport", "origin_of", "request_bytes"]

MAX_HEAD = 64 * 1024
"""The most bytes a response head may take: the cap the proxy puts on a client's request head."""

# Received but unread body bytes above which the connection stops reading until the next read takes
# them (a slow client then slows the upstream instead of filling the proxy's memory).
_HIGH_WATER = 256 * 1024

Origin = tuple[str, str, int]
"""Scheme, host and port: what a pooled connection is for."""
# Framing headers: the body is always sent whole, with its length set by request_bytes.
_SET_HERE = frozenset({b"content-length", b"transfer-encoding"})


class _Connection(asyncio.Protocol):
    """One upstream connection, serving one request at a time."""

    def __init__(self, key: Origin, on_lost: Callable[[_Connection], None]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.on_lost = on_lost  # the pool's count of open connections
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        self._active = False
        self._prepare()

    def _prepare(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.headers: list[tuple[bytes, bytes]] = []
        self.reason = b""
        self.status = 0
        self._head: asyncio.Future[None] | None = None
        self._parts: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._received = False
        self._head_bytes = 0
        self._complete = False
        self._until_close = False
        self._keep_alive = False
        self._failure: httpx.TransportError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._read_timeout: float | None = None
        self._first_read_timeout: float | None = None
        self._body_started = False
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None

    # -- the request side --------------------------------------------------------------------------

    def send(self, data: bytes, read_timeout: float | None, first_read_timeout: float | None) -> None:
        assert self.transport is not None
        self._prepare()
        self._read_timeout = read_timeout
        self._first_read_timeout = first_read_timeout
        self._active = True
        self._head = asyncio.get_running_loop().create_future()
        self.transport.write(data)

    async def response_head(self) -> None:
        """Wait for the status line and headers; raise the failure that came instead."""
        assert self._head is not None
        await self._head

    async def next_data(self) -> bytes | None:
        """All body bytes received since the last call, waiting for some; None at the end."""
        while True:
            if self._parts:
                data = b"".join(self._parts)
                self._parts.clear()
                self._buffered = 0
                if self._paused and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                self._body_started = True
                return data
            if self._complete:
                return None
            if self._failure is not None:
                raise self._failure
            loop = asyncio.get_running_loop()
            timeout = self._read_timeout if self._body_started else self._first_read_timeout
            if timeout is not None:
                self._deadline = loop.time() + timeout
                if self._timer is not None and self._timer.when() > self._deadline:
                    self._timer.cancel()  # armed for the first read's longer bound
                    self._timer = None
                if self._timer is None:
                    self._timer = loop.call_at(self._deadline, self._check_deadline, loop)
            self._waiter = loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _check_deadline(self, loop: asyncio.AbstractEventLoop) -> None:
        """The read timeout, as one timer per connection that each wait pushes back: the timer is moved
        only when it fires early, so a read costs a clock reading rather than a timer of its own."""
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # not waiting: the next wait sets the timer again
        if loop.time() < self._deadline:
            self._timer = loop.call_at(self._deadline, self._check_deadline, loop)
        else:
            waiter.set_exception(
                httpx.ReadTimeout("the upstream server sent nothing within the read timeout")
            )

    @property
    def received(self) -> bool:
        """Whether any byte of the current response arrived."""
        return self._received

    @property
    def reusable(self) -> bool:
        return self._complete and self._keep_alive and not self.closed

    @property
    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def finish(self) -> None:
        self._active = False
        self._stop_timer()

    def close(self) -> None:
        self.closed = True
        self._active = False
        self._stop_timer()
        if self.transport is not None:
            self.transport.close()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- asyncio.Protocol ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        if not self._active or self._complete:
            self.close()  # bytes nobody asked for: the connection is no longer in a known state
            return
        self._received = True
        head = self._head
        in_head = head is not None and not head.done()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx.ProtocolError("the upstream server switched protocols"))
        except httptools.HttpParserError as exc:
            if self._head is not None and not self._head.done():
                self._fail(httpx.ProtocolError(f"the upstream reply is not valid HTTP: {exc}"))
            else:
                self._fail(httpx.ReadError(f"the upstream response body is badly framed: {exc}"))
        if in_head and head is not None and not head.done():
            # Still in the head: httptools holds a header until it is whole, so the bytes are counted
            # here (a read is 256 KiB at most: the parser never holds much more than MAX_HEAD).
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD:
                self._fail(httpx.ProtocolError(f"the upstream response head is over {MAX_HEAD // 1024} KiB"))
        if self._buffered > _HIGH_WATER and not self._paused and not self.closed:
            self._paused = True
            transport = self.transport
            assert transport is not None
            transport.pause_reading()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.on_lost(self)
        if not self._active:
            return
        if self._head is not None and not self._head.done():
            if not self._received:
                self._fail(
                    httpx.RemoteProtocolError("the upstream server closed the connection without a response")
                )
            else:
                self._fail(httpx.RemoteProtocolError("the upstream server closed the connection mid-reply"))
        elif not self._complete:
            if self._until_close:
                self._complete = True  # a body without a length ends with the connection
                self._wake()
            else:
                self._fail(
                    httpx.ReadError("the upstream server closed the connection before the response ended")
                )

    def _fail(self, error: httpx.TransportError) -> None:
        if self._failure is None:
            self._failure = error
        if self._head is not None and not self._head.done():
            self._head.set_exception(error)
        self._wake()
        self.close()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -- httptools callbacks ---------------------------------------------------------------------------

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:  # an informational reply: the real one follows
            self.headers = []
            self.reason = b""
            return
        self.status = status
        names = {name.lower() for name, _ in self.headers}
        chunked = any(
            name.lower() == b"transfer-encoding" and b"chunked" in value.lower()
            for name, value in self.headers
        )
        self._until_close = b"content-length" not in names and not chunked and status not in (204, 304)
        if self._head is not None and not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._parts.append(body)
        self._buffered += len(body)
        self._wake()

    def on_message_complete(self) -> None:
        if self.status:
            self._complete = True
            # Read here: llhttp resets its flags once the message is done.
            self._keep_alive = not self._until_close and self._parser.should_keep_alive()
            self._wake()


class ResponseBody(httpx.AsyncByteStream):
    """A response body read from its connection; the connection goes back to the pool at its end.

    ``read()`` is the body without the two async generators of ``Response.aiter_raw()``; the proxy's
    streams read through it, one call per upstream read.
    """

    def __init__(
        self, pool: UpstreamTransport, connection: _Connection, place: Admission | Reservation
    ) -> None:
        """``place``: where the request's place goes back at the end."""
        self._pool = pool
        self._connection: _Connection | None = connection
        self._place = place

    async def read(self) -> bytes | None:
        """Every byte received since the last read (waiting for some), None at the end."""
        connection = self._connection
        if connection is None:
            return None
        data = await connection.next_data()
        if data is None:
            await self.aclose()
        return data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (data := await self.read()) is not None:
            yield data

    async def aclose(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            self._pool.release(connection)
            self._place.give()


class UpstreamTransport(httpx.AsyncBaseTransport):
    def __init__(self, keepalive_expiry: float, max_connections: int = 1000) -> None:
        self._keepalive_expiry = keepalive_expiry
        self._max_connections = max_connections
        # Requests in flight, at most one per connection the cap allows: with them bounded so, a
        # request admitted finds a connection, or one to close for it, and a fan-out is admitted whole.
        self.admission = Admission(max_connections)
        self._idle: dict[Origin, list[_Connection]] = {}
        self._in_use: set[_Connection] = set()
        self._open: set[_Connection] = set()  # connected or connecting, until the connection is lost
        self._waiters: collections.deque[asyncio.Future[bool]] = collections.deque()
        self._granted = 0  # slots handed to waiting requests that have not opened their connection yet
        self._sweep: asyncio.TimerHandle | None = None
        self._ssl: ssl.SSLContext | None = None

    def open_connections(self) -> int:
        """Upstream connections open now, in use or idle."""
        return len(self._open)

    def connections_in_use(self) -> int:
        """Upstream connections that a request or response still holds (a leak shows here)."""
        return len(self._in_use)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        body = await request.aread()  # a bytes body is already read: this returns it
        message = request_bytes(request.method, request.url.raw_path, request.headers.raw, body)
        return await self.send(
            origin_of(request.url),
            message,
            connect_timeout=timeouts.get("connect"),
            read_timeout=timeouts.get("read"),
        )

    async def send(
        self,
        origin: Origin,
        message: bytes,
        *,
        connect_timeout: float | None,
        read_timeout: float | None,
        first_read_timeout: float | None = None,
        reservation: Reservation | None = None,
    ) -> httpx.Response:
        """Send ``message`` (``request_bytes``) to ``origin``; return once the response head arrived.

        The request waits its turn for a place in ``admission`` (a fan-out's requests use the places
        of its ``reservation``); the place is given back where it came from when its response body is
        closed.
        The proxy's completion requests come here directly with bytes built once, without an
        ``httpx.Request``: building one and its headers costs more CPU than the rest of the way out.
        """
        place: Admission | Reservation
        if reservation is not None and reservation.use():
            place = reservation
        else:
            place = self.admission
            await place.take()
        try:
            connection = await self._sent(origin, message, connect_timeout, read_timeout, first_read_timeout)
        except BaseException:
            place.give()
            raise
        return httpx.Response(
            connection.status,
            headers=connection.headers,
            stream=ResponseBody(self, connection, place),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": connection.reason.strip()},
        )

    async def _sent(
        self,
        origin: Origin,
        message: bytes,
        connect_timeout: float | None,
        read_timeout: float | None,
        first_read_timeout: float | None,
    ) -> _Connection:
        """The connection ``message`` went out on, its response head read."""
        for attempt in (1, 2):
            connection = await self._acquire(origin, connect_timeout, fresh=attempt == 2)
            try:
                # The read timeout bounds each wait for body bytes after the first; the wait for the
                # response head is the caller's to bound, and so is the first body byte when
                # ``first_read_timeout`` is given (a server that sends its head before running the
                # model, as llama-cpp-python does, is in prompt processing until then).
                first = read_timeout if first_read_timeout is None else first_read_timeout
                connection.send(message, read_timeout, first)
                await connection.response_head()
                break
            except httpx.RemoteProtocolError:
                self.release(connection)
                # Only a reused keep-alive connection closed before any response byte is retried: the
                # upstream closed it while idle (llama-server does), before the request arrived. A new
                # connection closed so had the request and may have acted on it: generation is not
                # idempotent.
                if not connection.reused or connection.received or attempt == 2:
                    raise
                self._drop_idle(connection.key)  # one dropped keep-alive connection: likely all of them
            except BaseException:
                self.release(connection)
                raise
        return connection

    async def _acquire(self, key: Origin, connect_timeout: float | None, *, fresh: bool) -> _Connection:
        granted = False  # a slot handed over by a connection that closed while this request waited
        waited = False
        while True:
            idle = None if fresh else self._idle.get(key)
            expired = time.monotonic() - self._keepalive_expiry
            while idle:
                connection = idle.pop()
                if connection.closed or connection.idle_since < expired or connection.closing:
                    connection.close()
                    continue
                if granted:
                    self._pass_slot()  # not needed after all
                connection.reused = True
                self._in_use.add(connection)
                return connection
            if granted or (self._free_slots() > 0 and (waited or not self._waiters)):
                break  # (a request that waited was first in line: it goes before those behind it)
            if self._free_slots() <= 0:
                self._close_one_idle()  # its slot is free once it is lost, and handed to the first waiter
            # A request woken for an idle connection that another origin's: it keeps its place in line.
            granted = await self._wait_turn(front=waited)
            waited = True
        connection = _Connection(key, self._lost)
        self._open.add(connection)
        self._in_use.add(connection)
        try:
            await self._connect(connection, connect_timeout)
        except BaseException:
            self._in_use.discard(connection)
            self._lost(connection)  # connection_lost never comes for a connection never made
            connection.close()
            raise
        return connection

    def _free_slots(self) -> int:
        return self._max_connections - len(self._open) - self._granted

    async def _wait_turn(self, *, front: bool) -> bool:
        """Wait, behind every request that waited before, for a connection to close (True: its slot is
        this request's) or to go idle (False: look at the pool again)."""
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if front:
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        try:
            granted = await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                if waiter.result():  # woken and gone: the turn passes to the next
                    self._pass_slot()
                else:
                    self._wake()
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        if granted:
            self._granted -= 1  # the caller opens a connection in its place (or passes it on)
        return granted

    def _wake(self) -> None:
        """A connection went idle: the first waiting request looks at the pool again."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(False)
                return

    def _pass_slot(self) -> None:
        """A slot is free: it goes to the first waiting request, so that no newcomer takes it first."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._granted += 1
                waiter.set_result(True)
                return

    def _lost(self, connection: _Connection) -> None:
        if connection in self._open:
            self._open.discard(connection)
            self._pass_slot()

    def _close_one_idle(self) -> None:
        """At the cap, an idle connection (to any origin) makes room for a request that waits."""
        for connections in self._idle.values():
            if connections:
                connections.pop(0).close()
                return

    def _schedule_sweep(self) -> None:
        if self._sweep is None:
            loop = asyncio.get_running_loop()
            self._sweep = loop.call_later(self._keepalive_expiry, self._close_expired)

    def _close_expired(self) -> None:
        """Idle connections past their expiry closed by the clock, not only by the next request."""
        self._sweep = None
        expired = time.monotonic() - self._keepalive_expiry
        for key, connections in list(self._idle.items()):
            kept = [c for c in connections if c.idle_since >= expired and not c.closed]
            for connection in connections:
                if connection not in kept:
                    connection.close()
            if kept:
                self._idle[key] = kept
            else:
                del self._idle[key]
        if self._idle:
            self._schedule_sweep()

    async def _connect(self, connection: _Connection, timeout: float | None) -> None:  # noqa: ASYNC109
        scheme, host, port = connection.key
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"the upstream URL scheme {scheme!r} is not http or https")
        context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(
                    lambda: connection, host, port, ssl=context, server_hostname=host if context else None
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(f"could not connect to {host}:{port}: {exc.strerror or exc}") from None

    def release(self, connection: _Connection) -> None:
        """Back to the pool when its response was read to the end and may be followed; closed otherwise."""
        self._in_use.discard(connection)
        if connection.reusable:
            connection.finish()
            connection.idle_since = time.monotonic()
            self._idle.setdefault(connection.key, []).append(connection)
            self._schedule_sweep()
            self._wake()  # a request waiting for this origin takes it
        else:
            connection.close()

    def _drop_idle(self, key: Origin) -> None:
        for connection in self._idle.pop(key, []):
            connection.close()

    async def aclose(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for key in list(self._idle):
            self._drop_idle(key)
        for connection in list(self._in_use):
            connection.close()
        self._in_use.clear()


def origin_of(url: httpx.URL) -> Origin:
    """The pool key of ``url``: scheme, host and port."""
    return (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))


def request_bytes(method: str, target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> bytes:
    """An HTTP/1.1 request, head and whole body, to go out in one write; the body's length declared."""
    lines = [method.encode(), b" ", target, b" HTTP/1.1\r\n"]
    for name, value in headers:
        if name.lower() not in _SET_HERE:
            lines += (name, b": ", value, b"\r\n")
    if body or method in ("POST", "PUT", "PATCH"):
        lines += (b"content-length: ", b"%d" % len(body), b"\r\n")
    lines += (b"\r\n", body)
    return b"".join(lines)
