"""Chunks that need no repair relayed by their bytes (proxy/normalizer/plain_chunks.py, issue 35): the data
lines a stream gets are byte for byte those of the normalizer's own path, with the same repairs counted,
the same usage and the same text kept, on every stream of the quirk corpus and on streams made to test
the relay's edges (non-ASCII, escapes, invalid UTF-8, repairs on every chunk, calls and reasoning between
plain chunks, events after [DONE]); each read whole, one event a read, and cut anywhere. And the relay
does engage: a long plain stream is not parsed chunk by chunk."""

from __future__ import annotations

import asyncio
import json
import random
import re
from types import SimpleNamespace
from typing import Any

import pytest

from conformance.api_errors import APIError
from conformance.probe import WEATHER
from conformance.protocols.front_end import CHUNKS
from conformance.replay import load_corpus
from conformance.request_info import RequestInfo
from conformance.sse import SSEParser
from proxy.adapters import OpenAIAdapter
from proxy.normalizer import Repairs, StreamNormalizer
from proxy.normalizer import choices as choices_module
from proxy.normalizer import identity as identity_module
from proxy.observability import Exchange
from proxy.sources.upstream import UpstreamSource
from proxy.writer import serve_source

from .conftest import completed
from .memory_upstream import HeldAnswer, HeldUpstream


@pytest.fixture(autouse=True)
def _fixed_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ids and ``created`` the proxy makes up where an upstream's are missing: the same in both runs,
    and an upstream's id served twice not taken for one reused (Q08) the second time."""
    monkeypatch.setattr(identity_module._RecentIds, "seen_before", lambda self, upstream_id: False)
    monkeypatch.setattr(choices_module, "new_tool_call_id", lambda: "call_fixed")
    monkeypatch.setattr(identity_module, "new_id", lambda endpoint: f"{endpoint}-fixed")
    monkeypatch.setattr(identity_module, "time", SimpleNamespace(time=lambda: 1_700_000_000.0))


def _served(request: dict[str, Any], reads: list[bytes], lines: bool) -> dict[str, Any]:
    """What the source gives for an upstream stream of ``reads``: its bytes as the client gets them
    (through ``next_lines``; or, the reference, through ``next_batch`` encoded as the writer encodes
    it, with every read given to the SSE parser's blocks, as before the relay), and its state."""
    if not lines:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(SSEParser, "data_events", lambda self, chunk: None)
            return _served_from(request, reads, lines)
    return _served_from(request, reads, lines)


def _served_from(request: dict[str, Any], reads: list[bytes], lines: bool) -> dict[str, Any]:
    upstream = HeldUpstream([HeldAnswer("text/event-stream", list(reads))])
    info = RequestInfo.from_body("chat", request)
    repairs = Repairs()
    source = UpstreamSource(
        upstream,  # type: ignore[arg-type]
        OpenAIAdapter(),
        info,
        OpenAIAdapter().call("chat", request),
        max_line_bytes=1 << 20,
        repairs=repairs,
        lines=lines,
    )

    async def drain() -> bytes:
        sent = CHUNKS.opening(await source.start())
        if lines:
            while (part := await source.next_lines(CHUNKS.events)) is not None:
                sent += part
        else:
            while (batch := await source.next_batch()) is not None:
                sent += CHUNKS.events(batch) if batch else b""
        return sent

    try:
        sent = asyncio.run(drain())
    except APIError as refused:
        return {"raised": (refused.status, refused.message)}
    normalizer = source.normalizer
    failure = source.failure
    return {
        "sent": sent,
        "failure": None if failure is None else (failure.status, failure.message),
        "repairs": dict(repairs),
        "usage": source.usage,
        "texts": normalizer.completion_texts(),
        "tokens": normalizer.completion_tokens(),
        "events": normalizer.completion_events(),
    }


def _splits(body: bytes) -> dict[str, list[bytes]]:
    """The ways a stream's bytes may come: whole, an event a read, and cut anywhere (seeded)."""
    events = [event for event in re.split(rb"(?<=\n\n)", body) if event]
    rng = random.Random(len(body))
    cuts, at = [], 0
    while at < len(body):
        step = rng.randint(1, 400)
        cuts.append(body[at : at + step])
        at += step
    # Each event cut between its two line ends: no read holds a whole event, every one goes to the
    # SSE parser's blocks, and what the relay learned must be let go.
    line_ends = [piece for event in events for piece in (event[:-1], event[-1:])]
    # A byte-order mark read apart from what follows it.
    first = [body[:1], body[1:2], body[2:]] if body.startswith(b"\xef\xbb\xbf") else [body]
    return {"whole": [body], "events": events, "cut": cuts, "line-ends": line_ends, "mark-apart": first}


def _assert_same(request: dict[str, Any], body: bytes) -> None:
    for how, reads in _splits(body).items():
        relayed, parsed = _served(request, reads, lines=True), _served(request, reads, lines=False)
        assert relayed == parsed, how


def _stream_transcripts() -> list[Any]:
    corpus = [
        t
        for t in load_corpus()
        if t.stream
        and t.request["path"].endswith("/chat/completions")
        and isinstance(t.request["body"], dict)
    ]
    assert corpus, "the corpus holds chat streams"
    return corpus + [completed(t) for t in corpus]


@pytest.mark.parametrize("transcript", _stream_transcripts(), ids=lambda t: t.name.rsplit("/", 1)[-1])
def test_every_corpus_stream_is_served_the_same_relayed_or_parsed(transcript: Any) -> None:
    request = dict(transcript.request["body"]) | {"stream": True}
    _assert_same(request, transcript.read_body())
    _assert_same(request | {"stream_options": {"include_usage": True}}, transcript.read_body())


def _event(delta: dict[str, Any] | None = None, **top: Any) -> bytes:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": None}
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 5,
        "model": "m",
        "choices": [choice],
    }
    chunk.update(top)
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


def _text(text: str, **top: Any) -> bytes:
    return _event({"content": text}, **top)


_ROLE = _event({"role": "assistant", "content": ""})
_STOP = _event().replace(b'"finish_reason": null', b'"finish_reason": "stop"')
_DONE = b"data: [DONE]\n\n"
_WORDS = [_text(f" word{i}") for i in range(40)]

_CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
_ESCAPED = b"".join(_text(t) for t in ["line\nend", 'a "quote"', "back\\slash", "tab\t", "\u0001"])
_ASCII_ESCAPED = _text(" \u00e9").replace("\u00e9".encode(), b"\\u00e9")
_ERROR = b'data: {"error": {"message": "boom", "code": 500}}\n\n'


_CALL_AS_TEXT = _text(' <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>')
"""A call written as text (Q79, Hermes): taken out where the request offered the tool."""
_CALL_IN_PIECES = b"".join(
    _text(piece)
    for piece in [" <", "tool", "_call", ">", '{"name": "get_weather", ', '"arguments": {}}', "</tool_call>"]
)


def _usage(i: int) -> dict[str, int]:
    return {"prompt_tokens": 1, "completion_tokens": i, "total_tokens": i + 1}


def _escaped_beside(text: str, beside: str) -> bytes:
    """A chunk whose content the upstream escaped needlessly (its first letter as ``\\u00XX``) after
    another key: where that key holds the same text plainly, the relay must not take its slot for the
    content's (a later chunk's key holds another text, the content the same)."""
    escaped = f"\\u{ord(text[0]):04x}{text[1:]}"
    chunk = _text(text).replace(f'"content": "{text}"'.encode(), f'"content": "{escaped}"'.encode())
    return chunk.replace(b"data: {", f'data: {{"x": "{beside}", '.encode(), 1)


def _words(words: list[bytes], old: bytes = b"", new: bytes = b"") -> bytes:
    return b"".join(w.replace(old, new) if old else w for w in words)


EDGES = {
    "plain": _ROLE + _words(_WORDS) + _STOP + _DONE,
    "non-ascii": _ROLE + b"".join(_text(f" m\u00f6t {i} \u4e2d\U0001f600") for i in range(20))
    + _STOP + _DONE,
    "escaped": _ROLE + _words(_WORDS[:5]) + _ESCAPED + _words(_WORDS[5:10]) + _ASCII_ESCAPED + _STOP + _DONE,
    "invalid-utf8": _ROLE + _words(_WORDS[:6]) + _text(" b\xffd").replace(b"\xc3\xbf", b"\xff")
    + _words(_WORDS[6:12]) + _STOP + _DONE,
    "repaired-each-chunk": _ROLE + _words(_WORDS, b', "finish_reason": null', b"") + _STOP + _DONE,
    "another-model": _ROLE + _words(_WORDS, b'"m"', b'"other"') + _STOP + _DONE,
    "extensions": _ROLE + b"".join(_text(f" t{i}", timings={"n": i % 2}) for i in range(30)) + _STOP + _DONE,
    "reasoning-and-calls-between": _ROLE + _words(_WORDS[:8]) + _event({"reasoning_content": " thinking"})
    + _words(_WORDS[8:16]) + _event({"tool_calls": [_CALL]}) + _words(_WORDS[16:24])
    + _STOP.replace(b'"stop"', b'"tool_calls"') + _DONE,
    "after-done": _ROLE + _words(_WORDS[:10]) + _STOP + _DONE + _words(_WORDS[10:20]),
    "no-done": _ROLE + _words(_WORDS) + _STOP,
    "cut-off": _ROLE + _words(_WORDS),
    "error-between": _ROLE + _words(_WORDS[:10]) + _ERROR + _words(_WORDS[10:]),
    "another-id": _ROLE + _words(_WORDS[:10]) + _words(_WORDS[10:], b"chatcmpl-1", b"chatcmpl-2")
    + _STOP + _DONE,
    "usage-each-chunk": _ROLE + b"".join(_text(f" u{i}", usage=_usage(i)) for i in range(1, 20))
    + _STOP + _DONE,
    "comments-and-crlf": _ROLE + _words(_WORDS[:10]) + b": ping\n\n" + _words(_WORDS[10:20], b"\n", b"\r\n")
    + _words(_WORDS[20:]) + _STOP + _DONE,
    "second-choice": _ROLE + _words(_WORDS[:10]) + _text(" other").replace(b'"index": 0', b'"index": 1')
    + _words(_WORDS[10:20]) + _STOP + _DONE,
    "byte-order-mark": b"\xef\xbb\xbf" + _ROLE + _words(_WORDS) + _STOP + _DONE,
    "same-text-beside-escaped-content": _ROLE + b"".join(_escaped_beside("hi", "hi") for i in range(4))
    + b"".join(_escaped_beside("hi", f"other{i}") for i in range(4, 12)) + _STOP + _DONE,
    "finish-then-plain": _ROLE + _words(_WORDS[:6]) + _STOP + _words(_WORDS[6:12]) + _DONE,
    "call-as-text-between": _ROLE + _words(_WORDS[:8]) + _CALL_AS_TEXT + _words(_WORDS[8:16]) + _STOP + _DONE,
    "call-as-text-in-pieces": _ROLE + _words(_WORDS[:8]) + _CALL_IN_PIECES + _words(_WORDS[8:16]) + _STOP
    + _DONE,
    "brackets-in-prose": _ROLE + _words(_WORDS[:8]) + _text(" a < b") + _words(_WORDS[8:12]) + _text(" [1]")
    + _words(_WORDS[12:20]) + _text(" [TOOL") + _words(_WORDS[20:28]) + _STOP + _DONE,
    "call-as-text-at-the-end": _ROLE + _words(_WORDS[:12]) + _CALL_AS_TEXT + _STOP + _DONE,
    # A control byte unescaped in a JSON string (not JSON: the normalizer's error), amid plain chunks.
    "raw-control-byte": _ROLE + _words(_WORDS[:8]) + _text(" t-b").replace(b"t-b", b"t\x01b")
    + _words(_WORDS[8:16]) + _STOP + _DONE,
    "raw-tab": _ROLE + _words(_WORDS[:8]) + _text(" t-b").replace(b"t-b", b"t\tb") + _words(_WORDS[8:16])
    + _STOP + _DONE,
}  # fmt: skip
"""Streams made for the relay's edges: each must be served as the normalizer's own path serves it."""


@pytest.mark.parametrize("tools", [False, True], ids=["no-tools", "tools"])
@pytest.mark.parametrize("stop", [None, ["word7"]], ids=["no-stop", "stop"])
@pytest.mark.parametrize("usage", [False, True], ids=["no-usage", "usage"])
@pytest.mark.parametrize("name", list(EDGES))
def test_an_edge_stream_is_served_the_same_relayed_or_parsed(
    name: str, usage: bool, stop: Any, tools: bool
) -> None:
    # With tools offered, the text is scanned for calls written in it (Q79): relayed only where the
    # scanner would pass it as it is.
    request: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    if usage:
        request["stream_options"] = {"include_usage": True}
    if stop:
        request["stop"] = stop
    if tools:
        request["tools"] = [WEATHER]
    _assert_same(request, EDGES[name])


def test_a_transport_failure_mid_stream_is_served_the_same_relayed_or_parsed() -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    broke = APIError.make("the upstream connection failed: ReadError", 502)
    reads: list[Any] = [_ROLE, *_WORDS[:10], broke, *_WORDS[10:]]
    relayed, parsed = _served(request, reads, lines=True), _served(request, reads, lines=False)
    assert relayed == parsed
    assert relayed["failure"] == (502, "the upstream connection failed: ReadError")


def test_a_failure_in_the_first_reads_rest_ends_the_stream_after_its_first_chunk() -> None:
    """The rest of a first read is held once a chunk exists, unless it holds [DONE] or an error object:
    an event that is not JSON there ends the stream after the first chunk (as from the next read);
    an upstream's error object in it is still answered with its status."""
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    served = _served(request, [_ROLE + _words(_WORDS[:3]) + b"data: {not json\n\n"], lines=True)
    assert served["failure"] == (502, "the upstream server sent an event that is not valid JSON")
    assert served["sent"].count(b"data: ") == 4  # the first chunk and the three words, then the error
    reported = _served(request, [_ROLE + _words(_WORDS[:3]) + _ERROR], lines=True)
    assert reported == {"raised": (500, "boom")}


@pytest.mark.parametrize("tools", [False, True], ids=["no-tools", "tools"])
def test_a_long_plain_stream_is_relayed_not_parsed_chunk_by_chunk(
    monkeypatch: pytest.MonkeyPatch, tools: bool
) -> None:
    fed: list[Any] = []
    feed = StreamNormalizer.feed
    monkeypatch.setattr(StreamNormalizer, "feed", lambda self, block: fed.append(block) or feed(self, block))
    words = _ROLE + b"".join(_WORDS[i % 40] for i in range(2000))
    request: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    if tools:  # an agent's request: its text is scanned for calls, and plain text still relayed
        request["tools"] = [WEATHER]
    reads = {
        "first-read-long": [words, _STOP + _DONE],
        "whole": [words + _STOP + _DONE],
        **_splits(words + _STOP + _DONE),
    }
    for how, split in reads.items():
        fed.clear()
        served = _served(request, split, lines=True)
        assert served["tokens"] == 2000
        assert served["failure"] is None
        if how == "line-ends":  # no read of whole events
            assert len(fed) == 2003, how
            continue
        # The role chunk, the two plain chunks the shape is learned from, the finish, [DONE]; and the
        # event cut by each read's end where reads are cut anywhere (it waits for the next read). An
        # answer read whole too (and "mark-apart": one read without a byte-order mark is the whole
        # answer): judged before its status through the relay (2003 were normalized).
        assert len(fed) <= 5 + (len(split) if how == "cut" else 0), how


def test_whole_data_events_are_taken_and_anything_else_left_to_the_parser() -> None:
    parser = SSEParser(max_line_bytes=1 << 10)
    assert parser.data_events(b"\xef\xbb") is None  # a byte-order mark's beginning: ``feed`` strips it
    assert [b.data for b in parser.feed(b"\xef\xbb\xbfdata: 1\n\n")] == ["1"]
    assert parser.data_events(b"data: 2\n\ndata: 3\n\ndata: 4") == b"data: 2\n\ndata: 3\n\n"
    assert parser.data_events(b"5\n") is None  # no blank line: the held "data: 4" waits for it
    assert parser.feed(b"5\n") == []
    assert parser.data_events(b"\ndata: 6\n\n") is None  # a block begun by ``feed`` is its to end
    assert [b.data for b in parser.feed(b"\ndata: 6\n\n")] == ["45", "6"]
    assert parser.data_events(b"data: 7\n\n") == b"data: 7\n\n"
    for other in [
        b"event: x\ndata: 7\n\n",
        b": ping\n\n",
        b"data: 8\r\n\r\n",
        b"data: 9\ndata: 10\n\n",
        b"\n\n",
    ]:
        assert parser.data_events(other) is None, other
    assert parser.data_events(b"data: " + b"x" * 2000 + b"\n\n") is None  # past the bound: feed's to refuse
    block = parser.block_of(b'{"a": "\xff"}')
    assert block.data == '{"a": "\ufffd"}'
    assert block.complete


@pytest.mark.parametrize("whole", [True, False], ids=["one-read", "a-read-an-event"])
def test_an_answer_read_whole_leaves_in_one_write_byte_for_byte_the_parsed_one(whole: bool) -> None:
    """An answer the upstream's one read holds whole is judged through the relay before its status, and
    its opening, the rest and the end go out in one write, as the floor relays it (issue 35: two writes
    more were about 7% of a short stream's CPU). Read an event at a time, it streams as before."""
    request: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    answer = _ROLE + _words(_WORDS[:16]) + _STOP + _DONE
    reads = [answer] if whole else [event for event in re.split(rb"(?<=\n\n)", answer) if event]
    source = UpstreamSource(
        HeldUpstream([HeldAnswer("text/event-stream", reads)]),  # type: ignore[arg-type]
        OpenAIAdapter(),
        RequestInfo.from_body("chat", request),
        OpenAIAdapter().call("chat", request),
        max_line_bytes=1 << 20,
        lines=True,
    )
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    exchange = Exchange(request_id="r", started=0.0)
    asyncio.run(serve_source(send, source, RequestInfo.from_body("chat", request), exchange, 30.0))
    bodies = [message for message in sent if message["type"] == "http.response.body"]
    assert (len(bodies) == 1) is whole
    assert not bodies[-1].get("more_body", False)
    parsed = _served(request, [answer], lines=False)["sent"]
    assert b"".join(message["body"] for message in bodies) == parsed + _DONE
