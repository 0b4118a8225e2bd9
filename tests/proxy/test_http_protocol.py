"""The server protocol that sends a response's head in the same write as its first body bytes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

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
