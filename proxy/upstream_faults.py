"""Lower errors on the way to and from the upstream, mapped to the proxy's error hierarchy in one place.

The transport (proxy/transport.py) raises httpx's errors, as an httpx transport must: its sockets'
``OSError`` and timeouts become ``ConnectError`` and ``ConnectTimeout``, llhttp's parse errors
``ProtocolError`` or ``ReadError``, a closed connection ``RemoteProtocolError`` or ``ReadError``. Here,
as httpx's ``_transports/default.py`` maps httpcore's errors with one table and one context manager,
those and the other lower errors met on the way (asyncio's ``TimeoutError``, ``OSError``, zlib's)
become :mod:`proxy.errors` classes, with the same status and words as each case had
when every call site mapped its own.

The words depend on where the fault came: ``REQUEST`` is sending a request and waiting for its response
head, ``BODY`` reading the response's body. A transport error's own words (``str(exc)``) are sent only
where the transport wrote them without an address or a path (the protocol errors); otherwise the
class's name says what happened.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, NoReturn

import httpx

from conformance.api_errors import APIError

from .errors import UpstreamBroke, UpstreamError, UpstreamInvalidData, UpstreamRefused, UpstreamTimeout

__all__ = ["BODY", "REQUEST", "Phase", "mapped", "raise_mapped", "upstream_fault"]

Phase = Literal["request", "body"]
REQUEST: Phase = "request"
BODY: Phase = "body"

_OWN_WORDS = None
"""A rule's words when the transport's own are sent (``str(exc)``)."""
_Rule = tuple[type[BaseException], type[APIError], str | None]
_CONNECT = "could not connect to the upstream server"
_TIMED_OUT = "the upstream server timed out"
_IDLE = "the upstream server stopped sending data (idle timeout)"
_BROKE = "the upstream connection failed: {name}"

# First match wins: a subclass comes before its base (ConnectTimeout is a TimeoutException,
# RemoteProtocolError a ProtocolError, everything an HTTPError, TimeoutError an OSError). ``{name}`` in
# the words is the lower error's class name.
_RULES: dict[Phase, tuple[_Rule, ...]] = {
    # Before the response head. A RemoteProtocolError is a connection closed before a whole head; the
    # transport already retried the one case that is safe to retry (a reused keep-alive connection,
    # nothing received): this one is the upstream's.
    REQUEST: (
        (httpx.RemoteProtocolError, UpstreamBroke, _OWN_WORDS),
        (httpx.ConnectTimeout, UpstreamTimeout, "timed out connecting to the upstream server"),
        (httpx.TimeoutException, UpstreamTimeout, _TIMED_OUT),
        (TimeoutError, UpstreamTimeout, _TIMED_OUT),
        (httpx.ConnectError, UpstreamRefused, _CONNECT),
        (OSError, UpstreamRefused, _CONNECT),
        (httpx.ProtocolError, UpstreamBroke, _OWN_WORDS),  # worded by the transport: no address, no path
        (httpx.HTTPError, UpstreamError, "the upstream request failed: {name}"),
    ),
    # Reading the body: a silent upstream is a 504 (Q25), whichever timer saw it (the transport's idle
    # timeout or a shorter bound of the caller's).
    BODY: (
        (httpx.ReadTimeout, UpstreamTimeout, _IDLE),
        (TimeoutError, UpstreamTimeout, _IDLE),
        (zlib.error, UpstreamInvalidData, "the upstream's compressed body is not valid"),
        (httpx.HTTPError, UpstreamBroke, _BROKE),
        (OSError, UpstreamBroke, _BROKE),
    ),
}


def upstream_fault(exc: BaseException, phase: Phase) -> APIError | None:
    """The proxy's error for ``exc`` met in ``phase``, or None for one that is not an upstream fault
    (a cancellation, a bug: those go on as they are)."""
    for lower, error, words in _RULES[phase]:
        if isinstance(exc, lower):
            return error.of(str(exc) if words is None else words.format(name=type(exc).__name__))
    return None


def raise_mapped(exc: Exception, phase: Phase) -> NoReturn:
    """Raise the proxy's error in place of ``exc``, met in ``phase`` (``upstream_fault``), else ``exc``."""
    error = upstream_fault(exc, phase)
    if error is None:
        raise exc
    raise error from None


@contextmanager
def mapped(phase: Phase) -> Iterator[None]:
    """Raise the proxy's error in place of a lower one raised inside (``raise_mapped``)."""
    try:
        yield
    except Exception as exc:
        raise_mapped(exc, phase)
