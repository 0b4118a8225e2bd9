"""Issue 32, item 3: a ``/v1/responses`` stream of any length holds a bounded piece of its text, not the
whole of it, and the client still gets every byte it got before.

The Responses API repeats an item's whole text in ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done`` and the terminal event's Response; the
proxy held it all as strings and wrote each of those events whole: 200 MiB of upstream text took it to a
peak RSS of 2.28 GB (2.50 GB with ``store: true``), where the chat route peaked at 55 MB
(bench/hostile_load.py shape 6). Past ``SPOOL_CHARS`` the text now goes to a temporary file and those
events are written out of it a piece at a time (conformance/protocols/spooled_text.py): the same 200 MiB
peaked at 60 MB, 7 MB over the proxy's size at rest (64 MB stored).

Here, in-process: the proxy and a raw upstream streaming ``MEGABYTES`` MiB of text (quotes, backslashes,
line ends, control characters and accents, so that escaping is cut across pieces), the peak of Python's
allocations in every thread (``tracemalloc``) while a client writes the stream to a file; then the
file's events. Measured on these 17.7 MB of text: 391 MB at the peak before, 8.1 MB after (7.2 MB
stored), where the chat route's own stream peaks at 5.9 MB.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import serve_proxy
from .rawserver import Record, chunk, chunk_payload, http_chunk, raw_server, read_request, sse_head

MEGABYTES = 16
PIECE = ('lorem "ipsum" \\ dolor\n\tsit\x01 amet, é ü ' * 2000)[:65536]
"""One upstream event's text: 64 Ki characters, some of them escaped in JSON, some not ASCII (Latin-1:
an emoji would make every string that holds it four bytes a character, the chat route's own counting
of the text included; test_spooled_text.py cuts emoji and surrogates across pieces)."""


def _long_upstream(megabytes: int) -> Any:
    """Every request: ``megabytes`` x 16 events of ``PIECE``, the same bytes again (the upstream holds
    one event), then the end."""
    event = http_chunk(chunk(PIECE))

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (request := await read_request(reader)) is not None:
            record.requests += 1
            writer.write(sse_head())
            for _ in range(megabytes * 16):
                writer.write(event)
                await writer.drain()
            writer.write(http_chunk(chunk("", "stop") + b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
            del request

    return handler


def _streamed_to(url: str, body: dict[str, Any], into: Path) -> int:
    """The stream's bytes written to ``into`` as they come: the client holds a read at a time."""
    with (
        into.open("wb") as file,
        httpx.stream("POST", url + "/v1/responses", json=body, timeout=120) as answer,
    ):
        assert answer.status_code == 200
        for data in answer.iter_raw(1 << 16):
            file.write(data)
    return into.stat().st_size


def streamed_with_peak(url: str, body: dict[str, Any], into: Path) -> tuple[int, int]:
    """``_streamed_to``'s size, and the peak of Python's allocations in every thread while it ran."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        size = _streamed_to(url, body, into)
        return size, tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def _events(path: Path) -> list[dict[str, Any]]:
    events = []
    for block in path.read_bytes().split(b"\n\n"):
        if block:
            head, _, data = block.partition(b"\ndata: ")
            event = json.loads(data)
            assert head == b"event: " + event["type"].encode()
            events.append(event)
    return events


@pytest.fixture
def long_proxy(request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    config = getattr(request, "param", {})
    with (
        raw_server(_long_upstream(MEGABYTES)) as (upstream, _),
        serve_proxy(upstream, upstream_kind="openai", **config) as (url, _app),
        tempfile.TemporaryDirectory(prefix="long-stream-") as directory,
    ):
        yield url, Path(directory)


@pytest.mark.parametrize(
    ("long_proxy", "store", "stored"),
    [
        ({}, False, False),
        ({}, True, True),
        ({"responses_store_max_bytes": 4 << 20}, True, False),  # the store's bound: less than the answer
    ],
    indirect=["long_proxy"],
    ids=["not-stored", "stored", "past-the-store-bound"],
)
def test_a_long_responses_stream_holds_a_piece_of_its_text_not_the_whole(
    long_proxy: tuple[str, Path], store: bool, stored: bool
) -> None:
    url, directory = long_proxy
    body = {"model": "m", "input": "go on", "stream": True, "store": store}
    _streamed_to(url, {**body, "store": False}, directory / "warm.sse")  # what a first request builds
    size, peak = streamed_with_peak(url, body, directory / "stream.sse")
    text_bytes = len(PIECE.encode()) * MEGABYTES * 16
    assert size > 5 * text_bytes  # the text five times: its deltas, three .done events, the Response
    # Held whole, the text cost 22 times itself (see the module's docstring); held in pieces, what the
    # chat route costs and a spool's in-memory part (SPOOL_CHARS: 1 MiB).
    assert peak < 16 * 1024 * 1024, f"{peak / 1e6:.1f} MB at the peak for {text_bytes / 1e6:.1f} MB of text"

    events = _events(directory / "stream.sse")
    text = PIECE * MEGABYTES * 16
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == text
    (done,) = [e for e in events if e["type"] == "response.output_text.done"]
    (part,) = [e for e in events if e["type"] == "response.content_part.done"]
    (item,) = [e for e in events if e["type"] == "response.output_item.done"]
    completed = events[-1]
    assert completed["type"] == "response.completed"
    assert done["text"] == part["part"]["text"] == item["item"]["content"][0]["text"] == text
    assert completed["response"]["output"] == [item["item"]]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    # Not asked, or past the store's bound: not stored, and the Response says so.
    assert completed["response"]["store"] is stored
    kept = httpx.get(url + f"/v1/responses/{completed['response']['id']}", timeout=30)
    if stored:
        assert kept.json() == completed["response"]
    else:
        assert kept.status_code == 404


CALLS = 24
ARGUMENTS = json.dumps({"a": ('é \\ ü"' * 3 + "x" * 80) * 8_800}, ensure_ascii=False)
"""One call's arguments: some 900,000 characters, under ``SPOOL_CHARS`` alone."""


async def _many_calls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """Every chat request: ``CALLS`` tool calls of ``ARGUMENTS`` each, in 60,000-character fragments."""
    while (request := await read_request(reader)) is not None:
        if not request.startswith(b"POST /v1/chat/completions"):
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            continue
        writer.write(sse_head())
        for index in range(CALLS):
            for start in range(0, len(ARGUMENTS), 60_000):
                function = {"arguments": ARGUMENTS[start : start + 60_000]}
                if not start:
                    function["name"] = "f"
                call = {"index": index, "id": f"call_{index}", "type": "function", "function": function}
                writer.write(
                    http_chunk(
                        b"data: " + json.dumps(chunk_payload({"tool_calls": [call]})).encode() + b"\n\n"
                    )
                )
                await writer.drain()
        writer.write(http_chunk(chunk("", "tool_calls") + b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


def test_many_items_each_under_the_spool_bound_hold_no_more_than_one_long_text() -> None:
    """The spool's bound counts the texts of one answer together: calls of 0.9 M characters, each under
    ``SPOOL_CHARS``, stayed in memory each and the answer's end was written whole: these 24 took the
    stream to a peak of 111 MB of Python's allocations (200 plainer ones, 634 MB). Past the bound held
    together they go to the answer's one file: 29-33 MB at the peak whatever their count (6 calls or 48),
    most of it the chat route's confirming parse of one call's arguments, which orjson reserves 13 times
    a long string's size for (call_shape.py)."""
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    body = {"model": "m", "input": "go on", "stream": True, "store": False, "tools": tools}
    with (
        raw_server(_many_calls) as (upstream, _),
        serve_proxy(upstream, upstream_kind="openai") as (url, _app),
        tempfile.TemporaryDirectory(prefix="long-stream-") as directory,
    ):
        _, peak = streamed_with_peak(url, body, Path(directory) / "stream.sse")
        events = _events(Path(directory) / "stream.sse")
    text_bytes = len(ARGUMENTS.encode()) * CALLS
    assert peak < 48 * 1024 * 1024, (
        f"{peak / 1e6:.1f} MB at the peak for {text_bytes / 1e6:.1f} MB of arguments"
    )
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [e["arguments"] for e in done] == [ARGUMENTS] * CALLS
    completed = events[-1]
    assert completed["type"] == "response.completed"
    assert [item["arguments"] for item in completed["response"]["output"]] == [ARGUMENTS] * CALLS
