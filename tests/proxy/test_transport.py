"""The upstream transport (proxy/transport.py) on its own, against raw upstreams: pooling, body framing,
the read timeout and flow control. Its fault mapping is covered through the proxy in test_faults.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from proxy.transport import UpstreamTransport
from tests.support.servers import free_port, wait_for

from .rawserver import Record, http_chunk, raw_server, read_request, wait_peer_close

pytestmark = pytest.mark.slow


def _run(upstream: str, body: Callable[[httpx.AsyncClient], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        transport = UpstreamTransport(keepalive_expiry=5)
        async with httpx.AsyncClient(base_url=upstream, transport=transport) as client:
            result = await body(client)
            assert transport.connections_in_use() == 0
            assert transport.admission.taken == 0  # every request's place given back
            return result

    return asyncio.run(main())


async def _keepalive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    while (request := await read_request(reader)) is not None:
        record.requests += 1
        answer = request.split(b" ", 2)[1]
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(answer) + answer)
        await writer.drain()


def test_a_connection_read_to_the_end_is_reused() -> None:
    async def three(client: httpx.AsyncClient) -> list[str]:
        return [(await client.post(f"/p{i}", content=b"x" * i)).text for i in range(3)]

    with raw_server(_keepalive) as (upstream, record):
        assert _run(upstream, three) == ["/p0", "/p1", "/p2"]
    assert (record.connections, record.requests) == (1, 3)


async def _until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    await read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nno length, ")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(b"ends with the connection")
    await writer.drain()


def test_a_body_without_a_length_ends_with_the_connection() -> None:
    async def get(client: httpx.AsyncClient) -> str:
        return (await client.get("/")).text

    with raw_server(_until_close) as (upstream, _):
        assert _run(upstream, get) == "no length, ends with the connection"


async def _trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """Five chunks 0.1 s apart, then silence until the client gives up."""
    await read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    for i in range(5):
        writer.write(http_chunk(b"%d" % i))
        await writer.drain()
        await asyncio.sleep(0.1)
    await wait_peer_close(reader, record)


def test_the_read_timeout_bounds_each_wait_not_the_whole_body() -> None:
    # 0.3 s between reads: the 0.5 s of trickling passes, the silence after it does not.
    async def read(client: httpx.AsyncClient) -> tuple[bytes, str, float]:
        received = b""
        async with client.stream("GET", "/", timeout=httpx.Timeout(5, read=0.3)) as response:
            started = time.monotonic()
            try:
                async for part in response.aiter_raw():
                    received += part
                    started = time.monotonic()
            except httpx.ReadTimeout as exc:
                return received, type(exc).__name__, time.monotonic() - started
        return received, "no error", 0.0

    with raw_server(_trickle) as (upstream, record):
        received, error, silence = _run(upstream, read)
        assert received == b"01234"
        assert error == "ReadTimeout"
        assert 0.25 < silence < 0.6
        assert record.connections == 1


async def _one_then_wait(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    await read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + http_chunk(b"0"))
    await wait_peer_close(reader, record)


def test_a_response_left_before_its_end_closes_its_connection() -> None:
    # The upstream must see the close at once: that is how a cancelled request stops its generation.
    async def leave(client: httpx.AsyncClient) -> float:
        async with client.stream("GET", "/") as response:
            assert await anext(response.aiter_raw()) == b"0"
            left = time.monotonic()
        for _ in range(100):
            if record.peer_closed_at:
                break
            await asyncio.sleep(0.01)
        return record.peer_closed_at[0] - left

    with raw_server(_one_then_wait) as (upstream, record):
        assert _run(upstream, leave) < 0.1


# More than the kernel's socket buffers can hold (autotuned up to tcp_rmem's and tcp_wmem's maximum,
# 32 MiB and 4 MiB by default on Linux), so only the transport can be what stops the upstream.
_FLOOD = 64 << 20


async def _flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """Writes 64 MiB as fast as the reader takes it, counting what went out."""
    await read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % _FLOOD)
    piece = b"x" * (64 << 10)
    for _ in range(_FLOOD // len(piece)):
        writer.write(piece)
        await writer.drain()
        record.requests += 1  # counts pieces written


def test_a_slow_reader_stops_the_upstream_instead_of_buffering_it() -> None:
    async def slow(client: httpx.AsyncClient) -> tuple[int, int]:
        async with client.stream("GET", "/") as response:
            reads = response.aiter_raw()
            first = await anext(reads)
            await asyncio.sleep(0.5)  # the upstream fills the buffers meanwhile, then must wait
            written_while_stalled = record.requests
            total = len(first) + sum([len(part) async for part in reads])
        return written_while_stalled, total

    with raw_server(_flood) as (upstream, record):
        written, total = _run(upstream, slow)
    assert total == _FLOOD
    # Without flow control all 1,024 pieces would be out; the socket buffers take at most half of them.
    assert written < 512, written


async def _slow_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """Answers each request after 0.1 s, on a keep-alive connection; counts the connections open."""
    while await read_request(reader) is not None:
        record.requests += 1
        await asyncio.sleep(0.1)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()


def test_requests_past_the_connection_cap_wait_their_turn_instead_of_opening_more() -> None:
    peak = 0

    async def many(upstream: str) -> list[int]:
        nonlocal peak
        transport = UpstreamTransport(keepalive_expiry=5, max_connections=3)
        async with httpx.AsyncClient(base_url=upstream, transport=transport) as client:

            async def one(i: int) -> int:
                nonlocal peak
                response = await client.get(f"/{i}")
                peak = max(peak, transport.open_connections())
                return response.status_code

            return list(await asyncio.gather(*(one(i) for i in range(12))))

    with raw_server(_slow_answer) as (upstream, record):
        assert asyncio.run(many(upstream)) == [200] * 12
        assert record.requests == 12
        assert record.connections == 3  # the others waited and reused these
    assert peak <= 3


def test_a_cancelled_waiter_passes_its_turn_on() -> None:
    async def main(upstream: str) -> list[int]:
        transport = UpstreamTransport(keepalive_expiry=5, max_connections=1)
        async with httpx.AsyncClient(base_url=upstream, transport=transport) as client:
            first = asyncio.create_task(client.get("/first"))
            await asyncio.sleep(0.02)
            gone = asyncio.create_task(client.get("/gone"))
            last = asyncio.create_task(client.get("/last"))
            await asyncio.sleep(0.02)
            gone.cancel()
            return [(await first).status_code, (await last).status_code]

    with raw_server(_slow_answer) as (upstream, record):
        assert asyncio.run(main(upstream)) == [200, 200]
        assert record.requests == 2


def test_idle_connections_are_closed_by_the_clock() -> None:
    """Not only when the next request looks at the pool: none comes here."""

    async def main(upstream: str, record: Record) -> tuple[int, int]:
        transport = UpstreamTransport(keepalive_expiry=0.3)
        async with httpx.AsyncClient(base_url=upstream, transport=transport) as client:
            await asyncio.gather(*(client.get(f"/{i}") for i in range(5)))
            open_after_answers = record.open
            await asyncio.sleep(1.0)
            return open_after_answers, transport.open_connections()

    with raw_server(_slow_answer) as (upstream, record):
        open_after_answers, open_later = asyncio.run(main(upstream, record))
        assert open_after_answers == 5
        assert open_later == 0
        wait_for(lambda: record.open == 0, timeout=3)


async def _answer_and_close(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record
) -> None:
    await read_request(reader)
    record.requests += 1
    await asyncio.sleep(0.1)
    writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")
    await writer.drain()


def test_a_closed_connections_place_goes_to_the_first_waiter_not_to_a_newcomer() -> None:
    """First come, first served: a connection that closes hands its place to the request that waited
    longest, which opens a connection in its place."""
    order: list[str] = []

    async def main(upstream: str) -> int:
        transport = UpstreamTransport(keepalive_expiry=5, max_connections=1)
        async with httpx.AsyncClient(base_url=upstream, transport=transport) as client:

            async def get(name: str) -> None:
                await client.get(f"/{name}")
                order.append(name)

            tasks = []
            for name in ("first", "second", "third"):
                tasks.append(asyncio.create_task(get(name)))
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.09)  # the first answer has come: its connection closes
            tasks.append(asyncio.create_task(get("newcomer")))
            await asyncio.gather(*tasks)
            return transport.open_connections()

    with raw_server(_answer_and_close) as (upstream, record):
        assert asyncio.run(main(upstream)) == 0
        assert record.connections == 4
    assert order == ["first", "second", "third", "newcomer"]


def test_a_request_that_cannot_connect_gives_its_place_back() -> None:
    async def main() -> int:
        transport = UpstreamTransport(keepalive_expiry=5, max_connections=1)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{free_port()}", transport=transport
        ) as client:
            for _ in range(3):  # with the place kept, the second would wait for ever
                with pytest.raises(httpx.ConnectError):
                    await asyncio.wait_for(client.get("/"), 5)
        return transport.admission.taken

    assert asyncio.run(main()) == 0
