"""Writing a source's output to the client: held status, streamed chunks, and cancel on disconnect.

``HeldResponse`` runs the whole exchange as one task and watches ``receive()`` for the client going
away from the first moment, not only once the body has started (Starlette's ``StreamingResponse``
does not watch while the upstream's first byte is awaited), so the upstream is cancelled at once.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from conformance import jsoncodec
from conformance.api_errors import REDACTED, APIError, secret_in_bodies
from conformance.protocols.front_end import CHUNKS, DataLines, Output, Pieces, pieces_of
from conformance.protocols.spooled_text import SpoolUnreadable
from conformance.request_info import RequestInfo

from . import graceful
from .errors import first_byte_timeout_error
from .observability import Exchange
from .reshape import Aggregator, synthesize_chunks
from .sources.base import FIRST_CHUNKS_DUE, Source

__all__ = ["HeldResponse", "redacting", "send_json", "serve_source"]

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_JSON_HEADERS = [(b"content-type", b"application/json")]
_COALESCE_LIMIT = 256 * 1024


_dumps = jsoncodec.dumps


async def send_json(
    send: Send, status: int, body: Any, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": _JSON_HEADERS + (headers or [])})
    await send({"type": "http.response.body", "body": _dumps(body)})


Worded = Callable[[dict[str, Any], int], dict[str, Any]]


def _as_is(error: dict[str, Any], status: int) -> dict[str, Any]:
    return error


class HeldResponse(Response):
    """An ASGI response that runs ``run(send)`` and cancels it when the client disconnects, or ends it
    when the server's shutdown deadline comes (proxy/graceful.py)."""

    def __init__(
        self,
        run: Callable[[Send], Awaitable[None]],
        exchange: Exchange,
        cut: Callable[[dict[str, Any]], bytes] | None = CHUNKS.cut,
        worded: Worded = _as_is,
    ) -> None:
        self._run = run
        self._exchange = exchange
        self._cut = cut
        """A stream's last event when the deadline cuts it (``Output.cut``); None: it cannot say why."""
        self._worded = worded  # the deadline's 503 before any output, in the client's protocol
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        state = {"done": False, "ending": False, "started": False, "stream": False, "complete": False}

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    # (uvicorn says so too once the response is whole: then nothing of it was lost, and
                    # what is left, its source's closing, is not cut short)
                    if not state["done"] and not state["complete"]:
                        self._exchange.disconnected = True
                        task.cancel()
                    return

        async def watched_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
                state["stream"] = (b"content-type", _SSE_HEADERS[0][1]) in message.get("headers", ())
            elif not message.get("more_body", False):
                state["complete"] = True
            await send(message)

        def end() -> None:
            if not state["done"]:
                state["ending"] = True
                task.cancel()

        watcher = asyncio.create_task(watch())
        forget = graceful.track(end)
        try:
            await self._run(watched_send)
        except asyncio.CancelledError:
            if state["ending"] and not self._exchange.disconnected:
                task.uncancel()
                await self._end_for_shutdown(send, state)
            elif not self._exchange.disconnected:
                raise
            else:
                task.uncancel()
        except OSError:
            self._exchange.disconnected = True  # the client went away while we were sending
        finally:
            state["done"] = True
            forget()
            watcher.cancel()
            if self._exchange.disconnected and task.cancelling():
                task.uncancel()

    async def _end_for_shutdown(self, send: Send, state: dict[str, bool]) -> None:
        """The shutdown deadline came: a 503, or a stream's error event, as far as the client reads."""
        error = graceful.shutting_down_error()
        self._exchange.take_error(error)  # the log line's error_code too, as for every other error
        body = error.body
        if not state["started"]:
            await graceful.last_words(send_json(send, 503, self._worded(body, 503)))
        elif state["stream"] and not state["complete"] and self._cut and (last := self._cut(body)):
            await graceful.last_words(send({"type": "http.response.body", "body": last}))
        # Any other body cut short cannot say why: uvicorn closes its connection. So too a stream cut
        # inside its last event, sent in pieces (``cut`` gives b""): nothing follows half an event (see
        # _CoalescingWriter); before, its body ended there, and its half event with it.


async def serve_source(
    send: Send,
    source: Source,
    request: RequestInfo,
    exchange: Exchange,
    first_byte_timeout: float,
    secret: str | None = None,
    worded: Worded = _as_is,
) -> None:
    """Hold the status until the first normalized output, then answer as the client asked, through the
    source's output (chosen with the upstream that answers).

    ``secret`` (the upstream key) is cut out of every error the client or the log would see, and out of
    every body sent: an upstream that repeats it in an id or a text does not pass it on. ``worded``:
    an error before any output (the upstream's refusal) in the client's protocol (``FrontEnd.error``).
    """
    send = redacting(send, secret)
    try:
        await _serve(send, source, request, exchange, first_byte_timeout, secret, worded)
    finally:
        # What the sources repaired, reported once they are done.
        exchange.record(source.repairs)


async def _serve(
    send: Send,
    source: Source,
    request: RequestInfo,
    exchange: Exchange,
    first_byte_timeout: float,
    secret: str | None,
    worded: Worded,
) -> None:
    try:
        await source.prepare()
        try:
            async with asyncio.timeout(first_byte_timeout) as window:
                FIRST_CHUNKS_DUE.set(window.when())
                initial = await source.start()
        except TimeoutError:
            raise first_byte_timeout_error() from None
    except APIError as raised:
        exc = raised.redacted(secret)
        await source.aclose()
        exchange.upstream_status = source.upstream_status
        exchange.take_error(exc)
        await send_json(send, exc.status, worded(exc.body, exc.status), exc.headers)
        return
    except BaseException:
        # Cancelled (the client went away) after an upstream answered its head but before the first
        # event: that upstream request is closed now, or it would go on generating for no one.
        await source.aclose()
        raise
    exchange.upstream_status = source.upstream_status
    if source.secret is not None and source.secret != secret:
        send = redacting(send, source.secret)  # a routed replica's own key
    output = source.output
    try:
        if source.body is not None:
            await _send_body(send, source.body, request, exchange, output)
        elif request.stream:
            await _stream(send, source, initial, exchange, secret, output)
        else:
            await _aggregate(send, source, initial, request, exchange, secret, output, worded)
    finally:
        await source.aclose()


def redacting(send: Send, secret: str | None) -> Send:
    """``send`` with the upstream key (``secret``) cut out of every body message: each holds whole
    events or a whole JSON body, so a key the upstream sent in one string is in one message; or a piece
    of a long event (a Response's spooled text, ``Pieces``), whose end is held back while it may be the
    start of the key, and sent with the next."""
    key = secret_in_bodies(secret)
    if key is None:
        return send
    mask = REDACTED.encode()
    held = b""

    async def redacting_send(message: Message) -> None:
        nonlocal held
        given: bytes = message.get("body") or b""
        if not given and not held:  # the head, an empty end
            await send(message)
            return
        body = held + given if held else given
        held = b""
        if key in body:
            body = body.replace(key, mask)
        if message.get("more_body", False):
            cut = _key_start(body, key)
            if cut < len(body):
                body, held = body[:cut], body[cut:]
        await send(message if body is given else {**message, "body": body})

    return redacting_send


def _key_start(body: bytes, key: bytes) -> int:
    """Where the end of ``body`` begins ``key`` (``len(body)`` where it does not). An event's end
    (``\\n\\n``) begins no key: only a long event's pieces are ever held back."""
    at = body.find(key[:1], max(0, len(body) - len(key) + 1))
    while at != -1:
        if key.startswith(body[at:]):
            return at
        at = body.find(key[:1], at + 1)
    return len(body)


async def _send_body(
    send: Send, body: dict[str, Any], request: RequestInfo, exchange: Exchange, output: Output
) -> None:
    usage = body.get("usage")
    exchange.take_usage(usage)
    if not request.stream or not output.synthesizes:
        exchange.mark_first_token()
        await send_json(send, 200, await output.body(body))
        return
    exchange.record(["seed002-stream"])
    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
    exchange.mark_first_token()
    opening = output.opening(synthesize_chunks(body, request))
    tail = await output.tail(None, usage)
    if isinstance(opening, bytes) and isinstance(tail, bytes):
        await send({"type": "http.response.body", "body": opening + tail})
        return
    for piece in itertools.chain(pieces_of(opening), pieces_of(tail)):
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


class _CoalescingWriter:
    """Body bytes sent by a helper task that runs only when the producer waits for the upstream.

    Chunks the upstream delivered back to back (one socket read holds many) leave in one write instead
    of one send per chunk, and a chunk never waits for a later one: the flush runs as soon as the
    producer blocks. At most ``limit`` bytes wait unsent, so a slow client still slows the upstream.
    Each side waits on a bare future the other resolves: an ``asyncio.Event`` costs more per chunk.

    A part written in pieces (``Pieces``: a Response's long event) and stopped before its end (the
    shutdown deadline or a second stop cancelling the producer between two pieces, a spooled text's
    ``pread`` failing) leaves ``cut_short`` set, and then nothing more is sent: a tail after half a
    ``data:`` line ended it, and the client parsed one malformed event (issue 32, hardening). An SSE
    client cannot be told to drop half a line, and a JSON closed early would state a text cut short as
    the whole; a stream that ends inside an event is one its parser drops unread (the event is
    dispatched only at its blank line), and the connection closed without the body's end tells its
    HTTP client the stream was cut. The rest of the part is not sent either: it may be hundreds of MiB
    to a client the deadline has already waited for, and a failed read cannot give it.
    """

    def __init__(self, send: Send, limit: int = _COALESCE_LIMIT) -> None:
        self._send = send
        self._limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self._loop = asyncio.get_running_loop()
        self._wakeup: asyncio.Future[None] | None = None  # the helper, waiting for parts
        self._room: asyncio.Future[None] | None = None  # the producer, waiting for the parts to leave
        self._closing = False
        self.cut_short = False
        """Whether a part in pieces began and did not end: nothing may follow it (see the class)."""
        # Started with the first part written: a stream of the core's data lines writes each read at
        # once (``send_at_once``) and never needs it, and a task per request cost it (issue 35).
        self._task: asyncio.Task[None] | None = None

    async def write(self, data: bytes | Pieces) -> None:
        if not isinstance(data, bytes):  # a long event, a piece at a time (``Pieces``)
            self.cut_short = True  # until its last piece is written
            for piece in data:
                await self._write(piece)
            self.cut_short = False
            return
        await self._write(data)

    async def send_at_once(self, data: bytes) -> None:
        """``data`` sent now, by the producer: for one that writes each read's chunks as one part (the
        core's data lines, already joined) and nothing through ``write``, to which the helper's task
        switch and join add nothing but cost (issue 35). The transport's flow control still holds the
        producer back while a slow client does not read."""
        await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def _write(self, data: bytes) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())
        elif self._task.done():
            self._task.result()  # the client connection failed: raise it here
            raise ConnectionError("the response writer stopped")
        self._parts.append(data)
        self._size += len(data)
        _resolve(self._wakeup)
        if self._size > self._limit:
            self._room = self._loop.create_future()
            await self._room

    async def _run(self) -> None:
        try:
            while True:
                if not self._parts and not self._closing:
                    self._wakeup = self._loop.create_future()
                    await self._wakeup
                while self._parts:
                    data = b"".join(self._parts)
                    self._parts.clear()
                    self._size = 0
                    await self._send({"type": "http.response.body", "body": data, "more_body": True})
                _resolve(self._room)
                if self._closing:
                    return
        finally:
            _resolve(self._room)  # a producer waiting for room must not wait for a dead writer

    async def close(self, tail: bytes | Pieces) -> None:
        """Send what is left, then ``tail`` as the last body message (its pieces, then an empty one)."""
        assert not self.cut_short, "nothing follows half an event"
        self._closing = True
        _resolve(self._wakeup)
        if self._task is not None:
            await self._task
        if isinstance(tail, bytes):
            await self._send({"type": "http.response.body", "body": tail})
            return
        self.cut_short = True
        for piece in tail:
            await self._send({"type": "http.response.body", "body": piece, "more_body": True})
        self.cut_short = False
        await self._send({"type": "http.response.body", "body": b""})

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


def _resolve(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


async def _stream(
    send: Send,
    source: Source,
    initial: list[dict[str, Any]],
    exchange: Exchange,
    secret: str | None,
    output: Output,
) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
    exchange.mark_first_token()
    opening = output.opening(initial)
    whole = source.active.whole_lines() if isinstance(output, DataLines) else None
    if whole and isinstance(opening, bytes):
        # An answer read whole: its opening, the rest and the end in one write, as the floor relays
        # it (two writes more cost a short stream about 7% of its CPU, issue 35).
        tail = await _tail(source, output, exchange, secret, None)
        assert isinstance(tail, bytes), "the core's data lines end in one line"
        await send({"type": "http.response.body", "body": opening + whole + tail})
        return
    for piece in pieces_of(opening):
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    writer = _CoalescingWriter(send)
    try:
        try:
            kept = output.failure
            if kept is None:
                kept = await _write_batches(writer, source, output)
        except asyncio.CancelledError:
            if (error := graceful.shutdown_failure(exchange)) is None:
                raise
            await graceful.last_words(_close(writer, output, error.body))
            return
        except Exception:
            # A defect of the proxy's own (a repair that raised) once the stream is under way: the
            # client gets the protocol's error event and the stream's end, not a cut connection (issue
            # 32: a 1,000-deep tool call did that); the traceback goes to the server log alone.
            logging.getLogger("conformant.proxy").exception("a stream failed in the proxy")
            internal = APIError.make("internal error in the proxy", 500)
            exchange.take_error(internal)
            await _close(writer, output, internal.body)
            return
        await _closed_with(writer, await _tail(source, output, exchange, secret, kept), exchange)
    finally:
        writer.cancel()


async def _tail(
    source: Source, output: Output, exchange: Exchange, secret: str | None, kept: APIError | None
) -> bytes | Pieces:
    """The stream's end once the source is done: its failure (``kept``: the output's own) or none, and
    its usage, taken into the exchange."""
    failure = kept or _redacted(source.failure, secret)
    if failure is not None:
        exchange.take_error(failure)
    usage = source.usage
    exchange.take_usage(usage)
    tail = await output.tail(None if failure is None else failure.body, usage)
    if failure is None and (failure := output.failure) is not None:  # a text failed at its end
        exchange.take_error(failure)
    return tail


async def _closed_with(writer: _CoalescingWriter, tail: bytes | Pieces, exchange: Exchange) -> None:
    """``writer`` closed with ``tail``; where a long event of it cannot be read back, the connection is
    closed inside it (as ``_close`` does), and the log says so rather than that the client left."""
    try:
        await writer.close(tail)
    except SpoolUnreadable:
        logging.getLogger("conformant.proxy").warning(
            "a stream's long event could not be read back; its connection is closed without an end"
        )
        exchange.take_error(APIError.make("internal error in the proxy", 500))


def _redacted(failure: APIError | None, secret: str | None) -> APIError | None:
    return None if failure is None else failure.redacted(secret)


async def _write_batches(writer: _CoalescingWriter, source: Source, output: Output) -> APIError | None:
    """Each batch of the source's chunks written, to the source's end or to the output's failure (a
    Response's text the server could not keep), which is returned."""
    if isinstance(output, DataLines):
        next_lines = source.active.next_lines  # past a wrapper's own call, on the per-chunk path
        encode = output.events
        send = writer.send_at_once
        while (lines := await next_lines(encode)) is not None:
            if lines:
                await send(lines)
        return None
    events = output.events
    next_batch = source.active.next_batch
    while (batch := await next_batch()) is not None:
        if batch:
            await writer.write(events(batch))
            if output.failure is not None:
                return output.failure
    return None


async def _close(writer: _CoalescingWriter, output: Output, failure: dict[str, Any]) -> None:
    """What waits in ``writer``, then the stream's end for ``failure``; nothing where the writer was
    stopped inside an event (``cut_short``): the connection is closed as it stands."""
    if writer.cut_short:
        logging.getLogger("conformant.proxy").warning(
            "a stream stopped inside a long event; its connection is closed without an end"
        )
        return
    await writer.close(await output.tail(failure, None))


async def _aggregate(
    send: Send,
    source: Source,
    initial: list[dict[str, Any]],
    request: RequestInfo,
    exchange: Exchange,
    secret: str | None,
    output: Output,
    worded: Worded,
) -> None:
    exchange.record(["seed002-aggregate"])
    aggregator = Aggregator(request)
    try:
        for chunk in initial:
            aggregator.add(chunk)
        while (batch := await source.next_batch()) is not None:
            for chunk in batch:
                aggregator.add(chunk)
        failure = source.failure
    except APIError as too_large:  # more than the proxy holds (Aggregator.limit)
        failure = too_large
    if failure is not None:
        failure = failure.redacted(secret)
        exchange.take_error(failure)
        # Nothing was sent yet: the failure is the answer, in the client's protocol as a refusal is.
        await send_json(send, failure.status, worded(failure.body, failure.status))
        return
    body = aggregator.result(source.usage)
    exchange.take_usage(body.get("usage"))
    exchange.mark_first_token()
    await send_json(send, 200, await output.body(body))
