"""Server-sent events: an incremental WHATWG parser and the writer the proxy and backend use.

The parser takes bytes in any split and hands back one :class:`SSEBlock` per blank-line-terminated
block. WHATWG would silently drop blocks that carry no ``data`` line and fields it does not know;
the conformance rules need to see both (llama.cpp's ``error: {...}`` line, Q42; keep-alive comments,
Q57), so they are kept on the block and :attr:`SSEBlock.dispatched` says what a browser would do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = [
    "DONE",
    "DONE_EVENT",
    "SSEBlock",
    "SSELineTooLong",
    "SSEParser",
    "encode_comment",
    "encode_data",
    "parse_sse",
]

DONE = "[DONE]"
DONE_EVENT = b"data: [DONE]\n\n"
_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")


class SSELineTooLong(ValueError):
    """A single SSE line grew past the parser's bound before its line end arrived."""


@dataclass(slots=True)
class SSEBlock:
    """One block of the stream: the lines up to a blank line (or up to the end, when cut off)."""

    index: int
    """Position among all blocks of the stream, from 0."""
    offset: int
    """Byte offset in the stream of the block's first line."""
    data: str | None = None
    """The joined ``data`` lines; None when the block had no ``data`` line."""
    event: str | None = None
    id: str | None = None
    retry: int | None = None
    comments: list[str] = field(default_factory=list)
    other_fields: list[tuple[str, str]] = field(default_factory=list)
    """Field lines outside WHATWG's four (``error: {...}`` from llama.cpp, Q42), in order."""
    invalid_retry: bool = False
    complete: bool = True
    """False for a last block the stream cut off before its blank line (WHATWG discards it)."""

    @property
    def dispatched(self) -> bool:
        """Whether a WHATWG client would deliver this block as an event."""
        return self.complete and self.data is not None

    @property
    def is_done(self) -> bool:
        return self.data == DONE


class SSEParser:
    """Incremental parser: ``feed(bytes)`` returns the blocks completed so far, ``close()`` the rest."""

    def __init__(self, max_line_bytes: int | None = None) -> None:
        self._buffer = b""
        self._skip_lf = False
        self._consumed = 0  # bytes of the stream before self._buffer
        self._first = True
        self._max_line = max_line_bytes
        self._blocks = 0
        self._current: SSEBlock | None = None
        # A block's data lines after its first, joined when the block ends: joining line by line
        # would copy the whole data on every line (minutes for a block of millions of lines).
        self._more_data: list[str] = []
        self._block_bytes = 0
        self.bom = False
        """True when the stream began with a UTF-8 BOM (stripped, as WHATWG says; openai-python chokes)."""
        self.not_utf8: int | None = None
        """The index of the first block with bytes that are not UTF-8 (read as U+FFFD, as WHATWG says;
        openai-python raises ``UnicodeDecodeError``); None while there is none."""

    def feed(self, chunk: bytes) -> list[SSEBlock]:
        if not chunk:
            return []
        buf = self._buffer + chunk if self._buffer else chunk
        if self._first:
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                self._buffer = buf
                return []
            self._first = False
            if buf.startswith(_BOM):
                self.bom = True
                buf = buf[len(_BOM) :]
                self._consumed += len(_BOM)
        out: list[SSEBlock] = []
        pos = 0
        if self._skip_lf and buf[:1] == b"\n":
            pos = 1
        self._skip_lf = False
        if b"\r" in buf:
            end = len(buf)
            for match in _LINE_END.finditer(buf, pos):
                start_eol = match.start()
                if match.group() == b"\r" and match.end() == end:
                    # A CR that ends this read may be the first half of a CRLF split across reads.
                    self._skip_lf = True
                self._line(buf[pos:start_eol], self._consumed + pos, out)
                pos = match.end()
        else:  # LF line ends only, as nearly every server sends: no need for the regular expression
            while (eol := buf.find(b"\n", pos)) >= 0:
                self._line(buf[pos:eol], self._consumed + pos, out)
                pos = eol + 1
        rest = buf[pos:]
        if self._max_line is not None and len(rest) > self._max_line:
            raise SSELineTooLong(f"an SSE line exceeded {self._max_line} bytes without a line end")
        self._consumed += pos
        self._buffer = rest
        return out

    def data_events(self, chunk: bytes) -> bytes | None:
        """The whole events ``chunk`` completes, where each is one ``data: `` line with an LF line end
        (a token stream's usual read: the proxy relays those without making blocks of them): their
        bytes, the last blank line included; the rest, the next event's beginning, is held as ``feed``
        holds it. None where the read is anything else; ``chunk`` is then ``feed``'s. The events count
        as parsed."""
        # (What ``feed`` holds has no line end: an event ends in ``chunk`` or not in this read at all.)
        if self._current is not None or self._skip_lf or b"\n\n" not in chunk or b"\r" in chunk:
            return None
        buffer = self._buffer + chunk if self._buffer else chunk
        if self._first:
            if _BOM.startswith(buffer[:3]):  # the stream's first bytes a byte-order mark: ``feed`` strips it
                return None
            self._first = False
        end = buffer.rfind(b"\n\n") + 2
        if self._max_line is not None and end > self._max_line:  # ``feed`` judges a read past the bound
            return None
        events = buffer.count(b"\n\ndata: ", 0, end) + 1
        # Each line end one of an event's two: no event of several lines, blank lines or other fields.
        if buffer[:6] != b"data: " or buffer.count(b"\n", 0, end) != 2 * events:
            return None
        self._buffer = b""
        self._consumed += end
        self._blocks += events
        if end < len(buffer):
            self.feed(buffer[end:])  # (it holds no blank line: no block ends in it)
        return buffer[:end]

    def block_of(self, data: bytes) -> SSEBlock:
        """The block of one event's data out of ``data_events``, as ``feed`` would have made it (but for
        its index and offset: nothing that reads a relayed stream asks for them)."""
        index = self._blocks - 1
        return SSEBlock(index=index, offset=self._consumed, data=self._text(data, index))

    def close(self) -> SSEBlock | None:
        """End of stream: returns the cut-off block, if any (marked ``complete=False``)."""
        if self._buffer:
            if self._first and _BOM.startswith(self._buffer):
                self._buffer = b""
            else:
                leftover: list[SSEBlock] = []
                self._line(self._buffer, self._consumed, leftover)
                self._buffer = b""
        block = self._end_block()
        if block is None:
            return None
        block.complete = False
        return block

    def _end_block(self) -> SSEBlock | None:
        block, self._current = self._current, None
        if block is not None and self._more_data:
            block.data = "\n".join([block.data or "", *self._more_data])
            self._more_data = []
        self._block_bytes = 0
        return block

    def _text(self, raw: bytes, index: int) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            if self.not_utf8 is None:
                self.not_utf8 = index
            return raw.decode("utf-8", "replace")

    def _add_data(self, block: SSEBlock, value: str) -> None:
        if block.data is None:
            block.data = value
        else:
            self._more_data.append(value)

    def _line(self, raw: bytes, offset: int, out: list[SSEBlock]) -> None:
        if not raw:
            block = self._end_block()
            if block is not None:
                out.append(block)
            return
        block = self._current
        if block is None:
            block = self._current = SSEBlock(index=self._blocks, offset=offset)
            self._blocks += 1
        if self._max_line is not None:
            # A block without its blank line grows by whole lines, each under the line bound: bound
            # the block too, or an upstream that never ends one fills the proxy's memory.
            self._block_bytes += len(raw)
            if self._block_bytes > self._max_line:
                raise SSELineTooLong(f"an SSE event exceeded {self._max_line} bytes without its blank line")
        if raw[:6] == b"data: ":  # the usual line, without the general parsing below
            self._add_data(block, self._text(raw[6:], block.index))
            return
        line = self._text(raw, block.index)
        if line[0] == ":":
            block.comments.append(line[1:].removeprefix(" "))
            return
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._add_data(block, value)
        elif name == "event":
            block.event = value
        elif name == "id":
            if "\x00" not in value:
                block.id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                block.retry = int(value)
            else:
                block.invalid_retry = True
        else:
            block.other_fields.append((name, value))


def parse_sse(chunks: Iterable[bytes], max_line_bytes: int | None = None) -> Iterator[SSEBlock]:
    """Every block of a whole stream, the cut-off last one included (``complete=False``)."""
    parser = SSEParser(max_line_bytes)
    for chunk in chunks:
        yield from parser.feed(chunk)
    tail = parser.close()
    if tail is not None:
        yield tail


def encode_data(payload: str | bytes) -> bytes:
    """One ``data:`` event as OpenAI frames it: no ``event:``/``id:`` lines, LF endings."""
    raw = payload.encode() if isinstance(payload, str) else payload
    if b"\n" in raw or b"\r" in raw:
        lines = _LINE_END.split(raw)
        return b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"
    return b"data: " + raw + b"\n\n"


def encode_comment(text: str = "") -> bytes:
    """A keep-alive comment; both WHATWG parsers and openai-python skip it."""
    return b": " + text.encode().replace(b"\n", b" ").replace(b"\r", b" ") + b"\n\n"
