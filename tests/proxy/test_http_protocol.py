"""The server protocol that sends a response's head in the same write as its first body bytes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from conformance.http10 import Http10FramingProtocol
from proxy.http_protocol import HeadWithBodyProtocol, _HeadHoldingTransport
from tests.support.servers import run_asgi

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class _Recorder:
    """A transport that records each write: one write is one TCP segment on the real one."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _end_of_turn(loop: asyncio.AbstractEventLoop) -> None:
    """Let the loop run what is due: a head held alone is flushed then."""
    loop.run_until_complete(asyncio.sleep(0))


def test_the_head_goes_out_with_the_first_body_write(loop: asyncio.AbstractEventLoop) -> None:
    inner = _Recorder()
    transport = _HeadHoldingTransport(inner, loop)  # type: ignore[arg-type]
    transport.write(HEAD)
    assert inner.writes == []
    transport.write(b"5\r\nhello\r\n")
    transport.write(b"0\r\n\r\n")
    assert inner.writes == [HEAD + b"5\r\nhello\r\n", b"0\r\n\r\n"]
    _end_of_turn(loop)
    assert inner.writes == [HEAD + b"5\r\nhello\r\n", b"0\r\n\r\n"]  # the flush found nothing held
    assert transport.get_extra_info("peername") == "info:peername"


def test_a_head_alone_leaves_at_the_end_of_the_loop_turn(loop: asyncio.AbstractEventLoop) -> None:
    inner = _Recorder()
    transport = _HeadHoldingTransport(inner, loop)  # type: ignore[arg-type]
    transport.write(HEAD)
    _end_of_turn(loop)
    assert inner.writes == [HEAD]
    transport.write(b"5\r\nhello\r\n")
    assert inner.writes == [HEAD, b"5\r\nhello\r\n"]


def test_close_sends_what_is_held_first(loop: asyncio.AbstractEventLoop) -> None:
    inner = _Recorder()
    head = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"
    transport = _HeadHoldingTransport(inner, loop)  # type: ignore[arg-type]
    transport.write(head)
    transport.close()
    assert inner.writes == [head]
    assert inner.closed
    _end_of_turn(loop)
    assert inner.writes == [head]


async def _slow_stream(scope: dict[str, object], receive: object, send: object) -> None:
    """An ASGI app whose body starts a while after its head (a long prompt), on keep-alive."""
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1")]})  # type: ignore[operator]
    await asyncio.sleep(0.2)
    await send({"type": "http.response.body", "body": b"late", "more_body": False})  # type: ignore[operator]


@pytest.mark.slow
def test_a_head_is_not_held_until_a_late_body_and_keep_alive_still_works() -> None:
    with run_asgi(_slow_stream, http=HeadWithBodyProtocol) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            for _ in range(2):
                sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
                head = sock.recv(65536)
                assert head.startswith(b"HTTP/1.1 200 OK\r\n")  # before the body, 0.2 s later
                assert head.endswith(b"\r\n\r\n")
                body = b""
                while not body.endswith(b"0\r\n\r\n"):
                    body += sock.recv(65536)
                assert body == b"4\r\nlate\r\n0\r\n\r\n"


async def _three_parts(scope: dict[str, object], receive: object, send: object) -> None:
    """An ASGI app streaming three parts of unknown length, or (``/sized``) one body of a stated length."""
    assert scope["type"] == "http"
    if scope["path"] == "/sized":
        headers = [(b"content-length", b"5")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b"sized"})  # type: ignore[operator]
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1")]})  # type: ignore[operator]
    for part in (b"data: 1\n\n", b"data: 2\n\n"):
        await send({"type": "http.response.body", "body": part, "more_body": True})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})  # type: ignore[operator]


def _read_to_close(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        while part := sock.recv(65536):  # an HTTP/1.0 response ends where the connection does
            answer += part
    return answer


@pytest.mark.parametrize("protocol", [HeadWithBodyProtocol, Http10FramingProtocol])
def test_an_http_1_0_client_gets_its_stream_unchunked_and_ended_by_the_close(protocol: type) -> None:
    # RFC 9112 6.1: no transfer-encoding in a response to HTTP/1.0; uvicorn chunked it, and a client
    # that implements only 1.0 reads the chunk sizes as part of the body. The proxy's protocol, and the
    # one the backend and the replay server run.
    with run_asgi(_three_parts, http=protocol) as url:
        port = int(url.rsplit(":", 1)[1])
        answer = _read_to_close(port, b"GET /stream HTTP/1.0\r\n\r\n")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"transfer-encoding" not in head.lower(), head
        assert b"connection: close" in head.lower(), head
        assert body == b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
        sized = _read_to_close(port, b"GET /sized HTTP/1.0\r\n\r\n")
        assert sized.lower().endswith(b"content-length: 5\r\nconnection: close\r\n\r\nsized"), sized
        head_only = _read_to_close(port, b"HEAD /stream HTTP/1.0\r\n\r\n")
        assert head_only.endswith(b"\r\n\r\n"), head_only
        assert b"transfer-encoding" not in head_only.lower(), head_only
        # An HTTP/1.1 client on the same server still gets chunks.
        chunked = _read_to_close(port, b"GET /stream HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        assert b"transfer-encoding: chunked" in chunked.lower(), chunked
        assert chunked.endswith(b"0\r\n\r\n"), chunked
