"""Content chunks that need no repair, relayed by their bytes: the stream's hot path (issue 35).

Most of a chat stream is chunks that differ only in a few characters of content: the same id,
``created``, model, index and nulls each time. Parsed, repaired and encoded again one by one they cost
the proxy 10-19 us of CPU each, against 1.4 us for a server that relays the bytes (bench/RESULTS.md,
issue 35's profile: JSON decoding 29%, the SSE parser 23%, the repairs 25% of the proxy's busy time).

``PlainChunks`` learns the shape of such a chunk from the normalizer itself: an event the normalizer
turned into a chunk of content alone, with the content found once in the upstream's bytes and once in
the data line the proxy sent, splits both into a head and a tail around the content. Two events in a
row giving the same heads, tails and repairs make the shape learned; from then on an event whose bytes
are that head, a plain JSON string (no quote, backslash or control character: its text is its bytes)
and that tail goes out as the proxy's head, the same bytes and the proxy's tail, counted as the
normalizer would count it and with the repairs it would make. Anything else, and every event while the
choice's state reads the text (stop sequences, tool-text scanning, a held call: ``ChoiceState.plain``)
or the stream has ended, goes through the normalizer as before, byte for byte what it would send.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from conformance import jsoncodec
from conformance.sse import SSEParser

from .choices import ChoiceState
from .stream import StreamNormalizer

__all__ = ["PlainChunks"]

_NOT_PLAIN = re.compile(rb'["\\\x00-\x1f]')
"""What a JSON string's bytes hold where they are not its text."""
_TEXT = rb'([^"\\\x00-\x1f]+)'
"""A JSON string's bytes that are its text, as a pattern."""

Encode = Callable[[list[dict[str, Any]]], bytes]


class _Shape:
    """The learned shape of a plain chunk: the upstream's events and the proxy's lines of it."""

    __slots__ = ("event", "events", "joint", "line_head", "line_tail", "repairs", "same")

    def __init__(
        self, event_head: bytes, event_tail: bytes, head: bytes, tail: bytes, repairs: tuple[str, ...]
    ):
        one = re.escape(b"data: " + event_head) + _TEXT + re.escape(event_tail + b"\n\n")
        self.event = re.compile(one)
        self.events = re.compile(b"(?:" + one + b")+")
        self.line_head = b"data: " + head
        self.line_tail = tail + b"\n\n"
        self.joint = self.line_tail + self.line_head
        self.same = (event_head, event_tail) == (head, tail)  # the lines are the events as they came
        self.repairs = repairs


class PlainChunks:
    """The data lines of one stream's events, the plain ones relayed by their bytes (see the module)."""

    __slots__ = ("_candidate", "_normalizer", "_parser", "_shape", "_state", "encode")

    def __init__(self, normalizer: StreamNormalizer, parser: SSEParser, encode: Encode) -> None:
        self._normalizer = normalizer
        self._parser = parser
        self.encode = encode
        """How the stream's chunks are written as data lines (``DataLines.events``)."""
        self._state: ChoiceState | None = None  # set while the learned shape may be used
        self._shape: _Shape | None = None
        self._candidate: tuple[bytes, bytes, bytes, bytes, tuple[str, ...]] | None = None

    def lines(self, events: bytes) -> bytes:
        """What to send for ``events`` (``SSEParser.data_events``): runs of plain ones as the proxy's
        lines of their texts, each other one through the normalizer. Stops after an event that ends
        the stream or fails it (the rest is not the normalizer's to see, as ``feed`` would not)."""
        out: list[bytes] = []
        start, end = 0, len(events)
        normalizer = self._normalizer
        while start < end:
            state, shape = self._state, self._shape
            if state is not None and shape is not None and (run := shape.events.match(events, start)):
                out.append(self._relayed(run.group(), state, shape))
                start = run.end()
                continue
            stop = events.index(b"\n\n", start)
            out.append(self._normalized(events[start + 6 : stop]))
            start = stop + 2
            if normalizer.failure is not None:
                break
        return b"".join(out)

    def _relayed(self, run: bytes, state: ChoiceState, shape: _Shape) -> bytes:
        texts = shape.event.findall(run)
        if not run.isascii():
            try:
                run.decode()
            except UnicodeDecodeError:  # the parser would read it with U+FFFD: each the normalizer's
                return b"".join([self._normalized(data) for data in _datas(run)])
        state.count_plain(texts)
        repairs = self._normalizer.repairs
        for quirk in shape.repairs:
            repairs[quirk] += len(texts)
        if shape.same:
            return run
        return shape.line_head + shape.joint.join(texts) + shape.line_tail

    def _normalized(self, data: bytes) -> bytes:
        """The event through the normalizer, and what it teaches of the stream's plain chunks."""
        normalizer = self._normalizer
        before = dict(normalizer.repairs)
        chunks = normalizer.feed(self._parser.block_of(data))
        encoded = self.encode(chunks) if chunks else b""
        self._state = None
        state = normalizer.plain_choice()
        if state is None:
            self._candidate = None
            return encoded
        shape = _shape(data, chunks, encoded, _added(before, normalizer.repairs))
        if shape is not None and shape == self._candidate:
            self._shape = _Shape(*shape)
            self._state = state
        self._candidate = shape
        return encoded


def _datas(run: bytes) -> list[bytes]:
    """The data of each event of ``run`` (``data: `` lines, each ended by a blank line)."""
    return [event[6:] for event in run[:-2].split(b"\n\n")]


def _shape(
    data: bytes, chunks: list[dict[str, Any]], encoded: bytes, repairs: tuple[str, ...]
) -> tuple[bytes, bytes, bytes, bytes, tuple[str, ...]] | None:
    """The heads and tails around the content of an event the normalizer made one chunk of content
    alone of (in the upstream's data, and in the line the proxy sent without its ``data: `` and blank
    line), and its repairs; None for any other event, or where the content is not found once."""
    if len(chunks) != 1 or "usage" in chunks[0] or len(choices := chunks[0]["choices"]) != 1:
        return None
    choice = choices[0]
    delta = choice["delta"]
    text = delta.get("content")
    if len(delta) != 1 or not isinstance(text, str) or not text or choice["logprobs"] is not None:
        return None
    string = jsoncodec.dumps(text)
    if _NOT_PLAIN.search(string, 1, len(string) - 1) is not None:
        return None
    line = encoded[6:-2]
    at, sent_at = data.find(string), line.find(string)
    if at < 0 or sent_at < 0 or data.find(string, at + 1) >= 0 or line.find(string, sent_at + 1) >= 0:
        return None
    end, sent_end = at + len(string) - 1, sent_at + len(string) - 1
    return data[: at + 1], data[end:], line[: sent_at + 1], line[sent_end:], repairs


def _added(before: dict[str, int], after: dict[str, int]) -> tuple[str, ...]:
    """The repairs counted between ``before`` and ``after``, one id per count."""
    added: list[str] = []
    for quirk, count in after.items():
        added += [quirk] * (count - before.get(quirk, 0))
    return tuple(sorted(added))
