"""The parts of a long Responses stream that the proxy no longer holds whole (issue 32, item 3; the stream
itself: test_responses_long_stream.py): a text spooled to a file and written back as JSON, byte for
byte what the text held whole makes; the events of spooled items; the store's blob; an upstream key cut
between two pieces still redacted; the WebSocket mode's relay of an event that comes in pieces.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from conformance import jsoncodec
from conformance.api_errors import REDACTED
from conformance.protocols import spooled_text
from conformance.protocols.front_end import Pieces, pieces_of
from conformance.protocols.responses import events as events_module
from conformance.protocols.responses.output import ResponsesOutput
from conformance.protocols.responses.store import ResponseStore
from conformance.protocols.responses.translation import translate_request
from conformance.protocols.spooled_text import SpooledJSON, SpoolFile, TextSpool
from proxy.writer import redacting

# -- the spool and its JSON, in pieces ----------------------------------------------------------------


def test_spooled_json_is_byte_for_byte_what_jsoncodec_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut anywhere (pieces of 7 bytes), with escapes, astral characters, lone surrogates (which make
    jsoncodec write with ``json``, ASCII-escaped) and an integer past 64 bits (the same, from the rest of
    the value): the same bytes as the value written whole."""
    monkeypatch.setattr(spooled_text, "READ_BYTES", 7)
    alphabet = [
        "a",
        '"',
        "\\",
        "\n",
        "\x00",
        "\x1f",
        "\x7f",
        "é",
        "😀",
        "\u2028",
        "/",
        " ",
        "\ud800",  # lone surrogates last: left out of two trials in three
        "\udc00",
    ]
    chooser = random.Random(32)
    for trial in range(300):
        chars = alphabet if trial % 3 == 0 else alphabet[:-2]
        spools: dict[str, TextSpool] = {}
        texts = []
        for _ in range(chooser.randint(1, 3)):
            spool = TextSpool(limit=5)
            text = ""
            while not spool.spilled or chooser.random() < 0.7:
                part = "".join(chooser.choice(chars) for _ in range(chooser.randint(0, 9)))
                spool.append(part)
                text += part
            spool.finish()
            assert spool.text() == text
            spools[spool.token] = spool
            texts.append(text)
        tokens = list(spools)
        number = 2**70 if trial % 5 == 0 else 1
        value = {"a": [tokens[0], {"t": tokens[-1]}], "n": number, "b": tokens}
        whole = {"a": [texts[0], {"t": texts[-1]}], "n": number, "b": texts}
        spooled = SpooledJSON(value, spools)
        assert b"".join(spooled.pieces()) == jsoncodec.dumps(whole)
        assert spooled.size() == len(jsoncodec.dumps(whole))


def test_a_short_text_stays_in_memory_and_costs_no_file() -> None:
    spool = TextSpool()
    spool.append("Hello")
    spool.finish()
    assert not spool.spilled
    assert spool.text() == "Hello"


def _answer_chunks() -> list[dict[str, Any]]:
    """A chat stream: reasoning, text, a function call and a custom tool's call, then usage."""

    def delta(**fields: Any) -> dict[str, Any]:
        return {"model": "m", "choices": [{"index": 0, "delta": fields, "finish_reason": None}]}

    def call(index: int, name: str | None, arguments: str) -> dict[str, Any]:
        fragment: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
        if name is not None:
            fragment.update(id=f"call_{index}", function={"name": name, "arguments": arguments})
        return delta(tool_calls=[fragment])

    chunks = [delta(reasoning_content=f'thinking "{i}" \\ é\n') for i in range(40)]
    chunks += [delta(content=f"said {i} 😀 \t") for i in range(40)]
    chunks += (
        [call(0, "lookup", '{"q": "')]
        + [call(0, None, f"a{i}\\n ") for i in range(40)]
        + [call(0, None, '"}')]
    )
    chunks += [call(1, "apply_patch", '{"input": "')] + [call(1, None, f"line {i}\\n") for i in range(40)]
    chunks += [call(1, None, '"}')]
    chunks.append({"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    chunks.append({"model": "m", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}})
    return chunks


def _written(spool_chars: int, monkeypatch: pytest.MonkeyPatch, store: ResponseStore | None) -> bytes:
    """The stream of ``_answer_chunks`` as the client gets it, with texts spooled past ``spool_chars``."""
    counter = iter(range(1000))
    monkeypatch.setattr(spooled_text, "SPOOL_CHARS", spool_chars)
    monkeypatch.setattr(spooled_text, "READ_BYTES", 5)
    monkeypatch.setattr(events_module, "new_item_id", lambda prefix: f"{prefix}_{next(counter)}")
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0)
    request = {
        "model": "m",
        "input": "hi",
        "stream": True,
        "store": store is not None,
        "tools": [{"type": "function", "name": "lookup"}, {"type": "custom", "name": "apply_patch"}],
    }
    output = ResponsesOutput(translate_request(request), "m", store, [])
    output._events.response_id = "resp_1"
    chunks = _answer_chunks()
    parts: list[bytes | Pieces] = [output.opening(chunks[:1])]
    parts += [output.events([each]) for each in chunks[1:]]
    parts.append(asyncio.run(output.tail(None, None)))
    return b"".join(piece for part in parts for piece in pieces_of(part))


def test_spooled_items_are_written_as_the_same_bytes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Reasoning, a message and a function call's arguments spooled (8 characters in memory), a custom
    tool's input read back: the client's bytes are those of the texts held whole; stored, the same
    Response."""
    held = _written(1 << 20, monkeypatch, None)
    spooled = _written(8, monkeypatch, None)
    assert spooled == held
    store = ResponseStore(tmp_path / "responses.sqlite3", max_bytes=1 << 20, max_age=3600)
    stored_stream = _written(8, monkeypatch, store)
    final = json.loads(stored_stream.rsplit(b"\ndata: ", 1)[1])["response"]
    assert final["store"] is True
    assert [item["type"] for item in final["output"]] == [
        "reasoning",
        "message",
        "function_call",
        "custom_tool_call",
    ]
    loaded = asyncio.run(store.load("resp_1"))
    assert loaded is not None
    assert loaded.response == final
    asyncio.run(store.aclose())


def test_a_spooled_response_past_the_stores_bound_is_not_stored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = ResponseStore(tmp_path / "responses.sqlite3", max_bytes=2000, max_age=3600)
    stream = _written(8, monkeypatch, store)
    final = json.loads(stream.rsplit(b"\ndata: ", 1)[1])["response"]
    assert final["store"] is False
    assert asyncio.run(store.load("resp_1")) is None
    asyncio.run(store.aclose())


def test_a_file_from_before_spooled_responses_gets_the_column_last(tmp_path: Path) -> None:
    """SQLite builds a row whose zeroblob is not its last field whole in memory: the blob's column is
    the last, added so to a file of the earlier table."""
    path = tmp_path / "responses.sqlite3"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE responses (id TEXT PRIMARY KEY, stored_at REAL NOT NULL, size INTEGER NOT NULL, "
        "response TEXT NOT NULL, input TEXT NOT NULL, owner TEXT NOT NULL DEFAULT '');"
    )
    old.close()
    store = ResponseStore(path, max_bytes=1 << 20, max_age=3600)
    spool = TextSpool(limit=4)
    spool.append("a long 'text' é")
    spool.finish()
    response = {"id": "resp_2", "object": "response", "store": True, "output": [spool.token]}
    assert asyncio.run(store.save(SpooledJSON(response, {spool.token: spool}), [{"role": "user"}]))
    loaded = asyncio.run(store.load("resp_2"))
    assert loaded is not None
    assert loaded.response["output"] == ["a long 'text' é"]
    asyncio.run(store.aclose())
    columns = [row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(responses)")]
    assert columns[-1] == "spooled"


# -- what carries the pieces -------------------------------------------------------------------------


def test_a_key_cut_between_pieces_is_still_redacted() -> None:
    """A long event goes out in pieces: an upstream key cut between two is held back and redacted;
    whole events go out as they came."""
    key = "sk-upstream-key-0123456789abcdef"
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def run() -> None:
        send_redacted = redacting(send, key)
        whole = {"type": "http.response.body", "body": b'event: x\ndata: {"a":1}\n\n', "more_body": True}
        await send_redacted(whole)
        assert sent[-1] is whole
        text = b"before " + key.encode() + b" after"
        for cut in (text[:12], text[12:20], text[20:]):
            await send_redacted({"type": "http.response.body", "body": cut, "more_body": True})
        await send_redacted({"type": "http.response.body", "body": b""})

    asyncio.run(run())
    body = b"".join(message["body"] for message in sent)
    assert body == b'event: x\ndata: {"a":1}\n\n' + b"before " + REDACTED.encode() + b" after"


def test_the_websocket_relay_takes_an_event_that_comes_in_pieces() -> None:
    """A turn's long event comes in pieces, one of them cut between its two line ends: one message,
    once whole (kept in a list meanwhile, not copied again at each piece)."""
    from conformance.protocols.responses.websocket import _Relay

    sent: list[str] = []

    async def send_text(text: str) -> None:
        sent.append(text)

    delta = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"a"}\n\n'
    data = b'{"type":"response.completed","response":{"id":"resp_1","status":"completed","output":["'
    data += b"x" * 50 + b'"]}}'
    completed = b"event: response.completed\ndata: " + data + b"\n\n"
    relay = _Relay(send_text)

    async def run() -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await relay({"type": "http.response.start", "status": 200, "headers": headers})
        await relay({"type": "http.response.body", "body": delta + completed[:20], "more_body": True})
        for piece in (completed[20:40], completed[40:-1], completed[-1:]):
            await relay({"type": "http.response.body", "body": piece, "more_body": True})
        await relay({"type": "http.response.body", "body": b""})

    asyncio.run(run())
    assert sent == [delta.split(b"data: ")[1].strip().decode(), data.decode()]
    assert relay.final is not None
    assert relay.final["output"] == ["x" * 50]


def test_placeholders_are_found_in_one_scan_however_many_spools_an_answer_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past an answer's bound every new text is a spool, so an answer of 9,000 small calls had some
    3,800, and each whole-text event searched its JSON once per spool of the answer: 10 s of CPU for its
    events, and 8.9 s at once for its Response (issue 32's review). Now one scan finds the placeholders
    there are, whatever the answer holds besides; a placeholder-like text of no spool stays text."""
    spools = {}
    shared = SpoolFile()  # (one file for them all, as an answer's)
    for i in range(2_000):
        spool = TextSpool(limit=1, file=shared)
        spool.append(f"call {i} é")
        spool.finish()
        spools[spool.token] = spool
    tokens = list(spools)
    stranger = TextSpool(limit=1)  # spilled, but not among the answer's spools
    stranger.append("not here")
    stranger.finish()
    value = {"output": [tokens[7], {"arguments": tokens[1_500]}, stranger.token], "n": 1}
    dumped = []
    real_dumps = spooled_text.orjson.dumps

    def counted(obj: Any, *args: Any) -> bytes:
        dumped.append(obj)
        return real_dumps(obj, *args)

    monkeypatch.setattr(spooled_text.orjson, "dumps", counted)
    written = SpooledJSON(value, spools).whole()
    monkeypatch.undo()
    expected = {"output": ["call 7 é", {"arguments": "call 1500 é"}, stranger.token], "n": 1}
    assert json.loads(written) == expected
    assert len(dumped) < 10  # the value, and a piece of each text found: not a search per spool
