"""Each lower error met on the way to and from an upstream becomes one class of the proxy's hierarchy,
with the status, code and words clients got before the mapping was one table (proxy/upstream_faults.py).

No sockets: the errors are the ones the transport and the libraries raise, built or provoked directly.
"""

from __future__ import annotations

import asyncio
import zlib

import httpx
import pytest

from proxy import errors
from proxy.upstream_faults import BODY, REQUEST, Phase, mapped, upstream_fault

_IDLE = "the upstream server stopped sending data (idle timeout)"
_CONNECT = "could not connect to the upstream server"

CASES: list[tuple[BaseException, Phase, type[errors.APIError], int, str | None, str]] = [
    # Before the response head (Upstream._send).
    (
        httpx.RemoteProtocolError("the upstream server closed the connection without a response"),
        REQUEST,
        errors.UpstreamBroke,
        502,
        None,
        "the upstream server closed the connection without a response",
    ),
    (
        httpx.ConnectTimeout("connecting to 10.1.2.3:8080 timed out"),
        REQUEST,
        errors.UpstreamTimeout,
        504,
        "upstream_timeout",
        "timed out connecting to the upstream server",
    ),
    (
        httpx.ReadTimeout("slow"),
        REQUEST,
        errors.UpstreamTimeout,
        504,
        "upstream_timeout",
        "the upstream server timed out",
    ),
    (
        httpx.PoolTimeout("pool"),
        REQUEST,
        errors.UpstreamTimeout,
        504,
        "upstream_timeout",
        "the upstream server timed out",
    ),
    (
        TimeoutError(),
        REQUEST,
        errors.UpstreamTimeout,
        504,
        "upstream_timeout",
        "the upstream server timed out",
    ),
    (
        httpx.ConnectError("could not connect to 10.1.2.3:8080: Connection refused"),
        REQUEST,
        errors.UpstreamRefused,
        502,
        None,
        _CONNECT,
    ),
    (ConnectionRefusedError(111, "Connection refused"), REQUEST, errors.UpstreamRefused, 502, None, _CONNECT),
    (
        httpx.ProtocolError("the upstream reply is not valid HTTP: Invalid method"),
        REQUEST,
        errors.UpstreamBroke,
        502,
        None,
        "the upstream reply is not valid HTTP: Invalid method",
    ),
    (
        httpx.UnsupportedProtocol("the upstream URL scheme 'ftp' is not http or https"),
        REQUEST,
        errors.UpstreamError,
        502,
        None,
        "the upstream request failed: UnsupportedProtocol",
    ),
    # Reading the body (UpstreamStream.read).
    (httpx.ReadTimeout("idle"), BODY, errors.UpstreamTimeout, 504, "upstream_timeout", _IDLE),
    (TimeoutError(), BODY, errors.UpstreamTimeout, 504, "upstream_timeout", _IDLE),
    (
        zlib.error("Error -3 while decompressing data: incorrect header check"),
        BODY,
        errors.UpstreamInvalidData,
        502,
        None,
        "the upstream's compressed body is not valid",
    ),
    (
        httpx.ReadError("the upstream response body is badly framed: invalid chunk size"),
        BODY,
        errors.UpstreamBroke,
        502,
        None,
        "the upstream connection failed: ReadError",
    ),
    (
        httpx.PoolTimeout("pool"),  # no read timeout: a failed connection, as before
        BODY,
        errors.UpstreamBroke,
        502,
        None,
        "the upstream connection failed: PoolTimeout",
    ),
    (
        ConnectionResetError(104, "Connection reset by peer"),
        BODY,
        errors.UpstreamBroke,
        502,
        None,
        "the upstream connection failed: ConnectionResetError",
    ),
]


@pytest.mark.parametrize(
    ("lower", "phase", "cls", "status", "code", "message"),
    CASES,
    ids=[f"{phase}-{type(lower).__name__}" for lower, phase, *_ in CASES],
)
def test_each_lower_error_maps_to_one_class_status_and_code(
    lower: BaseException,
    phase: Phase,
    cls: type[errors.APIError],
    status: int,
    code: str | None,
    message: str,
) -> None:
    error = upstream_fault(lower, phase)
    assert type(error) is cls
    assert error.status == status
    assert error.body == {
        "error": {
            "message": message,
            "type": "server_error",
            "param": None,
            "code": code,
        }
    }


def _transport_errors() -> list[type[httpx.TransportError]]:
    found: list[type[httpx.TransportError]] = []
    todo: list[type[httpx.TransportError]] = [httpx.TransportError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


@pytest.mark.parametrize("phase", [REQUEST, BODY])
def test_every_httpx_transport_error_is_an_upstream_error(phase: Phase) -> None:
    """Whatever httpx error a transport raises, the client gets a 502 or 504, never a 500 (a bug)."""
    for cls in _transport_errors():
        error = upstream_fault(cls("words"), phase)
        assert isinstance(error, errors.UpstreamError), cls
        assert error.status in (502, 504), cls


def test_an_address_in_a_connect_error_does_not_reach_the_client() -> None:
    error = upstream_fault(httpx.ConnectError("could not connect to 10.9.8.7:11434: refused"), REQUEST)
    assert error is not None
    assert "10.9.8.7" not in error.message
    assert "11434" not in error.message


@pytest.mark.parametrize(
    "other",
    [ValueError("a bug"), KeyError("a bug"), asyncio.CancelledError(), errors.UpstreamTimeout.of("already")],
)
@pytest.mark.parametrize("phase", [REQUEST, BODY])
def test_what_is_no_upstream_fault_goes_on_as_it_is(other: BaseException, phase: Phase) -> None:
    assert upstream_fault(other, phase) is None
    with pytest.raises(type(other)) as raised, mapped(phase):
        raise other
    assert raised.value is other


def test_mapped_raises_the_class_without_the_lower_error_attached() -> None:
    """The lower error (its addresses, its stack) is not chained to what the route logs and answers."""
    with pytest.raises(errors.UpstreamInvalidData) as raised, mapped(BODY):
        zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(b"this is no gzip")
    assert raised.value.__cause__ is None
    assert raised.value.__suppress_context__


def test_a_real_asyncio_timeout_while_reading_is_the_idle_timeout() -> None:
    async def read() -> None:
        with mapped(BODY):
            async with asyncio.timeout(0.001):
                await asyncio.sleep(1)

    with pytest.raises(errors.UpstreamTimeout) as raised:
        asyncio.run(read())
    assert raised.value.message == _IDLE


def test_a_cancellation_inside_the_request_is_not_taken_for_a_timeout() -> None:
    """An outer ``asyncio.timeout`` (the first-byte bound) cancels inside the mapping: the cancellation
    must pass through for the caller's own timeout to see it."""

    async def send() -> str:
        try:
            async with asyncio.timeout(0.001):
                with mapped(REQUEST):
                    await asyncio.sleep(1)
        except TimeoutError:
            return "the caller's timeout"
        return "not cancelled"

    assert asyncio.run(send()) == "the caller's timeout"
