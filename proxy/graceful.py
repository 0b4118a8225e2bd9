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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from conformance.api_errors import APIError

if TYPE_CHECKING:
    from .observability import Exchange

__all__ = [
    "SHUTDOWN_GRACE",
    "begin_shutdown",
    "last_words",
    "shutdown_failure",
    "shutting_down_error",
    "track",
]

SHUTDOWN_GRACE = 5.0
"""Seconds after ``--shutdown-timeout`` that uvicorn waits before it cancels what is still running."""
LAST_WORDS_TIMEOUT = 1.0
"""Seconds a response ended at the deadline may take to send its end: a client that does not read gets
nothing more."""
_MESSAGE = "the server is shutting down; retry the request"

# The responses open on each event loop (one per worker; tests run servers on loops of their own).
_open: dict[asyncio.AbstractEventLoop, set[Callable[[], None]]] = {}
_deadlines: dict[asyncio.AbstractEventLoop, asyncio.TimerHandle] = {}
_passed: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


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


def begin_shutdown(loop: asyncio.AbstractEventLoop, timeout: float) -> None:
    """The server began to stop: in ``timeout`` seconds the responses still open are ended (once).
    Said at once where some are open: a Ctrl-C with a stream open printed nothing for 31 s (issue 32)."""
    if loop not in _deadlines:
        _deadlines[loop] = loop.call_later(timeout, _end_open_responses, loop)
        if open_now := len(_open.get(loop, ())):
            logging.getLogger("uvicorn.error").warning(
                "conformant serve: stopping; %d open response(s) may finish within %g s "
                "(--shutdown-timeout), then are ended with an error",
                open_now,
                timeout,
            )


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


def _end_open_responses(loop: asyncio.AbstractEventLoop) -> None:
    del _deadlines[loop]
    _passed.add(loop)
    responses = _open.pop(loop, set())
    for end in responses:
        end()
    if responses:
        logging.getLogger("uvicorn.error").warning(
            "conformant serve: %d open response(s) ended at the shutdown deadline (--shutdown-timeout)",
            len(responses),
        )
