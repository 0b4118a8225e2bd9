"""A raw asyncio TCP upstream in a thread, for faults no well-behaved HTTP server produces.

The handler gets (reader, writer, record); the server counts connections and notes when each one is
closed by the peer, so tests can assert that the proxy cancelled (closed) its upstream request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.support.servers import free_port

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Record"], Awaitable[None]]


@dataclass
class Record:
    connections: int = 0
    open: int = 0
    requests: int = 0
    peer_closed_at: list[float] = field(default_factory=list)
    request_sent_at: list[float] = field(default_factory=list)


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One HTTP/1.1 request (headers and a Content-Length body); None when the peer closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length) if length else b""
    return head + body


async def wait_peer_close(reader: asyncio.StreamReader, record: Record) -> None:
    """Block until the proxy closes the connection, and note when."""
    with contextlib.suppress(ConnectionError):
        while await reader.read(65536):
            pass
    record.peer_closed_at.append(time.monotonic())


async def chat_requests(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> AsyncIterator[dict[str, Any]]:
    """The JSON bodies of the chat completion requests a connection sends, one after another; any other
    path (the tokenizers and template endpoints the proxy asks for) is answered with a 404."""
    while (raw := await read_request(reader)) is not None:
        head, payload = raw.split(b"\r\n\r\n", 1)
        if not head.startswith(b"POST /v1/chat/completions "):
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            continue
        yield json.loads(payload)


def call_answer(function: dict[str, Any], **fields: Any) -> bytes:
    """A whole chat completion that calls ``function`` (``call_1``) and finishes ``tool_calls``, with
    ``fields`` (``usage``) beside its choices."""
    call = {"id": "call_1", "type": "function", "function": function}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "m", **fields}
    body["choices"] = [{"index": 0, "message": message, "finish_reason": "tool_calls"}]
    return json_answer(body)


def chunk_payload(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """One chat chunk of choice 0 with ``delta``, as an upstream sends it."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def chunk(text: str, finish: str | None = None) -> bytes:
    """One chat chunk event with ``text`` as its content."""
    payload = chunk_payload({"content": text}, finish)
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


def sse_head() -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def json_answer(payload: object, status: str = "200 OK") -> bytes:
    """A whole response with ``payload`` as its JSON body, at ``status`` (its code and reason)."""
    body = json.dumps(payload).encode()
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


def answering(answer: bytes) -> Any:
    """A handler that reads one request and writes ``answer``, the whole response."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()

    return handler


def http_chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@contextlib.contextmanager
def raw_server(handler: Handler) -> Iterator[tuple[str, Record]]:
    record = Record()
    port = free_port()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    server_box: list[asyncio.Server] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        record.connections += 1
        record.open += 1
        try:
            await handler(reader, writer, record)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            record.open -= 1
            writer.close()

    async def main() -> None:
        server_box.append(await asyncio.start_server(on_connect, "127.0.0.1", port))
        started.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main())
        loop.run_forever()
        # Let the cancelled handlers run their cleanup on a live loop, then close it.
        pending = asyncio.all_tasks(loop)
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield f"http://127.0.0.1:{port}", record
    finally:

        def stop() -> None:
            server_box[0].close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.stop()

        loop.call_soon_threadsafe(stop)
        thread.join(10)


def streaming(*parts: bytes, end: bool = True, seen: list[dict[str, Any]] | None = None) -> Any:
    """A handler that answers one request with a stream of ``parts`` (10 ms apart), then ``[DONE]``, or
    a cut connection (``end=False``); the requests' JSON bodies go to ``seen``."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        raw = await read_request(reader)
        assert raw is not None
        if seen is not None and raw.startswith(b"POST"):
            seen.append(json.loads(raw.split(b"\r\n\r\n", 1)[1]))
        writer.write(sse_head())
        for part in parts:
            writer.write(http_chunk(part))
            await writer.drain()
            await asyncio.sleep(0.01)
        if end:
            writer.write(http_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
        else:
            writer.transport.abort()

    return handler
