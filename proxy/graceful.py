"""The graceful stop: at the shutdown deadline the proxy ends each open response itself.

uvicorn cancels the requests still running when its graceful-shutdown timeout passes: with a stream
open, SIGINT printed nothing for 30 s, then a ``CancelledError`` traceback; the client's connection was
reset and the access log said 200 with no error. Here the shutdown's start (uvicorn asks each
connection to shut down, ``LimitedClientProtocol.shutdown``) starts a timer of ``--shutdown-timeout``
seconds; when it fires, each response still open on the event loop is ended by its own task
(``HeldResponse``): a stream gets its route's end for a failure, with what it had already made sent
first (the chat route's error event, ``server_shutting_down``; the Responses route's
``response.failed``, so that its ``sequence_number`` has no gap), a request not yet answered a 503, and
its access-log line the error. uvicorn's own timeout is set a few seconds later, as a last
resort for a response whose client does not read.

A second stop signal ends them at once the same way (``on_second_stop``). uvicorn's own answer to a
second Ctrl-C (``force_exit``) stops waiting and lets ``asyncio.run`` cancel what is still running: with a
stream open the server exited in about 3 s printing four ``CancelledError`` tracebacks, the client's
stream cut without an error event and logged as a 200 with none (issue 32, item 9). Here the app takes
over uvicorn's SIGINT and SIGTERM handlers while it serves: the first stop goes to uvicorn as it is; a
second ends every open response now, and uvicorn, whose shutdown waits for them, exits once their ends
are sent; a connection still open ``LAST_WORDS_TIMEOUT`` later (a client that does not read) is cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import weakref
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING

from uvicorn import Server

from conformance.api_errors import APIError

if TYPE_CHECKING:
    from .observability import Exchange

__all__ = [
    "SHUTDOWN_GRACE",
    "begin_shutdown",
    "end_now",
    "last_words",
    "on_second_stop",
    "shutdown_failure",
    "shutting_down_error",
    "stopping",
    "track",
]

SHUTDOWN_GRACE = 5.0
"""Seconds after ``--shutdown-timeout`` that uvicorn waits before it cancels what is still running."""
LAST_WORDS_TIMEOUT = 1.0
"""Seconds a response ended at the deadline may take to send its end: a client that does not read gets
nothing more."""
_MESSAGE = "the server is shutting down; retry the request"
_AT_THE_DEADLINE = "at the shutdown deadline (--shutdown-timeout)"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals on which uvicorn stops (``uvicorn.server.HANDLED_SIGNALS`` on POSIX)."""

# The responses open on each event loop (one per worker; tests run servers on loops of their own).
_open: dict[asyncio.AbstractEventLoop, set[Callable[[], None]]] = {}
_deadlines: dict[asyncio.AbstractEventLoop, asyncio.TimerHandle] = {}
_passed: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
_stopping: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event] = weakref.WeakKeyDictionary()


def shutting_down_error() -> APIError:
    """The error an ended response carries: its body, and the access log's message and code."""
    return APIError.make(_MESSAGE, 503, code="server_shutting_down")


def track(end: Callable[[], None]) -> Callable[[], None]:
    """Note an open response, ended by ``end()`` at the deadline; returns the call that forgets it."""
    loop = asyncio.get_running_loop()
    responses = _open.setdefault(loop, set())
    responses.add(end)

    def forget() -> None:
        responses.discard(end)
        if not responses and _open.get(loop) is responses:
            del _open[loop]

    return forget


def stopping() -> asyncio.Event:
    """Set once the server on this event loop begins to stop (``begin_shutdown``): an open WebSocket
    closes when it is set, after the turn it is answering (conformance/protocols/responses/websocket.py)."""
    loop = asyncio.get_running_loop()
    event = _stopping.get(loop)
    if event is None:
        event = _stopping[loop] = asyncio.Event()
    return event


def begin_shutdown(loop: asyncio.AbstractEventLoop, timeout: float) -> None:
    """The server began to stop: in ``timeout`` seconds the responses still open are ended (once).
    Said at once where some are open: a Ctrl-C with a stream open printed nothing for 31 s (issue 32)."""
    if (event := _stopping.get(loop)) is not None:
        event.set()
    if loop not in _deadlines and loop not in _passed:
        _deadlines[loop] = loop.call_later(timeout, _end_open_responses, loop, _AT_THE_DEADLINE)
        if open_now := len(_open.get(loop, ())):
            logging.getLogger("uvicorn.error").warning(
                "conformant serve: stopping; %d open response(s) may finish within %g s "
                "(--shutdown-timeout), then are ended with an error; a second stop signal (Ctrl-C) "
                "ends them at once",
                open_now,
                timeout,
            )


def end_now(loop: asyncio.AbstractEventLoop) -> None:
    """End every response open on ``loop`` now, as the deadline does (a second stop signal)."""
    if (deadline := _deadlines.pop(loop, None)) is not None:
        deadline.cancel()
    _end_open_responses(loop, "at once: a second stop signal")


def on_second_stop(workers: int) -> Callable[[], None]:
    """While the app serves: uvicorn's stop signals through the event loop, so that a second stop ends
    every open response now (``end_now``); returns what gives uvicorn its handlers back. Nothing is done
    where uvicorn does not hold the signals (a server run in a thread).

    A second stop is SIGINT or SIGTERM after either in a server of one process; in a worker of several
    (``workers`` > 1) SIGINT alone: a worker gets its parent's SIGTERM after a Ctrl-C that reached it too
    (and systemd's with its parent's), and its parent sends it SIGINT on a second stop
    (proxy/workers.py). A signal after the second is not passed on: uvicorn would cancel what is still
    sending its end.
    """
    forcing: Collection[int] = STOP_SIGNALS if workers == 1 else (signal.SIGINT,)
    server = getattr(signal.getsignal(signal.SIGINT), "__self__", None)
    if not isinstance(server, Server):
        return lambda: None
    loop = asyncio.get_running_loop()
    state = {"stopping": False, "ending": False}

    def stop(signum: int) -> None:
        if not state["stopping"] or (signum not in forcing and not state["ending"]):
            state["stopping"] = True
            server.handle_exit(signum, None)  # uvicorn's stop, as it would take it
        elif not state["ending"]:
            state["ending"] = True
            end_now(loop)
            loop.call_later(LAST_WORDS_TIMEOUT + 0.5, cut)

    def cut() -> None:
        # The ends went out within LAST_WORDS_TIMEOUT, as far as each client read. A connection still
        # open is a client that does not read (its unsent bytes keep it open after uvicorn closed it),
        # and it would hold the exit: cut, and the shutdown goes on, the app's own included. uvicorn's
        # force_exit skips that and leaves the app's lifespan to be cancelled (a traceback): only for
        # what still holds the exit a second later.
        for connection in list(server.server_state.connections):
            connection.transport.abort()
        loop.call_later(1.0, force)

    def force() -> None:
        give_back()  # (uvicorn skips the app's shutdown, which would give them back)
        server.force_exit = True

    def give_back() -> None:
        for signum in STOP_SIGNALS:
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(signum)
            signal.signal(signum, server.handle_exit)

    try:
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, stop, signum)
    except (ValueError, RuntimeError, NotImplementedError):  # (an event loop without them: Windows')
        give_back()
        return lambda: None
    return give_back


def shutdown_failure(exchange: Exchange) -> APIError | None:
    """Called where a response's task caught ``CancelledError``: the error to end its stream with when
    the cancellation is the shutdown deadline's (the task is un-cancelled and ``exchange`` notes the
    error, for the access log); None when it is anything else (a client that went away), to re-raise."""
    task = asyncio.current_task()
    if exchange.disconnected or task is None or asyncio.get_running_loop() not in _passed:
        return None
    task.uncancel()
    error = shutting_down_error()
    exchange.take_error(error)
    return error


async def last_words(end: Awaitable[None]) -> None:
    """Await ``end``, what a response ended at the deadline still sends, for at most
    ``LAST_WORDS_TIMEOUT``: a client that does not read, or has gone, gets nothing more."""
    with contextlib.suppress(TimeoutError, OSError):
        async with asyncio.timeout(LAST_WORDS_TIMEOUT):
            await end


def _end_open_responses(loop: asyncio.AbstractEventLoop, when: str) -> None:
    _deadlines.pop(loop, None)
    _passed.add(loop)
    responses = _open.pop(loop, set())
    for end in responses:
        end()
    if responses:
        logging.getLogger("uvicorn.error").warning(
            "conformant serve: %d open response(s) ended %s", len(responses), when
        )
