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
choice's state reads the text (stop sequences, a held call, tool-text scanning that holds text or meets
a character a call written as text may begin with: ``ChoiceState.plain`` and ``relays``) or the stream
has ended, goes through the normalizer as before, byte for byte what it would send.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from conformance import jsoncodec
from conformance.sse import SSEParser

from .choices import ChoiceState
from .stream import StreamNormalizer

__all__ = ["PlainChunks"]

_NOT_PLAIN = b'"\\' + bytes(range(0x20))
"""What a JSON string's bytes hold where they are not its text: a quote, a backslash, a control character.
Found by deleting them (``bytes.translate``, 0.9 ns a byte): a regular expression's character class
took 8.5 ns a byte, 1.5 us of a relayed chunk's 5 (a 61 KB read of 350 events: 517 us against 56)."""


def _not_plain(data: bytes) -> int:
    """How many of ``data``'s bytes are ``_NOT_PLAIN``."""
    return len(data) - len(data.translate(None, _NOT_PLAIN))


Encode = Callable[[list[dict[str, Any]]], bytes]
_CONTENT_KEY = re.compile(rb'"content"\s*:\s*"$')
"""How the bytes before a chunk's content end: the slot is found by the content's value, and must be
the ``content`` key's (another key holding the same text, the content escaped otherwise, would not do)."""
_LAST_EVENTS = 3
"""How many of a read's last events may end its run of plain chunks: a finish, usage and [DONE]."""


class _Learned(NamedTuple):
    """What one event taught: the bytes around its content, in the upstream's event and in the
    proxy's line, and the repairs the normalizer counted for it."""

    event_head: bytes
    event_tail: bytes
    head: bytes
    tail: bytes
    repairs: tuple[str, ...]


class _Shape:
    """The learned shape of a plain chunk: the upstream's event and the proxy's line around the text.

    A run of events is read without a pattern compiled for it (Python compiled one in 0.8 ms, more than
    a short stream's relay saves), nor split at the bytes between two texts (``bytes.split`` prepares a
    long separator again for every piece: 327 us for a 61 KB read of 350 events): each event's text is
    cut out between the head's and the tail's lengths, and the run is of this shape when it is exactly
    the texts joined by them, none empty and none holding a byte a plain string cannot (0.57 us an
    event, against 1.3 split).
    """

    __slots__ = ("head", "joint", "line_head", "line_tail", "repairs", "same", "separator", "tail")

    def __init__(self, learned: _Learned) -> None:
        self.head = b"data: " + learned.event_head
        self.tail = learned.event_tail + b"\n\n"
        self.separator = self.tail + self.head
        self.line_head = b"data: " + learned.head
        self.line_tail = learned.tail + b"\n\n"
        self.joint = self.line_tail + self.line_head
        self.same = (self.line_head, self.line_tail) == (self.head, self.tail)  # the lines are the events
        self.repairs = learned.repairs

    def texts(self, run: bytes, events: list[bytes]) -> list[bytes] | None:
        """The texts of ``run`` (whole data events: ``events`` are its lines without their blank line)
        where each is a plain chunk of this shape."""
        head, tail = self.head, self.tail
        if len(events) == 1:  # a token stream's usual read
            if not run.startswith(head) or not run.endswith(tail):
                return None
            inner = run[len(head) : len(run) - len(tail)]
            return [inner] if inner and not _not_plain(inner) else None
        start, end = len(head), len(tail) - 2
        texts = [event[start : len(event) - end] for event in events]
        if b"" in texts or _not_plain(b"".join(texts)) or head + self.separator.join(texts) + tail != run:
            return None
        return texts


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
        self._candidate: _Learned | None = None

    def forget(self) -> None:
        """What was learned let go: the normalizer is given events past the relay (a read it did not
        take), after which a plain chunk is judged by two events again."""
        self._state = None
        self._candidate = None

    def lines(self, events: bytes) -> bytes:
        """What to send for ``events`` (``SSEParser.data_events``): all of them relayed where they are
        plain chunks of the learned shape (a token stream's usual read); else the plain run before a
        read's last events (the stream's end: its finish, usage and [DONE]) relayed and the rest one
        by one, each relayed if plain or through the normalizer, up to one that fails the stream (the
        rest is not the normalizer's to see, as ``feed`` would not)."""
        parts = events[:-2].split(b"\n\n")
        relayed = self._relayed(events, parts)
        if relayed is not None:
            return relayed
        if self._state is None:  # nothing learned yet (or no longer): each through the normalizer
            return self._each(parts)
        cut = len(events)
        for last in range(1, min(_LAST_EVENTS, len(parts) - 1) + 1):
            cut -= len(parts[-last]) + 2
            relayed = self._relayed(events[:cut], parts[:-last])
            if relayed is not None:
                return relayed + self._each(parts[-last:])
        return self._each(parts)

    def _each(self, events: list[bytes]) -> bytes:
        """The lines of ``events`` (each ``data: `` and its data) one by one."""
        out: list[bytes] = []
        normalizer = self._normalizer
        for event in events:
            line = self._relayed(event + b"\n\n", [event])
            out.append(self._normalized(event[6:]) if line is None else line)
            if normalizer.failure is not None:
                break
        return b"".join(out)

    def _relayed(self, run: bytes, events: list[bytes]) -> bytes | None:
        """The lines of ``run`` where its ``events`` (its lines) are all plain chunks of the learned
        shape, counted as the normalizer counts them; else None."""
        state, shape = self._state, self._shape
        if state is None or shape is None or (texts := shape.texts(run, events)) is None:
            return None
        if not state.relays(texts):
            return None
        if not run.isascii():
            try:
                run.decode()
            except UnicodeDecodeError:  # the parser reads it with U+FFFD: the normalizer's to judge
                return None
        state.count_plain(texts)
        repairs = self._normalizer.repairs
        for quirk in shape.repairs:
            repairs[quirk] += len(events)
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
            self._shape = _Shape(shape)
            self._state = state
        self._candidate = shape
        return encoded


def _shape(
    data: bytes, chunks: list[dict[str, Any]], encoded: bytes, repairs: tuple[str, ...]
) -> _Learned | None:
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
    if _not_plain(string[1:-1]):
        return None
    line = encoded[6:-2]
    at, sent_at = data.find(string), line.find(string)
    if at < 0 or sent_at < 0 or data.find(string, at + 1) >= 0 or line.find(string, sent_at + 1) >= 0:
        return None
    head = data[: at + 1]
    if _CONTENT_KEY.search(head) is None:
        return None
    end, sent_end = at + len(string) - 1, sent_at + len(string) - 1
    return _Learned(head, data[end:], line[: sent_at + 1], line[sent_end:], repairs)


def _added(before: dict[str, int], after: dict[str, int]) -> tuple[str, ...]:
    """The repairs counted between ``before`` and ``after``, one id per count."""
    added: list[str] = []
    for quirk, count in after.items():
        added += [quirk] * (count - before.get(quirk, 0))
    return tuple(sorted(added))
