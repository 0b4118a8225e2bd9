"""Issue 32 on the Responses API's WebSocket mode: a turn of any length holds a bounded piece of its text.

The spec sends each event as one message and ASGI's ``websocket.send`` takes a message whole, so the
socket held every event whole: an answer of many MiB put its ``response.output_text.done``,
``.content_part.done``, ``.output_item.done`` and terminal Response in memory, each in several copies
(bytes, text, frame). Past ``MAX_MESSAGE`` (conformance/protocols/responses/websocket.py) an event is now
let go, and the rest of its turn read and let go: the client gets the events before it, then one error
message, and the socket serves the next turn.

Here, in-process, with the bound patched down to ``BOUND`` (the constant is 8 MiB): a raw upstream
streams ``MEGABYTES`` MiB of text to the proxy; the peak of Python's allocations in every thread
(``tracemalloc``) while a client reads the turn over a socket. Measured on these 26.5 MB of text: 615 MB
at the peak before (the whole events, the client taking them: 23 times the text), 6.4 MB after, the same
for 8.8 or 35.3 MB of text and a bound of 1 to 4 MiB.
"""

from __future__ import annotations

import asyncio
import json
import logging
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from conformance.protocols.responses import websocket

from .conftest import serve_proxy
from .rawserver import Record, chunk, http_chunk, raw_server, read_request, sse_head
from .test_responses_long_stream import PIECE
from .test_responses_websocket import TERMINAL, error_of, read_turn, send, socket_url, turn

MEGABYTES = 24
BOUND = 2 * 1024 * 1024


def _long_then_short(megabytes: int, finished: list[int]) -> Any:
    """A request whose input says ``long``: ``megabytes`` x 16 events of ``PIECE``, the same bytes again;
    any other: ``Hello``. ``finished`` counts the long answers written to their end."""
    event = http_chunk(chunk(PIECE))

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (request := await read_request(reader)) is not None:
            record.requests += 1
            writer.write(sse_head())
            long = b'"long"' in request
            for _ in range(megabytes * 16 if long else 0):
                writer.write(event)
                await writer.drain()
            last = chunk("" if long else "Hello", "stop") + b"data: [DONE]\n\n"
            writer.write(http_chunk(last) + b"0\r\n\r\n")
            await writer.drain()
            finished.append(long)
            del request

    return handler


@pytest.fixture
def long_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ClientConnection, list[int]]]:
    monkeypatch.setattr(websocket, "MAX_MESSAGE", BOUND)
    finished: list[int] = []
    with (
        raw_server(_long_then_short(MEGABYTES, finished)) as (upstream, _),
        serve_proxy(upstream, upstream_kind="openai") as (url, _app),
        # No bound of the client's own (1 MiB by default): the server's is the one tested.
        connect(socket_url(url), max_size=None) as ws,
    ):
        assert turn(ws, input="short", store=False)[-1]["type"] == "response.completed"  # warm
        yield ws, finished


def _long_turn(ws: ClientConnection) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The long turn's messages: the events before the error message, and that message."""
    send(ws, input="long", store=False)
    events = read_turn(ws)
    return events[:-1], events[-1]


def _counted(ws: ClientConnection) -> tuple[int, str]:
    """A turn read a message at a time (the client holds one): the characters of its deltas, and the
    type of its last message."""
    streamed = 0
    while True:
        event = json.loads(ws.recv(timeout=10))
        streamed += len(event.get("delta", ""))
        if event["type"] in TERMINAL or event["type"] == "error":
            return streamed, event["type"]


def _check_before(before: list[dict[str, Any]]) -> None:
    """The events before the error message: every delta, each one message well under the bound."""
    kinds = [e["type"] for e in before]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert not TERMINAL & set(kinds)
    deltas = "".join(e["delta"] for e in before if e["type"] == "response.output_text.delta")
    assert deltas == PIECE * MEGABYTES * 16
    assert [e["sequence_number"] for e in before] == list(range(len(before)))


def test_an_event_past_the_bound_ends_the_turn_with_one_error_and_the_socket_goes_on(
    long_socket: tuple[ClientConnection, list[int]], caplog: pytest.LogCaptureFixture
) -> None:
    ws, finished = long_socket
    caplog.set_level(logging.INFO, logger="conformant.access")
    before, error = _long_turn(ws)
    _check_before(before)
    # Then one error message in the spec's shape, in place of the .done events and the Response.
    error_of([error])
    assert error["status"] == 400
    assert error["error"]["code"] == "websocket_message_too_large"
    assert str(BOUND) in error["error"]["message"]
    assert "HTTP" in error["error"]["message"]
    # The socket serves the next turn; the long one was read to its end, and logged as the POST it is.
    after = turn(ws, input="short", store=False)
    assert after[-1]["type"] == "response.completed"
    assert after[-1]["response"]["output"][0]["content"][0]["text"] == "Hello"
    assert finished[-2:] == [True, False]  # (the proxy asks others first: the model listing)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "conformant.access"]
    assert [line["status"] for line in lines] == [200, 200]


def test_a_failed_long_turn_is_not_continued(long_socket: tuple[ClientConnection, list[int]]) -> None:
    """The turn counts as failed: the socket does not remember its response, as for ``response.failed``."""
    ws, _ = long_socket
    first = turn(ws, input="short", store=False)[-1]["response"]["id"]
    send(ws, input="long", store=False, previous_response_id=first)
    assert read_turn(ws)[-1]["type"] == "error"
    retry = error_of(turn(ws, input="short", store=False, previous_response_id=first))
    assert retry["error"]["code"] == "previous_response_not_found"


def test_a_long_turn_over_a_socket_holds_a_piece_of_its_text_not_the_whole(
    long_socket: tuple[ClientConnection, list[int]],
) -> None:
    ws, _ = long_socket
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        send(ws, input="long", store=False)
        streamed, last = _counted(ws)
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    assert last == "error"
    text_bytes = len(PIECE.encode()) * MEGABYTES * 16
    assert streamed == MEGABYTES * 16 * len(PIECE)
    # Held whole, each repeating event cost several copies of the text (see the module's docstring); held
    # to the bound, a few copies of the bound, the spool's in-memory part (1 MiB) and the client's reads.
    assert peak < text_bytes / 2, f"{peak / 1e6:.1f} MB at the peak for {text_bytes / 1e6:.1f} MB of text"
