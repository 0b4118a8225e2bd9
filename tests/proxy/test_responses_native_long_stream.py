"""Issue 32: an upstream's own ``/v1/responses`` stream (``--responses native``) of any length holds a
bounded piece of its text, not the whole of it.

The native route kept each open message's text deltas in a list, for the events that end a stream which
broke off (``NativeEvents.fail``: the item's ``.done`` events and ``response.failed``, each with the whole
text), and wrote those events whole. An upstream line past the proxy's 4 MiB bound on one (an event that
repeats a long text: ``response.output_text.done``) breaks the stream off there, so a long answer always
took that path: 32 MiB of upstream text took a ``conformant serve`` from 51 MB to a peak RSS of 412 MB
(bench/hostile_load.py shape 6, native). The text now goes to a spool (protocols/spooled_text.py) and
those events are written out of it a piece at a time: 61 MB at the peak.

Here, in-process: the proxy and a raw upstream streaming ``MEGABYTES`` MiB of deltas, then the
``.done`` event with the whole text, written a piece at a time as well; the peak of Python's allocations
in every thread (``tracemalloc``) while a client writes the stream to a file; then the file's events.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from conformance.protocols import spooled_text
from conformance.protocols.responses.native import NativeEvents

from .conftest import run_proxy
from .rawserver import Record, http_chunk, raw_server, read_request, sse_head
from .test_responses_long_stream import PIECE, _events, _streamed_to, streamed_with_peak

MEGABYTES = 16
WHERE = {"item_id": "msg_1", "output_index": 0, "content_index": 0}


def _event(kind: str, **fields: Any) -> bytes:
    return http_chunk(b"data: " + json.dumps({"type": kind, **fields}).encode() + b"\n\n")


async def _long_native(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """Every request: the opening events, ``MEGABYTES`` x 16 deltas of ``PIECE``, and then the
    ``.done`` event with their whole text, a piece at a time (the upstream holds one piece)."""
    while await read_request(reader) is not None:
        record.requests += 1
        response = {"id": "resp_u", "object": "response", "status": "in_progress", "model": "m", "output": []}
        item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}
        part = {"type": "output_text", "text": "", "annotations": []}
        writer.write(sse_head() + _event("response.created", response=response))
        writer.write(_event("response.output_item.added", output_index=0, item=item))
        writer.write(_event("response.content_part.added", part=part, **WHERE))
        delta = _event("response.output_text.delta", delta=PIECE, **WHERE)
        for _ in range(MEGABYTES * 16):
            writer.write(delta)
            await writer.drain()
        head = json.dumps({"type": "response.output_text.done", **WHERE})[:-1] + ', "text": "'
        writer.write(http_chunk(b"data: " + head.encode()))
        escaped = http_chunk(json.dumps(PIECE)[1:-1].encode())
        for _ in range(MEGABYTES * 16):
            writer.write(escaped)
            await writer.drain()
        writer.write(http_chunk(b'"}\n\n') + b"0\r\n\r\n")
        await writer.drain()


@pytest.mark.parametrize("store", [False, True], ids=["not-stored", "stored"])
def test_a_long_native_stream_holds_a_piece_of_its_text_and_fails_at_the_line_bound(store: bool) -> None:
    body = {"model": "m", "input": "go on", "stream": True, "store": store}
    with (
        raw_server(_long_native) as (upstream, _),
        run_proxy(upstream, responses="native") as url,
        tempfile.TemporaryDirectory(prefix="native-long-stream-") as directory,
    ):
        _streamed_to(url, {**body, "store": False}, Path(directory) / "warm.sse")
        _, peak = streamed_with_peak(url, body, Path(directory) / "stream.sse")
        events = _events(Path(directory) / "stream.sse")
    text_bytes = len(PIECE.encode()) * MEGABYTES * 16
    # Held as deltas and written whole, the text cost several times itself; spooled, a spool's
    # in-memory part (SPOOL_CHARS: 1 MiB), the upstream line's bound (4 MiB) and what the chat route costs.
    assert peak < 16 * 1024 * 1024, f"{peak / 1e6:.1f} MB at the peak for {text_bytes / 1e6:.1f} MB of text"

    text = PIECE * MEGABYTES * 16
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == text
    # The upstream's .done line passed the bound: the stream ends there, its item incomplete with every
    # delta's text, and the failure says why.
    (done,) = [e for e in events if e["type"] == "response.output_text.done"]
    (item,) = [e for e in events if e["type"] == "response.output_item.done"]
    failed = events[-1]
    assert failed["type"] == "response.failed"
    assert "size limit" in failed["response"]["error"]["message"]
    assert done["text"] == item["item"]["content"][0]["text"] == text
    assert item["item"]["status"] == "incomplete"
    assert failed["response"]["output"] == [item["item"]]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_only_open_messages_texts_are_kept_and_a_closed_ones_file_goes() -> None:
    """``NativeEvents`` keeps a text only for ``fail``, which ends the messages still open: deltas of an
    item never opened were held all the same (100,000 made-up ids: 43 MB, issue 32's review), and a
    long message's text stayed in the answer's file after its own ``.done`` event had it (20 messages
    of 1 Mi characters: 21 MB on disk nobody reads)."""
    events = NativeEvents({"model": "m"}, "m")
    for i in range(1_000):
        events.feed({"type": "response.output_text.delta", "item_id": f"made_up_{i}", "delta": "x" * 100})
    assert events._texts == {}
    long_text = "é" * (spooled_text.SPOOL_CHARS + 10)
    for i in range(3):
        item = {
            "type": "message",
            "id": f"msg_{i}",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        events.feed({"type": "response.output_item.added", "output_index": i, "item": item})
        events.feed({"type": "response.output_text.delta", "item_id": f"msg_{i}", "delta": long_text})
        files = [spool._shared for spool in events._texts.values()]
        assert [spool.spilled for spool in events._texts.values()] == [True]
        events.feed(
            {"type": "response.output_item.done", "output_index": i, "item": {**item, "status": "completed"}}
        )
        assert events._texts == {}
        assert events._spool_file is not files[0]  # the file of texts no one reads goes with them
