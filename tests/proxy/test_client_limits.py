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


def _held(address: tuple[str, int], client: str, source: str = "127.0.0.1") -> socket.socket:
    """A request forwarded for ``client`` (its ``X-Forwarded-For``) that stays open: its body never comes."""
    sock = socket.create_connection(address, source_address=(source, 0))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer %s\r\n"
        b"x-forwarded-for: %s\r\ncontent-length: 100\r\n\r\n" % (KEY.encode(), client.encode())
    )
    return sock


def _asked(address: tuple[str, int], headers: bytes = b"", source: str = "127.0.0.1") -> int:
    """The status of one keyless request (401: served, its key asked for; 503: past a cap)."""
    with socket.create_connection(address, source_address=(source, 0)) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n" + headers + b"\r\n")
        return _error(_read_all(sock))[0]


def test_a_trusted_proxys_clients_each_get_their_share() -> None:
    """Behind a reverse proxy every client had its address, and --max-connections-per-client throttled
    them all together (issue 32, item 6). A peer named by --trusted-proxies is left out of that share;
    each request it forwards counts, while it is open, in the share of the client X-Forwarded-For names."""
    with _proxy(max_connections_per_client=2, trusted_proxies=("127.0.0.1",)) as address:
        with contextlib.ExitStack() as stack:
            # The proxy's own connections, more than the share: not counted.
            for _ in range(3):
                stack.enter_context(socket.create_connection(address))
            for _ in range(2):
                stack.enter_context(_held(address, "203.0.113.7"))
            time.sleep(0.2)  # their heads read
            assert _asked(address, b"x-forwarded-for: 203.0.113.7\r\n") == 503  # its share is held
            assert _asked(address, b"x-forwarded-for: 203.0.113.8\r\n") == 401  # another client's is not
            assert _asked(address) == 401  # the proxy's own request: no one's share
            # The right-most address that is no trusted proxy: a client cannot name another.
            spoofed = b"x-forwarded-for: 198.51.100.1, 203.0.113.7\r\n"
            assert _asked(address, spoofed) == 503
        time.sleep(0.2)
        assert _asked(address, b"x-forwarded-for: 203.0.113.7\r\n") == 401  # within its share again


def test_a_forwarded_header_of_an_untrusted_peer_is_ignored() -> None:
    """Only a trusted proxy names the client: another peer's X-Forwarded-For neither frees it from its
    share nor counts in someone else's."""
    with (
        _proxy(max_connections_per_client=2, trusted_proxies=("127.0.0.2",)) as address,
        contextlib.ExitStack() as stack,
    ):
        for _ in range(2):
            stack.enter_context(_held(address, "203.0.113.1"))  # from 127.0.0.1: two of its own
        time.sleep(0.2)
        assert _asked(address, b"x-forwarded-for: 203.0.113.3\r\n") == 503
        forwarded = b"x-forwarded-for: 203.0.113.1\r\n"
        assert _asked(address, forwarded, source="127.0.0.2") == 401


def test_a_socket_through_a_trusted_proxy_counts_in_its_forwarded_clients_share() -> None:
    """A WebSocket handshake forwarded for a client holds that client's share while the socket is open."""
    handshake = (
        b"GET /v1/responses HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
        b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n"
        b"authorization: Bearer " + KEY.encode() + b"\r\nx-forwarded-for: %s\r\n\r\n"
    )

    def opened(client: bytes) -> socket.socket:
        sock = socket.create_connection(address)
        sock.sendall(handshake % client)
        sock.settimeout(5)
        return sock

    with _proxy(max_connections_per_client=1, trusted_proxies=("127.0.0.1",)) as address:
        with opened(b"203.0.113.7") as first:
            assert first.recv(65536).startswith(b"HTTP/1.1 101 ")
            with opened(b"203.0.113.7") as second:
                assert _error(_read_all(second))[0] == 503
            with opened(b"203.0.113.8") as other:
                assert other.recv(65536).startswith(b"HTTP/1.1 101 ")
        time.sleep(0.2)
        with opened(b"203.0.113.7") as again:  # closed, the first no longer counts
            assert again.recv(65536).startswith(b"HTTP/1.1 101 ")


@pytest.mark.parametrize(
    ("headers", "client"),
    [
        ([(b"x-forwarded-for", b"198.51.100.1, 10.1.2.3")], "198.51.100.1"),  # 10/8 trusted too
        ([(b"x-forwarded-for", b"198.51.100.1"), (b"x-forwarded-for", b"192.0.2.5:4711")], "192.0.2.5"),
        ([(b"x-forwarded-for", b"10.0.0.1, 10.0.0.2")], "10.0.0.1"),  # all trusted: the first
        ([(b"forwarded", b'for="[2001:db8::17]:4711";proto=https, for=10.0.0.3')], "2001:db8::17"),
        ([(b"forwarded", b"for=198.51.100.2"), (b"x-forwarded-for", b"192.0.2.9")], "192.0.2.9"),
        ([(b"x-forwarded-for", b" , ")], None),
        ([], None),
    ],
)
def test_the_forwarded_client_is_the_right_most_hop_that_is_no_trusted_proxy(
    headers: list[tuple[bytes, bytes]], client: str | None
) -> None:
    from proxy.client_limits import forwarded_client, is_trusted, trusted_networks

    networks = trusted_networks(("127.0.0.1", "10.0.0.0/8"))
    assert forwarded_client(headers, networks) == client
    assert is_trusted("::ffff:10.9.8.7", networks)  # an IPv4 peer of a dual-stack socket
    assert not is_trusted("unknown", networks)


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


def _anthropic_error(response: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = response.partition(b"\r\n\r\n")
    answer = json.loads(body)
    assert answer["type"] == "error", answer
    return int(head.split(b" ", 2)[1]), answer["error"]


MESSAGES_HEAD = b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: " + KEY.encode() + b"\r\n"


def test_the_answers_before_the_route_are_in_the_messages_apis_words_on_its_path() -> None:
    """A head too large, a body too slow, a server too busy: answered before the route, they were
    OpenAI's error bodies on ``/v1/messages`` too, which Anthropic's SDKs do not read (found by black-box
    testing)."""
    with _proxy(client_timeout=0.5) as address:
        with socket.create_connection(address) as sock:
            sock.sendall(MESSAGES_HEAD + b"x-big: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n")
            status, error = _anthropic_error(_read_all(sock))
        assert (status, error["type"]) == (431, "invalid_request_error")
        with socket.create_connection(address) as sock:
            sock.sendall(MESSAGES_HEAD + b"content-length: 10\r\n\r\n{")
            status, error = _anthropic_error(_read_all(sock))
        assert status == 408
        assert "request body" in str(error["message"])
    with _proxy(max_connections=1) as address:
        idle = socket.create_connection(address)
        try:
            time.sleep(0.2)  # accepted
            with socket.create_connection(address) as sock:
                sock.sendall(MESSAGES_HEAD + b"content-length: 2\r\n\r\n{}")
                status, error = _anthropic_error(_read_all(sock))
            assert (status, error["type"]) == (503, "overloaded_error")
        finally:
            idle.close()
