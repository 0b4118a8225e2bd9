"""Hostile clients on raw sockets: huge heads, endless pipelines, slow or silent clients, too many
connections (proxy/client_limits.py). Each is refused before the API key is checked."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator

import pytest

from proxy.client_limits import MAX_HEAD_BYTES, MAX_PIPELINED, OVER_CAP_TIMEOUT
from tests.proxy.conftest import serve_proxy

KEY = "sk-client-limits"
HEALTH = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"


@contextlib.contextmanager
def _proxy(**config: object) -> Iterator[tuple[str, int]]:
    """The proxy (with an API key, and an upstream it never needs here) as (host, port)."""
    with serve_proxy("http://127.0.0.1:9", upstream_kind="openai", api_key=KEY, **config) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)


def _read_all(sock: socket.socket, timeout: float = 5) -> bytes:
    """Everything until the proxy closes the connection (fails the test if it does not in time)."""
    sock.settimeout(timeout)
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while part := sock.recv(65536):
            data += part
    return data


def _error(response: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)["error"]


def test_a_head_over_the_limit_is_a_431_before_the_key_is_checked() -> None:
    with _proxy() as address, socket.create_connection(address) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n")
        status, error = _error(_read_all(sock))
    assert status == 431
    assert error["code"] == "request_head_too_large"


def test_many_small_headers_count_together() -> None:
    headers = b"".join(b"x-h%d: %s\r\n" % (i, b"v" * 100) for i in range(MAX_HEAD_BYTES // 100))
    with _proxy() as address, socket.create_connection(address) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n" + headers + b"\r\n")
        assert _error(_read_all(sock))[0] == 431


def test_an_endless_header_is_cut_without_waiting_for_its_end() -> None:
    """httptools holds an unfinished header itself: its size is counted by what arrives."""
    with _proxy() as address, socket.create_connection(address) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-endless: ")
        sent = 0
        with contextlib.suppress(ConnectionError):
            while sent < 64 * MAX_HEAD_BYTES:
                sock.sendall(b"a" * 16384)
                sent += 16384
                time.sleep(0.001)
        assert sent < 64 * MAX_HEAD_BYTES  # the proxy closed the connection long before
        response = _read_all(sock)
        assert not response or _error(response)[0] == 431


def test_a_head_under_the_limit_is_served() -> None:
    with _proxy() as address, socket.create_connection(address) as sock:
        sock.sendall(
            b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (MAX_HEAD_BYTES - 200) + b"\r\n\r\n"
        )
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")


def test_a_pipeline_past_the_limit_closes_the_connection() -> None:
    with _proxy() as address, socket.create_connection(address) as sock:
        sock.sendall(HEALTH * 1000)
        answered = _read_all(sock).count(b"HTTP/1.1 200 ")
    assert answered <= MAX_PIPELINED + 1


def test_a_short_pipeline_is_answered_in_full() -> None:
    with _proxy() as address, socket.create_connection(address) as sock:
        sock.sendall(HEALTH * MAX_PIPELINED + b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        assert _read_all(sock).count(b"HTTP/1.1 200 ") == MAX_PIPELINED + 1


@pytest.mark.parametrize(
    ("sent", "what"),
    [
        (b"", "request head"),  # a connection that never sends a byte
        (b"GET /health HTTP/1.1\r\nhost: x\r\n", "request head"),  # a head that never ends
        (
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
            + KEY.encode()
            + b"\r\ncontent-length: 10\r\n\r\n{",
            "request body",
        ),
    ],
    ids=["silent", "head", "body"],
)
def test_a_client_that_stops_sending_gets_a_408_and_is_closed(sent: bytes, what: str) -> None:
    with _proxy(client_timeout=0.5) as address, socket.create_connection(address) as sock:
        start = time.monotonic()
        sock.sendall(sent)
        response = _read_all(sock)
        took = time.monotonic() - start
    assert 0.4 < took < 3, took
    status, error = _error(response)
    assert status == 408
    assert error["code"] == "request_timeout"
    assert what in str(error["message"])


def test_a_byte_now_and_then_does_not_keep_a_head_open() -> None:
    """The head's time counts from its first byte, not from the last one."""
    with _proxy(client_timeout=1) as address, socket.create_connection(address) as sock:
        start = time.monotonic()
        with contextlib.suppress(ConnectionError):
            for byte in b"GET /health HTTP/1.1\r\nhost: x\r\nx-slow: " + b"a" * 100:
                sock.sendall(bytes([byte]))
                time.sleep(0.1)
                if time.monotonic() - start > 5:
                    break
        assert _error(_read_all(sock))[0] == 408
        assert time.monotonic() - start < 3


def test_a_keep_alive_connection_gets_the_timeout_again_for_its_next_request() -> None:
    with _proxy(client_timeout=0.5) as address, socket.create_connection(address) as sock:
        sock.settimeout(5)
        for _ in range(2):
            sock.sendall(HEALTH)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            time.sleep(0.3)  # within uvicorn's 5 s keep-alive; the next request starts anew
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        assert _error(_read_all(sock))[0] == 408


def test_past_max_connections_requests_get_a_503_but_health_is_answered() -> None:
    with _proxy(max_connections=3) as address:
        idle = [socket.create_connection(address) for _ in range(3)]
        try:
            time.sleep(0.2)  # accepted
            with socket.create_connection(address) as sock:
                sock.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
                status, error = _error(_read_all(sock))
                assert status == 503
                assert error["code"] == "too_many_connections"
            with socket.create_connection(address) as sock:
                sock.sendall(HEALTH)
                sock.settimeout(5)
                assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        finally:
            for sock in idle:
                sock.close()
        time.sleep(0.2)
        with socket.create_connection(address) as sock:  # under the cap again: the key is asked for
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            assert _error(_read_all(sock))[0] == 401


def test_one_client_past_its_share_gets_503s_while_another_is_served() -> None:
    """One client reopening connections held the whole cap before any key was read: another client got
    503 on 71 of 72 requests (issue 32). Past --max-connections-per-client, its own requests get the
    503; another address (a second loopback address here) is still served."""
    with _proxy(max_connections=50, max_connections_per_client=3) as (host, port):
        hog = [socket.create_connection((host, port), source_address=("127.0.0.1", 0)) for _ in range(3)]
        try:
            time.sleep(0.2)  # accepted
            with socket.create_connection((host, port), source_address=("127.0.0.1", 0)) as sock:
                sock.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
                status, error = _error(_read_all(sock))
                assert (status, error["code"]) == (503, "too_many_connections")
            with socket.create_connection((host, port), source_address=("127.0.0.2", 0)) as sock:
                sock.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                assert _error(_read_all(sock))[0] == 401  # served: its key is asked for
        finally:
            for sock in hog:
                sock.close()
        time.sleep(0.2)
        with socket.create_connection((host, port), source_address=("127.0.0.1", 0)) as sock:
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            assert _error(_read_all(sock))[0] == 401  # within its share again


def test_a_connection_past_max_connections_gets_a_short_head_timeout() -> None:
    """Idle connections past the cap hold no file for long: OVER_CAP_TIMEOUT, not --client-timeout."""
    with _proxy(max_connections=1, client_timeout=30) as address, socket.create_connection(address) as first:
        time.sleep(0.1)
        with socket.create_connection(address) as past:
            start = time.monotonic()
            status, _ = _error(_read_all(past))
            took = time.monotonic() - start
        assert status == 408
        assert OVER_CAP_TIMEOUT * 0.8 < took < OVER_CAP_TIMEOUT + 2
        first.sendall(HEALTH)  # the first still has its 30 s
        first.settimeout(5)
        assert first.recv(65536).startswith(b"HTTP/1.1 200 ")
