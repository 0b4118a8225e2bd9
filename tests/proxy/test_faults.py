"""Acceptance 3: upstream and client faults, each against a real (raw socket or Starlette) upstream.

Each test asserts the status or the error event, that the upstream request was cancelled (the
upstream saw its connection closed), and that the proxy has no request in flight and no busy
upstream connection left afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from proxy.adapters import OpenAIAdapter
from proxy.transport import UpstreamTransport
from proxy.upstream_traits import NO_TOKENIZER, UpstreamTraits
from tests.support.servers import free_port, wait_for

from .conftest import judge, only_upstream, upstream_answer
from .conftest import serve_proxy as proxy
from .rawserver import (
    Record,
    answering,
    chunk,
    http_chunk,
    json_answer,
    raw_server,
    read_request,
    sse_head,
    wait_peer_close,
)

pytestmark = pytest.mark.slow

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def assert_idle(app: Starlette) -> None:
    """No request in flight and no upstream connection still busy (nothing leaked)."""
    serving = app.state.serving
    deadline = time.monotonic() + 3
    while True:
        in_flight = serving.metrics.in_flight._value.get()
        busy = only_upstream(app).connections_in_use()
        if in_flight == 0 and not busy:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"in flight {in_flight}, busy upstream connections {busy}")
        time.sleep(0.02)


def assert_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Traceback" not in error["message"]
    return dict(error)


def test_connection_refused_is_502() -> None:
    with proxy(f"http://127.0.0.1:{free_port()}") as (url, app):
        for stream in (True, False):
            response = httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
            assert_error(response, 502)
        assert_idle(app)


def test_connect_timeout_is_504() -> None:
    # A listening socket whose accept queue is full: the kernel drops further SYNs, so connect hangs.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(listener.getsockname())
            fillers.append(filler)
        port = listener.getsockname()[1]
        with proxy(f"http://127.0.0.1:{port}", connect_timeout=0.3) as (url, app):
            for path in ("/v1/chat/completions", "/v1/embeddings"):  # a completion, a pass-through
                started = time.monotonic()
                response = httpx.post(url + path, json=CHAT, timeout=10)
                assert_error(response, 504)
                assert time.monotonic() - started < 5
            assert_idle(app)
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    await read_request(reader)
    record.requests += 1
    await wait_peer_close(reader, record)


def test_first_byte_timeout_is_504_and_cancels_the_upstream() -> None:
    with raw_server(_silent) as (upstream, record), proxy(upstream, first_byte_timeout=0.3) as (url, app):
        for path in ("/v1/chat/completions", "/v1/embeddings"):  # a completion, a pass-through
            response = httpx.post(url + path, json=CHAT, timeout=10)
            assert_error(response, 504)
            wait_for(lambda: record.requests == len(record.peer_closed_at))
        assert_idle(app)


async def _stall_after_one(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record
) -> None:
    await read_request(reader)
    writer.write(sse_head() + http_chunk(chunk("Hello")))
    await writer.drain()
    await wait_peer_close(reader, record)


def test_idle_timeout_mid_stream_is_an_error_event() -> None:
    with raw_server(_stall_after_one) as (upstream, record), proxy(upstream, idle_timeout=0.3) as (url, app):
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
        assert response.status_code == 200
        events = [line for line in response.text.split("\n\n") if line]
        assert "Hello" in events[0]
        last = json.loads(events[-1].removeprefix("data: "))
        assert "idle timeout" in last["error"]["message"]
        assert "[DONE]" not in response.text
        wait_for(lambda: record.peer_closed_at)
        assert_idle(app)


def _head_then_events_after(delay: float, stall: bool = False) -> Any:
    """An upstream that answers its head at once and runs the model before its first event, as
    llama-cpp-python does: prompt processing happens after the head. ``stall``: one event, then silence."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        await read_request(reader)
        record.requests += 1
        writer.write(sse_head())
        await writer.drain()
        await asyncio.sleep(delay)
        if stall:
            writer.write(http_chunk(chunk("Hello")))
            await writer.drain()
            await wait_peer_close(reader, record)
            return
        for part in (chunk("Hello"), chunk(" there", finish="stop"), b"data: [DONE]\n\n"):
            writer.write(http_chunk(part))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    return handler


def test_the_idle_timeout_takes_over_from_the_first_byte_timeout_after_the_first_event() -> None:
    with (
        raw_server(_head_then_events_after(0.5, stall=True)) as (upstream, record),
        proxy(upstream, idle_timeout=0.3, first_byte_timeout=20, upstream_kind="openai") as (url, app),
    ):
        started = time.monotonic()
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert time.monotonic() - started < 5  # 0.5 s to the event, 0.3 s idle; not the 20 s bound
        assert "Hello" in response.text
        assert "idle timeout" in response.text.rsplit("data: ", 1)[-1]
        wait_for(lambda: record.peer_closed_at)
        assert_idle(app)


def test_prompt_processing_after_the_head_is_bounded_by_the_first_byte_timeout_not_the_idle_one() -> None:
    with (
        raw_server(_head_then_events_after(0.8)) as (upstream, record),
        proxy(upstream, idle_timeout=0.3, first_byte_timeout=5, upstream_kind="openai") as (url, app),
    ):
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
        assert response.status_code == 200
        assert "Hello" in response.text
        assert response.text.endswith("data: [DONE]\n\n")
        assert record.requests == 1  # not asked again without streaming: the generation ran once
        assert_idle(app)


def test_an_upstream_silent_after_its_head_is_a_504_at_the_first_byte_timeout_never_asked_twice() -> None:
    with (
        raw_server(_head_then_events_after(30)) as (upstream, record),
        proxy(upstream, idle_timeout=0.2, first_byte_timeout=0.8, upstream_kind="openai") as (url, app),
    ):
        started = time.monotonic()
        error = assert_error(httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10), 504)
        assert 0.7 < time.monotonic() - started < 5
        assert "first-byte timeout" in error["message"]
        assert record.requests == 1
        assert_idle(app)


def test_idle_timeout_counts_from_the_last_event_not_the_first() -> None:
    """Each event moves the idle deadline on (one lazy timer per connection); only a real stall ends it."""
    # 0.8 s of events, each well inside the 0.3 s idle timeout
    handler = _streams(*(chunk(f"t{i} ") for i in range(8)), gap=0.1)
    with (
        raw_server(handler) as (upstream, record),
        proxy(upstream, idle_timeout=0.3, upstream_kind="openai") as (url, app),
    ):
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
        assert response.status_code == 200
        assert all(f"t{i} " in response.text for i in range(8)), response.text
        last = json.loads(response.text.rstrip().rsplit("data: ", 1)[-1])
        assert "idle timeout" in last["error"]["message"]
        wait_for(lambda: record.peer_closed_at)
        assert_idle(app)


def test_a_client_that_stops_reading_slows_the_upstream_and_loses_nothing() -> None:
    """Flow control end to end: while the client reads nothing, the proxy stops taking the upstream's
    events once the buffers between them are full, instead of holding the stream in memory; when the
    client reads again, every event arrives, in order."""
    count = 1_250  # about 40 MB: more than the loopback socket buffers of both hops hold
    finished: list[float] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        await read_request(reader)
        writer.write(sse_head())
        for i in range(count):
            writer.write(http_chunk(chunk(f"{i:05d}" + "x" * 32_000)))
            await writer.drain()
        writer.write(http_chunk(chunk("", "stop") + b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        finished.append(time.monotonic())
        await wait_peer_close(reader, record)

    with raw_server(handler) as (upstream, _), proxy(upstream, upstream_kind="openai") as (url, app):
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", url + "/v1/chat/completions", json=CHAT) as r,
        ):
            lines = r.iter_lines()
            first = next(lines)
            time.sleep(1.5)  # the client reads nothing; unchecked, the proxy takes it all in about 0.6 s
            resumed = time.monotonic()
            events = [line.removeprefix("data: ") for line in [first, *lines] if line.startswith("data: ")]
        assert finished
        assert finished[0] > resumed, "the upstream was not held back while the client waited"
        texts = [json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-1]]
        assert [t[:5] for t in texts if t] == [f"{i:05d}" for i in range(count)]
        assert events[-1] == "[DONE]"
        assert_idle(app)


def _page(status: str, content_type: str, body: bytes) -> Any:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        await read_request(reader)
        head = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n"
        writer.write(head.encode() + body)
        await writer.drain()

    return handler


@pytest.mark.parametrize(
    ("status", "content_type", "body", "expected"),
    [
        (
            "503 Service Unavailable",
            "text/html",
            b"<html><title>503 Service Temporarily Unavailable</title>"
            b"<body><h1>nginx</h1> at /srv/app/models/x.gguf</body></html>",
            503,
        ),
        ("500 Internal Server Error", "text/plain", b"Internal Server Error\nTraceback at /home/u/x.py", 500),
        ("404 Not Found", "text/plain", b"404 page not found", 404),
        (
            "422 Unprocessable Entity",
            "application/json",
            b'{"error":"Input validation error","error_type":"validation"}',
            400,
        ),
        (  # llama.cpp refuses a parameter with 500 (Q72): the request's fault
            "500 Internal Server Error",
            "application/json",
            b'{"error":{"code":500,"message":"Only no echo is supported","type":"server_error"}}',
            400,
        ),
        (  # koboldcpp's full queue (Q54): FastAPI's detail object, its message not printed as Python
            "503 Service Unavailable",
            "application/json",
            b'{"detail":{"msg":"Server is busy; please try again later.","type":"service_unavailable"}}',
            503,
        ),
    ],
)
def test_upstream_error_pages_become_openai_errors(
    status: str, content_type: str, body: bytes, expected: int
) -> None:
    with raw_server(_page(status, content_type, body)) as (upstream, _), proxy(upstream) as (url, app):
        for stream in (True, False):
            response = httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
            error = assert_error(response, expected)
            assert "<" not in error["message"]
            assert "{" not in error["message"]
            assert "/srv/" not in error["message"]
            assert "/home/" not in error["message"]
        assert_idle(app)


async def _close_second_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record
) -> None:
    """Like llama-server: answers on a keep-alive connection, then drops it on the next request."""
    served = 0
    while await read_request(reader) is not None:
        record.requests += 1
        if served == 1:
            return  # closed before any response byte
        body = chunk("ok", "stop") + b"data: [DONE]\n\n"
        writer.write(sse_head() + http_chunk(body) + b"0\r\n\r\n")
        await writer.drain()
        served += 1


@pytest.mark.parametrize(
    "reply",
    [
        b"HELLO WORLD\r\n\r\n",  # not HTTP at all
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\na header without a colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nZZ\r\ndata\r\n",  # a bad chunk size
    ],
    ids=["not-http", "bad-header", "bad-chunk"],
)
def test_a_reply_that_is_not_http_is_a_502(reply: bytes) -> None:
    # The start-up probe (GET /props) gets the same reply: the proxy must still start.
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        await read_request(reader)
        writer.write(reply)
        await wait_peer_close(reader, record)

    with raw_server(handler) as (upstream, _), proxy(upstream) as (url, app):
        for stream in (True, False):
            response = httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
            assert_error(response, 502)
        assert_idle(app)


def test_keepalive_connection_closed_before_response_is_retried_once() -> None:
    with (
        raw_server(_close_second_request) as (upstream, record),
        proxy(upstream, upstream_kind="openai") as (url, app),
    ):
        for _ in range(2):
            response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
            assert response.status_code == 200, response.text
            assert response.text.endswith("data: [DONE]\n\n")
        assert record.requests == 3  # one answered, one dropped, one retried
        assert record.connections == 2
        assert_idle(app)


def reset(writer: asyncio.StreamWriter) -> None:
    """Close the connection with a reset (RST), not an orderly close."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _reset_on_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record
) -> None:
    await read_request(reader)
    record.requests += 1
    reset(writer)  # before any response byte


def test_a_new_connection_reset_before_the_response_is_not_retried() -> None:
    """Only a reused keep-alive connection is retried: this upstream had the request, and generation is
    not idempotent."""
    with (
        raw_server(_reset_on_request) as (upstream, record),
        proxy(upstream, upstream_kind="openai") as (url, app),  # no probe: the first connection is new
    ):
        for stream in (True, False):
            response = httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
            assert_error(response, 502)
        assert (record.requests, record.connections) == (2, 2)
        assert_idle(app)


def _streams(*parts: bytes, then_wait: bool = True, gap: float = 0.01) -> Any:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        await read_request(reader)
        writer.write(sse_head())
        for part in parts:
            writer.write(http_chunk(part))
            await writer.drain()
            await asyncio.sleep(gap)
        if then_wait:
            await wait_peer_close(reader, record)
        else:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    return handler


def test_non_json_data_mid_stream_is_an_error_event() -> None:
    handler = _streams(chunk("Hello"), b"data: {not json\n\n")
    with raw_server(handler) as (upstream, record), proxy(upstream) as (url, app):
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
        assert response.status_code == 200
        assert "not valid JSON" in response.text.rsplit("data: ", 1)[-1]
        wait_for(lambda: record.peer_closed_at)
        assert_idle(app)


def test_connection_cut_mid_stream_is_an_error_event() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        await read_request(reader)
        writer.write(sse_head() + http_chunk(chunk("Hello")))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.transport.abort()  # no last chunk, no [DONE], no chunked terminator: a reset

    with raw_server(handler) as (upstream, _), proxy(upstream) as (url, app):
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
        assert response.status_code == 200
        assert "Hello" in response.text
        last = json.loads(response.text.rsplit("data: ", 1)[-1])
        message = last["error"]["message"]
        assert message.startswith("the upstream connection failed")
        assert "Timeout" not in message  # a reset is not reported as a timeout (proxy/transport.py)
        assert "[DONE]" not in response.text
        assert_idle(app)


async def _done_then_fin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """llama-cpp-python ending a stream it interrupts for a newer request: [DONE], then the FIN, with no
    chunked terminator."""
    await read_request(reader)
    writer.write(sse_head() + http_chunk(chunk("Hello", "stop") + b"data: [DONE]\n\n"))
    writer.write_eof()
    await wait_peer_close(reader, record)


def test_done_then_a_close_without_the_chunked_terminator_is_a_complete_stream() -> None:
    with raw_server(_done_then_fin) as (upstream, _), proxy(upstream) as (url, app):
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
        assert response.status_code == 200, response.text
        assert judge(response, "/v1/chat/completions", CHAT).errors == []
        assert response.text.endswith("data: [DONE]\n\n")
        assert_idle(app)


def test_the_transport_hands_over_what_came_before_a_failed_body() -> None:
    # Every byte received before a body fails is handed over before the error: when the reader is busy
    # as the last event and the close arrive (a fan-out's other stream), the event must not be lost.
    async def read(upstream: str) -> tuple[bytes, str]:
        transport = UpstreamTransport(keepalive_expiry=5)
        request = httpx.Request("POST", upstream + "/v1/chat/completions", json=CHAT)
        response = await transport.handle_async_request(request)
        await asyncio.sleep(0.2)  # busy elsewhere: the data and the close are both in before the read
        received = b""
        try:
            async for part in response.aiter_raw():
                received += part
        except httpx.TransportError as exc:
            return received, type(exc).__name__
        finally:
            await response.aclose()
            await transport.aclose()
        return received, "no error"

    with raw_server(_done_then_fin) as (upstream, _):
        received, error = asyncio.run(read(upstream))
    assert received.endswith(b"data: [DONE]\n\n")
    assert error == "ReadError"  # then the failure itself, not a timeout


def test_non_json_first_event_is_a_502() -> None:
    with raw_server(_streams(b"data: <html>\n\n")) as (upstream, record), proxy(upstream) as (url, app):
        assert_error(httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10), 502)
        wait_for(lambda: record.peer_closed_at)
        assert_idle(app)


def test_utf8_split_across_reads_and_invalid_bytes() -> None:
    whole = chunk("h\u00e9llo \u4e16\u754c")
    cut = whole.index("\u4e16".encode()) + 1  # inside a three-byte character
    bad = (
        b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        b'"delta":{"content":"\xff\xfe"},"finish_reason":"stop"}]}\n\n'
    )
    handler = _streams(whole[:cut], whole[cut:], bad, b"data: [DONE]\n\n", then_wait=False)
    with raw_server(handler) as (upstream, _), proxy(upstream) as (url, app):
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
        assert response.status_code == 200
        assert "h\u00e9llo \u4e16\u754c" in response.text
        assert "\ufffd" in response.text  # invalid bytes replaced, as a WHATWG decoder does
        assert response.text.endswith("data: [DONE]\n\n")
        assert_idle(app)


def test_invalid_utf8_in_a_json_body_is_replaced_as_in_a_stream() -> None:
    body = (
        b'{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
        b'"message":{"role":"assistant","content":"bad \xff\xfe end"},"finish_reason":"stop"}]}'
    )
    with (
        raw_server(_page("200 OK", "application/json", body)) as (upstream, _),
        proxy(upstream) as (url, app),
    ):
        for stream in (False, True):
            response = httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
            assert response.status_code == 200
            assert "bad \ufffd\ufffd end" in response.text
        assert_idle(app)


async def _huge_line(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    await read_request(reader)
    writer.write(sse_head() + http_chunk(chunk("Hello")))
    piece = b"x" * (1 << 20)
    with contextlib.suppress(ConnectionError):
        writer.write(http_chunk(b'data: {"id":"' + piece))
        for _ in range(10):
            writer.write(http_chunk(piece))
            await writer.drain()
            record.requests += 1  # counts MiB written
    await wait_peer_close(reader, record)


async def _endless_block(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """Short data lines, 10 MiB of them, and never the blank line that would end their event."""
    await read_request(reader)
    writer.write(sse_head() + http_chunk(chunk("Hello")))
    lines = b"data: x\n" * (1 << 17)  # 1 MiB
    with contextlib.suppress(ConnectionError):
        for _ in range(10):
            writer.write(http_chunk(lines))
            await writer.drain()
            record.requests += 1  # counts MiB written
    await wait_peer_close(reader, record)


@pytest.mark.parametrize("handler", [_huge_line, _endless_block], ids=["one-line", "one-event"])
def test_ten_megabyte_line_is_an_error_event_with_bounded_memory(handler: Any) -> None:
    with (
        raw_server(handler) as (upstream, record),
        proxy(upstream, max_line_bytes=256 * 1024) as (url, app),
    ):
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=20)
        assert response.status_code == 200
        assert "size limit" in response.text.rsplit("data: ", 1)[-1]
        wait_for(lambda: record.peer_closed_at)
        assert_idle(app)


async def _endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    await read_request(reader)
    writer.write(sse_head())
    closed = asyncio.ensure_future(wait_peer_close(reader, record))
    while not closed.done():
        writer.write(http_chunk(chunk("tick ")))
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        await asyncio.sleep(0.02)


def assert_cancelled_in_time(delay: float, when: str) -> None:
    """The issue's bound: the upstream sees its connection closed within 100 ms of the client leaving."""
    print(f"client disconnect {when}: upstream connection closed after {delay * 1000:.1f} ms")
    assert 0 <= delay < 0.1


def test_client_disconnect_mid_stream_cancels_the_upstream() -> None:
    # No /props probe: the only upstream connection is the request's.
    with raw_server(_endless) as (upstream, record), proxy(upstream, upstream_kind="openai") as (url, app):
        with (
            httpx.Client(timeout=10) as client,
            client.stream("POST", url + "/v1/chat/completions", json=CHAT) as r,
        ):
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            next(lines)
            left = time.monotonic()
        wait_for(lambda: record.peer_closed_at)
        assert_cancelled_in_time(record.peer_closed_at[0] - left, "mid-stream")
        assert_idle(app)


async def _head_then_silence(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record
) -> None:
    """llama-cpp-python's way: the head at once, then nothing while the prompt is processed."""
    request = await read_request(reader)
    if request is not None and request.startswith(b"GET "):  # the model listing read before a fan-out
        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        return
    writer.write(sse_head())
    await writer.drain()
    record.requests += 1
    await wait_peer_close(reader, record)


@pytest.mark.parametrize(
    ("handler", "body"),
    [
        (_silent, CHAT),
        (_head_then_silence, CHAT),  # the upstream's head is in, its first event is not
        (_head_then_silence, {**CHAT, "stream": False}),
        (_head_then_silence, {**CHAT, "n": 2}),  # fanned out: every sample's request goes
    ],
    ids=["no-head", "head-only", "head-only-aggregated", "head-only-fan-out"],
)
def test_client_disconnect_before_the_first_byte_cancels_the_upstream(
    handler: Any, body: dict[str, Any]
) -> None:
    with raw_server(handler) as (upstream, record), proxy(upstream, upstream_kind="openai") as (url, app):
        sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
        raw = json.dumps(body).encode()
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(raw)}\r\n\r\n".encode()
            + raw
        )
        samples = body.get("n", 1)
        wait_for(lambda: record.requests == samples)
        time.sleep(0.05)  # the heads reach the proxy
        left = time.monotonic()  # before the close: the proxy may cancel the upstream before close returns
        sock.close()
        wait_for(lambda: len(record.peer_closed_at) == samples)
        for closed in record.peer_closed_at:
            assert_cancelled_in_time(closed - left, "before the first byte")
        assert_idle(app)


def _empty_stream_then(status: str, body: bytes, streamed: int = 0) -> Any:
    """llama-cpp-python's overflow (Q52): SSE headers, then the stream ends with no byte; the
    non-streamed retry gets ``status`` and ``body``. The first ``streamed`` streams are answered."""
    answered = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (request := await read_request(reader)) is not None:
            # Only chat requests count: a usage count may also ask for the upstream's tokenizer.
            record.requests += request.startswith(b"POST /v1/chat/completions ")
            if json.loads(request.split(b"\r\n\r\n", 1)[1]).get("stream"):
                events = b""
                if len(answered) < streamed:
                    answered.append(True)
                    events = http_chunk(chunk("Hello", "stop") + b"data: [DONE]\n\n")
                writer.write(sse_head() + events + b"0\r\n\r\n")
            else:
                head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
                head += f"content-length: {len(body)}\r\n\r\n"
                writer.write(head.encode() + body)
            await writer.drain()

    return handler


def test_stream_ended_before_its_first_byte_is_retried_without_stream_for_the_real_error() -> None:
    overflow = json.dumps(
        {
            "error": {
                "message": "Requested tokens (3000) exceed context window of 2048",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    ).encode()
    handler = _empty_stream_then("400 Bad Request", overflow)
    with raw_server(handler) as (upstream, record), proxy(upstream, upstream_kind="openai") as (url, app):
        error = assert_error(httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10), 400)
        assert error["code"] == "context_length_exceeded"
        assert record.requests == 2  # the stream, then once without streaming
        assert_idle(app)


@pytest.mark.parametrize(
    ("path", "asked", "named"),
    [
        ("/v1/completions", {"model": "m", "prompt": "hi"}, "prompt"),
        ("/v1/chat/completions", {**CHAT, "stream": False}, "messages"),
    ],
)
def test_an_upstreams_overflow_names_the_input_the_client_sent(path: str, asked: Any, named: str) -> None:
    # llama-cpp-python names "messages" for a completion's prompt too (found by black-box testing).
    said = {"message": "Requested tokens (6000) exceed context window of 4096", "param": "messages"}
    overflow = {"error": {**said, "type": "invalid_request_error", "code": "context_length_exceeded"}}
    handler = answering(json_answer(overflow, "400 Bad Request"))
    with raw_server(handler) as (upstream, _), proxy(upstream, upstream_kind="openai") as (url, app):
        error = assert_error(httpx.post(url + path, json=asked, timeout=10), 400)
        assert (error["code"], error["param"]) == ("context_length_exceeded", named)
        assert_idle(app)


def test_a_successful_retry_without_stream_is_served_as_a_stream() -> None:
    reply = json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
            ],
        }
    ).encode()
    with (
        raw_server(_empty_stream_then("200 OK", reply)) as (upstream, record),
        proxy(upstream, upstream_kind="openai") as (url, app),
    ):
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
        assert response.status_code == 200
        assert '"content":"Hi"' in response.text
        assert response.text.endswith("data: [DONE]\n\n")
        assert record.requests == 2
        assert_idle(app)
    # Fanned out, where one sample streams and the other's stream comes back empty: both are served.
    with (
        raw_server(_empty_stream_then("200 OK", reply, streamed=1)) as (upstream, record),
        proxy(upstream, upstream_kind="openai") as (url, app),
    ):
        asked = {**CHAT, "n": 2, "stream_options": {"include_usage": True}}
        response = httpx.post(url + "/v1/chat/completions", json=asked, timeout=10)
        assert response.status_code == 200
        assert judge(response, "/v1/chat/completions", asked).errors == []
        texts: dict[int, str] = {}
        for event in response.text.split("\n\n")[:-2]:
            for choice in json.loads(event.removeprefix("data: "))["choices"]:
                texts[choice["index"]] = texts.get(choice["index"], "") + (
                    choice["delta"].get("content") or ""
                )
        assert sorted(texts.values()) == ["Hello", "Hi"]
        assert record.requests == 3  # two streams, one retried without
        assert_idle(app)


async def _answers_but_its_tokenizer_hangs(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record
) -> None:
    """An upstream that sends no usage and whose tokenizer endpoints accept and never answer."""
    while (request := await read_request(reader)) is not None:
        if b"tokenize" in request.split(b"\r\n", 1)[0]:
            record.requests += 1
            await wait_peer_close(reader, record)
            return
        body = chunk("Hello") + chunk(" there", "stop") + b"data: [DONE]\n\n"
        writer.write(sse_head() + http_chunk(body) + b"0\r\n\r\n")
        await writer.drain()


def test_a_tokenizer_that_does_not_answer_holds_up_no_answer() -> None:
    with (
        raw_server(_answers_but_its_tokenizer_hangs) as (upstream, record),
        proxy(upstream, idle_timeout=0.8, upstream_kind="openai") as (url, app),
    ):
        traits = only_upstream(app).traits
        asked = {**CHAT, "stream_options": {"include_usage": True}}
        # Both endpoints share one budget per answer, so a loaded machine may probe the second on the
        # next answer: at most one answer per endpoint before the upstream counts as having none.
        for _ in range(3):
            started = time.monotonic()
            response = httpx.post(url + "/v1/chat/completions", json=asked, timeout=10)
            took = time.monotonic() - started
            assert response.status_code == 200
            assert response.text.endswith("data: [DONE]\n\n")
            usage = json.loads(response.text.split("\n\n")[-3].removeprefix("data: "))["usage"]
            assert usage["completion_tokens"] == 2  # estimated: the tokens streamed
            assert took < 1.5  # the tokenizer calls bounded by a quarter of the idle timeout
            if traits.tokenizer == NO_TOKENIZER:
                break
        assert traits.tokenizer == NO_TOKENIZER
        asked_before = record.requests
        response = httpx.post(url + "/v1/chat/completions", json=asked, timeout=10)
        assert response.status_code == 200
        assert record.requests == asked_before <= 2  # counted as absent: never asked again
        assert_idle(app)


def test_a_found_tokenizer_slow_once_is_asked_again_next_time() -> None:
    class Tokenizer:
        """``Upstream.json`` of an upstream with llama-cpp-python's tokenizer, too slow on one call."""

        def __init__(self) -> None:
            self.calls: list[str] = []
            self.slow = False
            self.traits = UpstreamTraits()

        async def json(self, method: str, path: str, body: Any, timeout: float = 10.0) -> Any:  # noqa: ASYNC109
            self.calls.append(path)
            if path != "/extras/tokenize/count" or self.slow:
                return None  # what json() answers on a 404 or a timeout
            return {"count": 1 + len(body["input"].split())}  # its count includes the BOS token

    async def scenario() -> list[int | None]:
        adapter, upstream = OpenAIAdapter(), Tokenizer()
        counts = [await adapter.count_tokens(upstream, "some text", 1.0)]  # type: ignore[arg-type]
        upstream.slow = True
        counts.append(await adapter.count_tokens(upstream, "some text", 1.0))  # type: ignore[arg-type]
        upstream.slow = False
        counts.append(await adapter.count_tokens(upstream, "some text", 1.0))  # type: ignore[arg-type]
        # Probed once (with the count of "" that the BOS token makes 1), then asked directly.
        assert upstream.calls == ["/extras/tokenize/count"] * 4
        return counts

    assert asyncio.run(scenario()) == [2, None, 2]  # the text's two tokens, without the BOS token


def test_a_probe_that_fails_beside_one_that_found_the_tokenizer_does_not_turn_it_off() -> None:
    class Tokenizer:
        def __init__(self) -> None:
            self.calls = 0
            self.traits = UpstreamTraits()

        async def json(self, method: str, path: str, body: Any, timeout: float = 10.0) -> Any:  # noqa: ASYNC109
            self.calls += 1
            first = self.calls == 1
            await asyncio.sleep(0.01 if first else 0.02)
            return {"count": 3} if first and path == "/extras/tokenize/count" else None

    async def scenario() -> list[int | None]:
        adapter, upstream = OpenAIAdapter(), Tokenizer()
        pair = await asyncio.gather(
            adapter.count_tokens(upstream, "a", 1.0),  # type: ignore[arg-type]
            adapter.count_tokens(upstream, "b", 1.0),  # type: ignore[arg-type]
        )
        upstream.calls = 0  # the next call is a first again: it answers
        return [*pair, await adapter.count_tokens(upstream, "c", 1.0)]  # type: ignore[arg-type]

    assert asyncio.run(scenario()) == [3, None, 3]


class _OneAtATime:
    """llama-cpp-python's server: one request at a time; a stream that sees another request waiting
    sends [DONE] without a final chunk and breaks its connection (``interrupt_requests``)."""

    WORDS = [" the", " capital", " of", " France"]

    def __init__(self, delay: float = 0.0, reset_after_done: bool = False, listing: bool = False) -> None:
        self.listing = listing  # answers GET /v1/models as llama-cpp-python does
        self.lock = asyncio.Lock()
        self.waiting = 0
        self.streamed: list[bool] = []
        self.delay = delay  # seconds a whole answer takes
        self.reset_after_done = reset_after_done  # a whole stream, then the connection cut anyway

    async def handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record
    ) -> None:
        while (request := await read_request(reader)) is not None:
            if request.startswith(b"GET /v1/models"):
                entries = (
                    [{"id": "m", "object": "model", "owned_by": "me", "permissions": []}]
                    if self.listing
                    else []
                )
                writer.write(json_answer({"object": "list", "data": entries}))
                await writer.drain()
                continue
            body = json.loads(request.split(b"\r\n\r\n", 1)[1])
            self.streamed.append(body.get("stream") is True)
            self.waiting += 1
            async with self.lock:
                self.waiting -= 1
                if not body.get("stream"):
                    await asyncio.sleep(self.delay)
                    usage = {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}
                    answer = upstream_answer(False, [_text("".join(self.WORDS), "length")], usage=usage)
                    writer.write(json_answer(answer))
                    await writer.drain()
                    continue
                writer.write(sse_head())
                for word in self.WORDS:
                    writer.write(http_chunk(_event(_text(word, None))))
                    await writer.drain()
                    await asyncio.sleep(0.05)
                    if self.waiting:
                        writer.write(http_chunk(b"data: [DONE]\n\n"))
                        await writer.drain()
                        writer.transport.abort()  # the response is never ended
                        return
                ending = http_chunk(_event(_text("", "length")) + b"data: [DONE]\n\n")
                writer.write(ending if self.reset_after_done else ending + b"0\r\n\r\n")
                await writer.drain()
                if self.reset_after_done:
                    writer.transport.abort()
                    return


def _text(text: str, finish: str | None) -> dict[str, Any]:
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}


def _event(choice: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(upstream_answer(False, [choice])).encode() + b"\n\n"


def test_a_stream_the_upstream_interrupted_ends_in_an_error_and_n_is_then_asked_one_at_a_time() -> None:
    upstream = _OneAtATime()
    body = {"model": "m", "prompt": "The capital", "max_tokens": 4, "n": 2, "stream": True}
    with raw_server(upstream.handle) as (url, _), proxy(url, upstream_kind="openai") as (base, app):
        # Both samples at once: the upstream breaks the first off after one word and says [DONE].
        first = httpx.post(base + "/v1/completions", json=body, timeout=10)
        assert first.status_code == 200
        assert "interrupted the stream" in first.text.split("\n\n")[-2]  # an error event, no success
        assert "data: [DONE]" not in first.text
        # Learned: the samples are asked one after another, whole, and served as a stream.
        upstream.streamed.clear()
        second = httpx.post(base + "/v1/completions", json=body, timeout=10)
        assert judge(second, "/v1/completions", body).errors == []
        texts: dict[int, str] = {}
        for event in second.text.split("\n\n"):
            if event.startswith("data: {"):
                for choice in json.loads(event[6:])["choices"]:
                    texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
        assert texts == {0: "".join(_OneAtATime.WORDS), 1: "".join(_OneAtATime.WORDS)}
        assert upstream.streamed == [False, False]
        assert_idle(app)


def test_one_at_a_time_each_request_gets_its_own_first_byte_timeout() -> None:
    """n whole answers in a row fit no single first-byte timeout: each request is bounded, not the sum."""
    upstream = _OneAtATime(delay=0.4)
    body = {"model": "m", "prompt": "The capital", "max_tokens": 4, "n": 4, "stream": True}
    with (
        raw_server(upstream.handle) as (url, _),
        proxy(url, upstream_kind="openai", first_byte_timeout=1) as (base, app),
    ):
        only_upstream(app).traits.serial = True  # as learned from an interrupted stream
        response = httpx.post(base + "/v1/completions", json=body, timeout=20)
        assert judge(response, "/v1/completions", body).errors == []
        assert upstream.streamed == [False] * 4
        assert_idle(app)


def test_a_whole_stream_cut_after_its_end_does_not_make_the_upstream_one_at_a_time() -> None:
    upstream = _OneAtATime(reset_after_done=True)
    body = {"model": "m", "prompt": "The capital", "max_tokens": 4, "stream": True}
    with raw_server(upstream.handle) as (url, _), proxy(url, upstream_kind="openai") as (base, app):
        response = httpx.post(base + "/v1/completions", json=body, timeout=10)
        assert judge(response, "/v1/completions", body).errors == []
        assert not only_upstream(app).traits.serial


def test_the_count_of_an_empty_text_is_asked_again_when_it_was_not_answered() -> None:
    class Tokenizer:
        def __init__(self) -> None:
            self.empty_answered = False
            self.traits = UpstreamTraits()

        async def json(self, method: str, path: str, body: Any, timeout: float = 10.0) -> Any:  # noqa: ASYNC109
            if path != "/extras/tokenize/count":
                return None
            if body["input"] == "" and not self.empty_answered:
                self.empty_answered = True
                return None  # timed out, this once
            return {"count": 1 + len(body["input"].split())}  # BOS included

    async def scenario() -> list[int | None]:
        adapter, upstream = OpenAIAdapter(), Tokenizer()
        return [await adapter.count_tokens(upstream, "a b", 1.0) for _ in range(2)]  # type: ignore[arg-type]

    assert asyncio.run(scenario())[1] == 2


def test_llama_cpp_pythons_model_listing_makes_the_first_fan_out_one_at_a_time() -> None:
    upstream = _OneAtATime(listing=True)
    body = {"model": "m", "prompt": "The capital", "max_tokens": 4, "n": 2, "stream": True}
    with raw_server(upstream.handle) as (url, _), proxy(url, upstream_kind="openai") as (base, app):
        response = httpx.post(base + "/v1/completions", json=body, timeout=10)
        assert judge(response, "/v1/completions", body).errors == []
        assert upstream.streamed == [False, False]
        assert_idle(app)
