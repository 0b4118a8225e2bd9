"""Long texts kept in a temporary file rather than in memory, and JSON written with them in place, a
piece at a time: what keeps a Responses stream of any length from holding its whole output.

The Responses API repeats an item's whole text in the events that end it (``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``) and again in the terminal event's Response.
The stream held every delta as a string, joined them, and wrote each of those events as one JSON text
(and, with ``store: true``, the Response once more for the store): 200 MiB of upstream text took the
proxy from 51 MB to a peak RSS of 2,276 MB, 2,503 MB with ``store: true``, where the chat route peaked at
54.5 MB (bench/hostile_load.py shape 6, issue 32); spooled, 60 MB (64 MB stored).

A :class:`TextSpool` holds its text in memory, as a list of the deltas, while the texts of its answer
hold ``SPOOL_CHARS`` characters together, so a usual answer costs what it cost; past them the text that
grows goes to the answer's one unnamed temporary file (a :class:`SpoolFile`, in ``TMPDIR``) and the
events carry a placeholder (``TextSpool.token``) where the text goes. :class:`SpooledJSON` writes such
a value exactly as ``jsoncodec.dumps`` writes it with the texts in place, byte for byte (orjson, or the
standard library's encoder, ASCII-escaped, where a text holds a lone surrogate or the value something else
orjson refuses), with each text escaped a piece of ``READ_BYTES`` at a time out of its file: JSON escapes a
string character by character, so the pieces' escapes joined are the whole text's.

A file that cannot be made (no writable temporary directory: ``tempfile`` tries ``TMPDIR``, then
``/tmp`` and the like) or that stops taking bytes (a full disk: a short write, then ``ENOSPC``) fails
the spool for good (``TextSpool.failure``, a message for the client with no path in it): what it held
is let go, and its text reads as empty, never as the part of it the file took, which a client would
take for the whole. Before, the
``OSError`` left the stream's events: "internal error in the proxy" for a missing directory, and for a
failed write the held text kept to be written again after what of it had gone, the stream's end
raising on it once more (issue 32, hardening). The stream's events (responses/events.py) now end the
item as ``incomplete`` and the Response as ``failed`` with that message; ``temporary_file_problem`` is
``conformant serve``'s start-up check of the same.
"""

from __future__ import annotations

import codecs
import errno
import json
import logging
import os
import secrets
import tempfile
import weakref
from collections.abc import Iterator, Mapping
from typing import IO, Any

import orjson

__all__ = [
    "FLUSH_CHARS",
    "READ_BYTES",
    "SPOOL_CHARS",
    "SpoolFile",
    "SpoolUnreadable",
    "SpooledJSON",
    "TextSpool",
    "temporary_file_problem",
]

SPOOL_CHARS = 1 << 20
"""Characters the texts of one answer hold in memory together before the one that grows goes to the
answer's file: more than nearly every answer (a 1 MiB answer is some 250,000 tokens), so the file is
the exception; at most 4 MiB held per answer, plus ``FLUSH_CHARS`` of the text being written."""

FLUSH_CHARS = 1 << 16
"""Characters joined, encoded and written to the file at a time, once the text is there."""

READ_BYTES = 1 << 16
"""Bytes of a spooled text read, escaped and sent at a time: orjson reserves some 20 bytes per
character for its output before it shrinks it (a 1 MiB piece of text with an emoji in it cost 18 MB
for a moment), so pieces are the size of a large delta, not of the text."""

_TOKEN_PREFIX = "\x00conformant-spool-"
"""A placeholder's start: a NUL and a random part make it no text an upstream sends by chance."""
_QUOTED_PREFIX = orjson.dumps(_TOKEN_PREFIX)[:-1]
"""A placeholder's start as JSON, its opening quote included: both encoders write the NUL ``\\u0000``."""
_QUOTED_NUL = len(b'"\\u0000')
"""Bytes of the opening quote and NUL of a placeholder as JSON, and so of its closing NUL and quote."""
_QUOTED_END = b'\\u0000"'
_QUOTED_LENGTH = len(_QUOTED_PREFIX) + 32 + len(_QUOTED_END)
"""Bytes of a placeholder as JSON: its start, 32 hex digits, the closing NUL and quote."""


class SpoolUnreadable(RuntimeError):
    """A spooled text's file did not give back what was written (a disk gone bad): the event under way
    cannot be finished. Not an ``OSError``, which a response's writer takes for its client gone: a
    read failing inside a stream's last events was logged as a client that left (issue 32's review)."""


class SpoolFile:
    """The temporary file that the long texts of one answer share, made when the first of them goes
    there, and the characters that its texts hold in memory together (``held``).

    One file for all of them, not one each: an answer of many items (a hostile upstream's thousands of
    tool calls) would otherwise hold as many open files, a process's whole allowance. And one count for
    all of them: each text under ``SPOOL_CHARS`` stayed in memory, so 40 calls of 0.9 MB of arguments
    (36 MB) took a Responses stream to a peak of 145 MB of Python's allocations, and the answer's end was
    written whole; past ``limit`` characters held together, the text that grows goes to the file. The
    file is closed when the answer's objects go."""

    __slots__ = ("__weakref__", "_closer", "_file", "_size", "held", "limit")

    def __init__(self, limit: int | None = None) -> None:
        self._file: IO[bytes] | None = None
        self._closer: weakref.finalize[Any, Any] | None = None
        self._size = 0
        self.held = 0
        """Characters the texts of this file hold in memory, spilled or not."""
        self.limit = SPOOL_CHARS if limit is None else limit

    def append(self, data: bytes) -> int:
        """``data`` written at the file's end, whole, or an ``OSError``; the offset it starts at."""
        if self._file is None:
            # Unbuffered: each write is checked whole, none left in a buffer to fail later or be written
            # twice; closed by a finalizer, since no ``with`` spans a stream.
            self._file = _temporary_file()
            self._closer = weakref.finalize(self, self._file.close)
        start = self._size
        descriptor, view, at = self._file.fileno(), memoryview(data), start
        while view:  # a short write (a disk filling up) goes on from where it stopped, or fails
            count = os.pwrite(descriptor, view, at)
            if count <= 0:  # took nothing and said nothing: for all it tells, the disk is full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view, at = view[count:], at + count
        self._size = at  # only once written whole: a failed write's bytes are written over by the next
        return start

    def read(self, offset: int, size: int) -> bytes:
        """At most ``size`` bytes at ``offset``: read at an offset, so that two readers (the store's
        thread, the stream) do not meet."""
        assert self._file is not None, "only a written file is read"
        return os.pread(self._file.fileno(), size, offset)


class TextSpool:
    """One growing text (an item's answer, a call's arguments): ``append`` each delta, ``finish`` at its
    end; then ``spilled`` says whether it went to its ``SpoolFile`` (the answer's, or one of its own),
    ``text()`` gives it whole and ``pieces()`` a piece at a time."""

    __slots__ = (
        "_extents",
        "_held",
        "_limit",
        "_parts",
        "_shared",
        "failure",
        "surrogates",
        "token",
    )

    def __init__(self, limit: int | None = None, file: SpoolFile | None = None) -> None:
        self._parts: list[str] = []
        self._held = 0
        self._limit = SPOOL_CHARS if limit is None else limit
        self._shared = SpoolFile(limit) if file is None else file
        self._extents: list[list[int]] = []
        """Where the text is in the file: [offset, bytes] of each stretch, in order."""
        self.token = ""
        """The placeholder that stands for the text in JSON values (``SpooledJSON``), once spilled."""
        self.surrogates = False
        """Whether the text holds a lone surrogate: JSON then comes from the standard library's encoder,
        as ``jsoncodec.dumps`` writes it (orjson refuses one)."""
        self.failure: str | None = None
        """Why the text could not be kept (no temporary file, a full disk), worded for the client; None
        while it is whole. A failed spool takes no more text, and its text reads as empty."""

    def append(self, text: str) -> None:
        # The per-delta path: a list append and two counts; the file past the limits, then every
        # FLUSH_CHARS (a spilled text's own limit).
        if self.failure is not None:
            return  # (its deltas still go out: the events of its end say the text was not kept)
        self._parts.append(text)
        self._held += len(text)
        shared = self._shared
        shared.held += len(text)
        if self._held > self._limit or (shared.held > shared.limit and not self.token):
            self._spill()

    @property
    def spilled(self) -> bool:
        return bool(self.token)

    def finish(self) -> None:
        """The text is whole: what is held goes to the file, where the rest went."""
        if self.token and self._parts and self.failure is None:
            self._spill()

    def text(self) -> str:
        """The whole text (read back out of the file where it went there); empty where it failed."""
        if self.failure is not None:
            return ""
        if not self.token:
            return "".join(self._parts)
        return "".join(self.pieces())

    def pieces(self) -> Iterator[str]:
        """The spilled text in pieces of whole characters, each of at most ``READ_BYTES`` bytes."""
        assert self.token or self.failure is not None, "only a spilled text is read in pieces"
        self.finish()
        if self.failure is not None:
            return  # a part of the text is not the text: a failed spool has none
        decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        for offset, size in self._extents:
            end = offset + size
            while offset < end:
                try:
                    data = self._shared.read(offset, min(READ_BYTES, end - offset))
                except OSError as error:
                    raise SpoolUnreadable(_reason(error)) from error
                if not data:  # the file is shorter than written: never, short of a disk gone bad
                    raise SpoolUnreadable("a spooled text's file ended early")
                offset += len(data)
                if text := decoder.decode(data):
                    yield text
        if text := decoder.decode(b"", final=True):
            yield text

    def placed(self, spools: dict[str, TextSpool]) -> str:
        """The finished text as a JSON value takes it: itself where it stayed in memory (empty where its
        file failed: never a part told as the whole), else its placeholder, the spool put in ``spools``
        under it for ``SpooledJSON`` to write it there."""
        self.finish()
        if not self.spilled or self.failure is not None:
            return self.text()
        spools[self.token] = self
        return self.token

    def close(self) -> None:
        """Let go of what the text holds in memory (its file's bytes stay until the file goes)."""
        self._shared.held -= self._held
        self._parts.clear()
        self._held = 0

    def _spill(self) -> None:
        try:
            self._spill_held()
        except OSError as error:
            self._fail(error)

    def _fail(self, error: OSError) -> None:
        """The file would not take the text: the spool fails for good (see the module's docstring)."""
        # The path and the traceback go to the server's log; the client's message names neither.
        logging.getLogger("conformant").warning("a long text could not go to a temporary file: %s", error)
        self.failure = spill_failure(error)
        self._extents.clear()
        self.close()

    def _spill_held(self) -> None:
        if not self.token:
            self.token = f"{_TOKEN_PREFIX}{secrets.token_hex(16)}\x00"
            self._limit = FLUSH_CHARS  # from now on the file takes it a little at a time
        group: list[str] = []
        size = 0
        for part in self._parts:  # written FLUSH_CHARS at a time: never the held text joined whole
            group.append(part)
            size += len(part)
            if size >= FLUSH_CHARS:
                self._write("".join(group))
                group, size = [], 0
        if group:
            self._write("".join(group))
        self.close()

    def _write(self, text: str) -> None:
        try:
            data = text.encode()
        except UnicodeEncodeError:
            self.surrogates = True
            data = text.encode("utf-8", "surrogatepass")
        offset = self._shared.append(data)
        last = self._extents[-1] if self._extents else None
        if last is not None and last[0] + last[1] == offset:
            last[1] += len(data)  # (the usual: the text's stretches follow each other)
        else:
            self._extents.append([offset, len(data)])


def _temporary_file() -> IO[bytes]:
    """An unnamed temporary file in ``TMPDIR`` (or where ``tempfile`` looks next), unbuffered."""
    return tempfile.TemporaryFile(prefix="conformant-spool-", buffering=0)


def _reason(error: OSError) -> str:
    """An ``OSError``'s reason by its ``errno`` alone: its own text names the file's path, and
    ``tempfile``'s the directories it tried."""
    return os.strerror(error.errno) if error.errno else "an I/O error"


def spill_failure(error: OSError) -> str:
    """The client's message for a text that could not be kept (no path in it: ``_reason``)."""
    return (
        f"the response's texts grew past {SPOOL_CHARS:,} characters and the server could not keep them in "
        f"a temporary file ({_reason(error)}); the server's operator can set TMPDIR to a writable directory "
        "with room"
    )


def temporary_file_problem() -> str | None:
    """One line saying where no temporary file can be made, and what to set; None where one can: a
    Responses text past ``SPOOL_CHARS`` characters needs one (``conformant serve`` says so at start-up)."""
    try:
        with _temporary_file() as probe:
            probe.write(b"x")
    except OSError as error:
        where = tempfile.tempdir or os.environ.get("TMPDIR") or "the system's temporary directories"
        return (
            f"no temporary file can be made in {where} ({_reason(error)}): a Responses stream whose text "
            f"passes {SPOOL_CHARS:,} characters will fail; set TMPDIR to a writable directory"
        )
    return None


class SpooledJSON:
    """A JSON value in which spooled texts' placeholders stand for their texts (``spools``: by token)."""

    __slots__ = ("spools", "value")

    def __init__(self, value: Any, spools: Mapping[str, TextSpool]) -> None:
        self.value = value
        self.spools = spools

    def pieces(self) -> Iterator[bytes]:
        """The value's compact JSON with every text in its place, as ``jsoncodec.dumps`` writes the
        value with the texts in it, in pieces."""
        try:
            skeleton = orjson.dumps(self.value)
            places = self._places(skeleton)
            escape = _orjson_escaped
        except TypeError:
            places = None  # something orjson refuses: jsoncodec writes it all with ``json``
        if places is None or any(spool.surrogates for _, _, spool in places):
            skeleton = json.dumps(self.value, separators=(",", ":")).encode()
            places, escape = self._places(skeleton), _json_escaped
        start = 0
        for at, end, spool in places:
            yield skeleton[start : at + 1]  # up to the string's opening quote
            for text in spool.pieces():
                yield escape(text)
            start = end - 1  # its closing quote
        yield skeleton[start:]

    def size(self) -> int:
        """Bytes of that JSON, written (and let go) to be counted: a store's bound is checked without
        the whole text in memory."""
        return sum(len(piece) for piece in self.pieces())

    def whole(self) -> bytes:
        """That JSON at once: where a piece at a time will not do (a database driver's parameter)."""
        return b"".join(self.pieces())

    def _places(self, skeleton: bytes) -> list[tuple[int, int, TextSpool]]:
        """Where each placeholder string is in ``skeleton``, quotes included, in order: one scan for
        their common start, each looked up by its token. (A search per spool cost an answer of 9,000
        small calls, each a spool past the answer's bound, 10 s of CPU, and its Response 8.9 s at once.)"""
        found = []
        at = skeleton.find(_QUOTED_PREFIX)
        while at != -1:
            end = at + _QUOTED_LENGTH
            inner = skeleton[at + _QUOTED_NUL : end - _QUOTED_NUL].decode("ascii", "replace")
            spool = self.spools.get(f"\x00{inner}\x00")
            if spool is not None and skeleton[end - _QUOTED_NUL : end] == _QUOTED_END:
                found.append((at, end, spool))
            at = skeleton.find(_QUOTED_PREFIX, at + 1)
        return found


def _orjson_escaped(text: str) -> bytes:
    return orjson.dumps(text)[1:-1]


def _json_escaped(text: str) -> bytes:
    return json.dumps(text).encode()[1:-1]
