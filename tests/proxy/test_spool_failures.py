"""A long Responses text that its temporary file cannot keep, and a long event stopped half-way (issue 32,
hardening; the spool itself: test_spooled_text.py, test_responses_long_stream.py).

Found in review of conformance/protocols/spooled_text.py and proxy/writer.py:

- with no writable temporary directory, a stream past ``SPOOL_CHARS`` characters ended with
  ``response.failed`` "internal error in the proxy";
- a file that stopped taking bytes part-way (a full disk, here a file size limit: the kernel's short write
  then its error, whatever the code above it does) raised out of the stream's events the same way;
- a long event written a piece at a time and stopped between two pieces (a spooled text's ``pread``
  failing, the shutdown deadline) was followed by the stream's ``response.failed``: half a ``data:`` line
  and the next event ran into one malformed event at the client.

Now the text that could not be kept ends its item as ``incomplete`` (its text empty, never a part of it
told as the whole) and the stream with ``response.failed`` saying why, with no path in it; and nothing
follows half an event: the connection is closed where it stands, so the client's parser drops the half
event unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import resource
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from conformance.protocols import spooled_text
from conformance.protocols.responses.output import ResponsesOutput
from conformance.protocols.responses.translation import translate_request
from conformance.protocols.spooled_text import TextSpool
from proxy import cli, graceful
from proxy.observability import Exchange
from proxy.writer import HeldResponse, _stream

from .conftest import serve_proxy
from .rawserver import chunk, chunk_payload, raw_server, streaming
from .test_responses_websocket import read_turn, send, socket_url

SPOOLED = 1000
"""Characters a text holds in memory in these tests (``SPOOL_CHARS``): past them, the file."""


def _complete_events(body: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """Each whole event of ``body`` as the client parses it (every one must be valid JSON, named as its
    ``type``), and what follows the last one (an event cut short, which an SSE parser drops)."""
    *blocks, rest = body.split(b"\n\n")
    events = []
    for block in blocks:
        head, _, data = block.partition(b"\ndata: ")
        event = json.loads(data)
        assert head == b"event: " + event["type"].encode()
        events.append(event)
    return events, rest


def _read_stream(url: str) -> tuple[bytes, bool]:
    """A Responses stream's raw bytes, and whether the body ended as a body should (not a cut)."""
    body = {"model": "m", "input": "go on", "stream": True, "store": False}
    received = bytearray()
    try:
        with httpx.stream("POST", url + "/v1/responses", json=body, timeout=60) as answer:
            assert answer.status_code == 200
            for data in answer.iter_raw():
                received += data
    except httpx.RemoteProtocolError:  # the connection closed without the body's end
        return bytes(received), False
    return bytes(received), True


def _long_message(count: int = 40, size: int = 100) -> list[bytes]:
    return [chunk(f"{i:04} " + "x" * (size - 5)) for i in range(count)]


def _assert_failed_for_the_spool(events: list[dict[str, Any]], hidden: str) -> None:
    """The stream ended with the spool's failure: the item ``incomplete`` with no text, no path named."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    failed = events[-1]
    assert failed["type"] == "response.failed"
    message = failed["response"]["error"]["message"]
    assert "temporary file" in message
    assert "TMPDIR" in message
    assert "internal error" not in message
    assert hidden not in json.dumps(events)
    (item,) = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert item["status"] == "incomplete"
    assert item["content"][0]["text"] == ""  # never a part of the text told as the whole
    assert failed["response"]["output"] == [item]


@contextlib.contextmanager
def _files_of_at_most(size: int) -> Iterator[None]:
    """Writes past ``size`` bytes of any file fail (``RLIMIT_FSIZE``): the kernel's own short write, then
    ``EFBIG``, as a disk that fills up does with ``ENOSPC``; SIGXFSZ ignored, as a server's disk full
    raises no signal."""
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, limits[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)


# -- 2: no temporary directory ------------------------------------------------------------------------


def test_a_long_text_with_no_temporary_directory_fails_the_response_saying_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Before: ``response.failed`` with "internal error in the proxy" (the ``FileNotFoundError`` of
    ``tempfile`` raised out of the stream's events)."""
    missing = tmp_path / "no-such-directory"
    monkeypatch.setattr(spooled_text, "SPOOL_CHARS", SPOOLED)
    with (
        raw_server(streaming(*_long_message())) as (upstream, _),
        serve_proxy(upstream, upstream_kind="openai") as (url, _app),
    ):
        monkeypatch.setattr(tempfile, "tempdir", str(missing))  # (the proxy's store made its own)
        body, ended = _read_stream(url)
    events, rest = _complete_events(body)
    assert ended
    assert rest == b""
    _assert_failed_for_the_spool(events, str(missing))
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert len(deltas) > SPOOLED  # its deltas went out as they came, until the file was needed


def test_serve_says_in_one_line_where_no_temporary_file_can_be_made(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: nothing at the start, an "internal error" at the first long Responses text."""
    missing = tmp_path / "no-such-directory"
    monkeypatch.setattr(tempfile, "tempdir", str(missing))
    cli._warn_if_no_temporary_files()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("conformant serve: no temporary file can be made in " + str(missing))
    assert "set TMPDIR" in lines[0]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert spooled_text.temporary_file_problem() is None
    cli._warn_if_no_temporary_files()
    assert capsys.readouterr().err == ""


# -- 3: a file that stops taking bytes ----------------------------------------------------------------


def test_a_file_that_fills_up_mid_spill_fails_the_response_not_its_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The temporary file is limited to 20,000 bytes for a 40,000-character text: the kernel writes what fits
    (a short write), then refuses. Before: the stream's events raised ``OSError`` out of the proxy's
    events ("internal error in the proxy"), and the spool kept the text that had failed to go to its file
    to write again."""
    monkeypatch.setattr(spooled_text, "SPOOL_CHARS", SPOOLED)
    monkeypatch.setattr(spooled_text, "FLUSH_CHARS", 3000)  # several writes, one of them cut short
    with (
        raw_server(streaming(*_long_message(40, 1000))) as (upstream, _),
        serve_proxy(upstream, upstream_kind="openai") as (url, _app),
        _files_of_at_most(20_000),
    ):
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        body, ended = _read_stream(url)
    events, rest = _complete_events(body)
    assert ended
    assert rest == b""
    _assert_failed_for_the_spool(events, str(tmp_path))
    assert "File too large" in events[-1]["response"]["error"]["message"]


def test_a_short_write_goes_on_from_where_it_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The file takes at most 7 bytes a write: every byte still reaches it, once. (A guard of the
    spool's own write loop, which replaced a buffered file's: that one looped too.)"""
    real_write = os.pwrite

    def short_write(descriptor: int, data: Any, offset: int) -> int:
        return real_write(descriptor, bytes(data[:7]), offset)

    monkeypatch.setattr(os, "pwrite", short_write)
    spool = TextSpool(limit=4)
    text = "".join(f"part {i} é😀 " for i in range(300))
    for start in range(0, len(text), 50):
        spool.append(text[start : start + 50])
    spool.finish()
    monkeypatch.undo()
    assert spool.text() == text


def test_a_full_disk_fails_the_spool_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ENOSPC`` after a short write: the spool fails with the reason and no path, reads as empty (not
    the part written), and takes and holds no more text (the answer's file, shared by its texts, goes
    with the answer, which this failure ends)."""
    real_write = os.pwrite
    written = [0]

    def filling_write(descriptor: int, data: Any, offset: int) -> int:
        if written[0] >= 300:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/tmp/conformant-spool-x")
        taken = real_write(descriptor, bytes(data[: 300 - written[0]]), offset)
        written[0] += taken
        return taken

    monkeypatch.setattr(os, "pwrite", filling_write)
    spool = TextSpool(limit=4)
    for i in range(100):
        spool.append(f"delta {i} ")
    spool.finish()
    monkeypatch.undo()
    assert spool.failure is not None
    assert "No space left on device" in spool.failure
    assert "/tmp" not in spool.failure
    assert spool.text() == ""
    assert list(spool.pieces()) == []
    spool.append("more")
    spool.finish()
    assert spool.text() == ""
    assert spool._parts == []
    assert spool._shared.held == 0


# -- 1: a long event stopped half-way -----------------------------------------------------------------


def _reasoning_then_text(size: int) -> list[bytes]:
    """Reasoning of ``size`` characters in 1,000-character deltas (spooled), then an answer: the
    reasoning item's end (three events that repeat its text, in pieces) comes mid-stream."""
    parts = [
        b"data: " + json.dumps(chunk_payload({"reasoning_content": "r" * 999 + "\n"})).encode() + b"\n\n"
        for _ in range(size // 1000)
    ]
    return [*parts, chunk("the answer"), chunk("", "stop")]


def _fourth_read_failing(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Texts past ``SPOOLED`` characters spooled and read 1,000 bytes at a time, the fourth read failing
    (``EIO``: a disk gone bad); the count of reads."""
    monkeypatch.setattr(spooled_text, "SPOOL_CHARS", SPOOLED)
    monkeypatch.setattr(spooled_text, "READ_BYTES", 1000)
    real_pread = os.pread
    reads = [0]

    def failing_pread(descriptor: int, size: int, offset: int) -> bytes:
        reads[0] += 1
        if reads[0] == 4:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_pread(descriptor, size, offset)

    monkeypatch.setattr(os, "pread", failing_pread)
    return reads


def test_a_long_event_whose_text_cannot_be_read_is_never_followed_by_the_tail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The spooled reasoning's fourth read fails (``pread``: a disk gone bad) while its ``.done`` event is
    being sent. Before: ``response.failed`` (internal error) followed the half event, which the client
    parsed as one malformed event. Now the connection closes where it stands: every whole event the
    client parsed is valid, and the half one is dropped unread (no blank line ends it)."""
    reads = _fourth_read_failing(monkeypatch)
    with (
        raw_server(streaming(*_reasoning_then_text(20_000))) as (upstream, _),
        serve_proxy(upstream, upstream_kind="openai") as (url, _app),
    ):
        body, ended = _read_stream(url)
    assert reads[0] >= 4
    events, rest = _complete_events(body)
    assert not ended  # the body's end is not sent: its HTTP client knows the stream was cut
    # (what of the half event had reached the writer is sent or not, as it stands: never ended)
    assert rest == b"" or rest.startswith(b"event: response.reasoning_text.done\ndata: {")
    assert events[-1]["type"] == "response.reasoning_text.delta"
    assert b"response.failed" not in body


def test_a_socket_turn_whose_long_event_cannot_be_read_ends_with_an_error_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same failure over the WebSocket mode: an HTTP client sees the cut, but a socket stays open,
    and its client waited for ever, with neither a terminal event nor an error message (issue 32's
    review). It now gets one ``server_error`` error message, and the socket serves its next turn."""
    reads = _fourth_read_failing(monkeypatch)
    with (
        raw_server(streaming(*_reasoning_then_text(20_000))) as (upstream, _),
        serve_proxy(upstream, upstream_kind="openai") as (url, _app),
        connect(socket_url(url), max_size=None) as ws,
    ):
        send(ws, input="go", store=False)
        events = read_turn(ws)
        send(ws, input="again", store=False)
        again = read_turn(ws)
    assert reads[0] >= 4
    assert [e["type"] for e in events[-2:]] == ["response.reasoning_text.delta", "error"]
    assert events[-1]["error"]["code"] == "server_error"
    assert again[-1]["type"] == "response.completed"


class _Batches:
    """A source's stream, as ``_stream`` reads it: the batches, then its end."""

    failure = None
    usage = None

    def __init__(self, batches: list[list[dict[str, Any]]]) -> None:
        self._batches = iter(batches)
        self.active = self

    async def next_batch(self) -> list[dict[str, Any]] | None:
        return next(self._batches, None)


def test_the_shutdown_deadline_inside_a_long_event_sends_nothing_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The deadline cancels the stream while the reasoning's ``.done`` event is under way (its writer
    waiting for the client to take 256 KiB of it). Before: the rest of what waited, then
    ``response.failed``, ran on from half a ``data:`` line. Now nothing follows it, and the body is not
    ended: the connection is closed, and the error noted for the access log."""
    monkeypatch.setattr(spooled_text, "SPOOL_CHARS", SPOOLED)
    reasoning = [chunk_payload({"reasoning_content": "r" * 400_000})]
    answer = [chunk_payload({"content": "the answer"})]
    sent: list[dict[str, Any]] = []

    async def run() -> Exchange:
        request = {"model": "m", "input": "go on", "stream": True, "store": False}
        output = ResponsesOutput(translate_request(request), "m")
        exchange = Exchange(request_id="r", started=0.0)
        producer: asyncio.Task[None] | None = None

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if b"response.reasoning_text.done" in message.get("body", b"") and producer is not None:
                producer.cancel()  # what the deadline does (HeldResponse's ``end``)
                graceful._passed.add(asyncio.get_running_loop())

        source: Any = _Batches([reasoning, answer])
        producer = asyncio.create_task(_stream(send, source, [], exchange, None, output))
        await producer
        return exchange

    exchange = asyncio.run(run())
    assert exchange.error_code == "server_shutting_down"
    assert all(message.get("more_body", False) for message in sent[1:])  # the body's end never sent
    body = b"".join(message.get("body", b"") for message in sent[1:])
    events, rest = _complete_events(body)
    assert rest.startswith(b"event: response.reasoning_text.done\ndata: {")
    assert events[-1]["type"] == "response.reasoning_text.delta"
    assert b"response.failed" not in body


def _staying_client(sent: list[dict[str, Any]]) -> tuple[Any, Any]:
    """An ASGI ``receive`` of a client that stays, and a ``send`` that keeps what it is given in ``sent``."""

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    return receive, send


def test_a_last_event_that_cannot_be_read_is_the_proxys_failure_not_a_client_gone(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The answer's text is spooled, and a read fails inside the stream's last events (its ``.done``
    events and the Response, the usual place a spooled text is read). Before: the ``OSError`` reached
    the response's writer, which took it for the client gone: no error for the access log, no line
    saying why (issue 32's review). Now the connection is closed inside the event as for any failed
    read, the log says why, and the request's error is the proxy's."""
    reads = _fourth_read_failing(monkeypatch)
    sent: list[dict[str, Any]] = []
    exchange = Exchange(request_id="r", started=0.0)

    async def run() -> None:
        request = {"model": "m", "input": "go on", "stream": True, "store": False}
        output = ResponsesOutput(translate_request(request), "m")
        source: Any = _Batches([[chunk_payload({"content": "y" * 300_000})], [chunk_payload({}, "stop")]])

        receive, send = _staying_client(sent)

        async def body(send: Any) -> None:
            await _stream(send, source, [], exchange, None, output)

        await HeldResponse(body, exchange, output.cut)({"type": "http"}, receive, send)

    with caplog.at_level(logging.WARNING, logger="conformant.proxy"):
        asyncio.run(run())
    assert reads[0] == 4
    assert not exchange.disconnected
    assert exchange.error == "internal error in the proxy"
    assert "could not be read back" in caplog.text
    assert all(message.get("more_body", False) for message in sent[1:])  # the body's end never sent


def test_the_deadline_inside_the_streams_last_event_closes_the_connection() -> None:
    """The deadline comes while the stream's last event goes out in pieces: ``cut`` has nothing to add
    (``ResponsesOutput.cut`` gives b"" once a piece of its end went out). Before: the body was ended
    there, a clean end after half an event; now it is not ended, and uvicorn closes the connection."""
    sent: list[dict[str, Any]] = []
    half = b'event: response.completed\ndata: {"type":"response.completed","response":{"output":["tex'

    async def run() -> None:
        under_way = asyncio.Event()

        receive, send = _staying_client(sent)

        async def body(send: Any) -> None:
            headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": half, "more_body": True})
            under_way.set()
            await asyncio.Event().wait()  # the rest of the event, for a client slow to take it

        response = HeldResponse(body, Exchange(request_id="r", started=0.0), lambda error: b"")
        task = asyncio.create_task(response({"type": "http"}, receive, send))
        await under_way.wait()
        graceful.end_now(asyncio.get_running_loop())
        await task

    asyncio.run(run())
    assert [message.get("body") for message in sent[1:]] == [half]
    assert all(message.get("more_body", False) for message in sent[1:])
