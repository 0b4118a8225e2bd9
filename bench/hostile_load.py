"""Hostile clients against one ``conformant serve``, in one run: what the proxy keeps of itself.

In order, against one proxy process in front of the fast raw upstream of bench/proxy_overhead.py:

1. a 64 MB header flood (heads that never end, on connection after connection, before any API key)
   and 13 MB of pipelined ``GET /health`` nobody reads: the proxy's RSS before and after (goal: it
   grows by less than 20 MB; before the limits of proxy/client_limits.py it reached about 1 GB);
2. 3,000 connections that send nothing: how long until the proxy has closed each one (goal: within
   ``--client-timeout``, which this run sets short, 5 s by default, so that the run is short), and the
   latency of ``GET /health`` while they are open (past ``--max-connections`` it is still answered);
3. a ``prompt`` of 200 items with ``n: 128`` (25,600 upstream requests once): refused with a 400;
4. 500 concurrent streams for 60 s (each stream a paced request after another): errors (goal 0) and
   the proxy's RSS sampled through it (goal: flat);
5. 400,000 one-word messages (14 MB, under ``--max-body``) on chat, and as input items on
   ``/v1/responses`` (alternating roles, and all one role), with ``GET /health`` every 20 ms meanwhile:
   the worst ``/health`` (goal: 250 ms; before issue 32's fix 1.7 s on chat and 27.5 s on Responses);
6. one stream of ``--long-mb`` MB of text (200 by default, in 64 KiB events) from an upstream of its
   own, through a proxy of its own, on chat, on ``/v1/responses`` and on ``/v1/responses`` with
   ``store: true``: the proxy's peak RSS over its idle size (goal: within 100 MB; before issue 32's
   spool, 200 MB took the Responses route to 1.22 GB, 1.42 GB stored); then stored in PostgreSQL (a
   throwaway server), on an upstream's own ``/v1/responses`` (``--responses native``) and over the
   WebSocket mode. ``--only-long`` runs this alone.

    python bench/hostile_load.py [--client-timeout 5] [--idle 3000] [--streams 500] [--seconds 60]
                                 [--pace-ms 100] [--chunks 50] [--long-mb 200] [--only-long]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from proxy_overhead import PACED_MODEL, _run, machine, percentile, stream_body  # noqa: E402

from tests.support.servers import free_port, run_process  # noqa: E402

KEY = "sk-hostile-load"
HOST = "127.0.0.1"
MB = 1024 * 1024


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


# -- 1. floods ------------------------------------------------------------------------------------


async def header_flood(port: int, total: int, parallel: int = 16) -> tuple[int, int, int]:
    """Heads that never end, until ``total`` bytes were sent: (bytes sent, connections, 431 answers)."""
    sent = [0, 0, 0]
    piece = b"a" * 65536

    async def flooder() -> None:
        while sent[0] < total:
            reader, writer = await asyncio.open_connection(HOST, port)
            sent[1] += 1
            writer.write(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-flood: ")
            with contextlib.suppress(ConnectionError):
                while sent[0] < total:
                    writer.write(piece)
                    sent[0] += len(piece)
                    await writer.drain()
            with contextlib.suppress(ConnectionError, TimeoutError):
                async with asyncio.timeout(5):
                    if (await reader.read(12)).startswith(b"HTTP/1.1 431"):
                        sent[2] += 1
            writer.close()

    await asyncio.gather(*(flooder() for _ in range(parallel)))
    return sent[0], sent[1], sent[2]


async def pipeline_flood(port: int, total: int, parallel: int = 4) -> tuple[int, int]:
    """Pipelined ``GET /health`` not read while sent, ``total`` bytes in all: (answers the client read
    afterwards, connections the proxy closed)."""
    request = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"
    batch = request * (65536 // len(request))
    counts = [0, 0]

    async def flooder() -> None:
        reader, writer = await asyncio.open_connection(HOST, port)
        with contextlib.suppress(ConnectionError):
            for _ in range(total // parallel // len(batch)):
                writer.write(batch)
                await writer.drain()
        received = b""
        try:
            async with asyncio.timeout(10):
                while part := await reader.read(65536):
                    received += part
            counts[1] += 1  # the proxy closed the connection
        except ConnectionError:
            counts[1] += 1  # closed with requests unread: reset
        except TimeoutError:
            pass  # still open
        counts[0] += received.count(b"HTTP/1.1 200")
        writer.close()

    await asyncio.gather(*(flooder() for _ in range(parallel)))
    return counts[0], counts[1]


# -- 2. idle connections --------------------------------------------------------------------------


async def health_latency(port: int) -> float:
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    answer = await reader.read()
    writer.close()
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"/health answered {answer[:40]!r}")
    return time.perf_counter() - start


async def idle_connections(port: int, count: int) -> dict[str, object]:
    """``count`` connections that send nothing; /health timed while they are open."""
    closed_after: list[float] = []
    answered_408 = [0]

    async def idle() -> None:
        reader, writer = await asyncio.open_connection(HOST, port)
        opened = time.perf_counter()
        data = await reader.read()  # the 408, then the end of the connection
        closed_after.append(time.perf_counter() - opened)
        if data.startswith(b"HTTP/1.1 408"):
            answered_408[0] += 1
        writer.close()

    start = time.perf_counter()
    tasks = []
    for _ in range(count):
        tasks.append(asyncio.create_task(idle()))
        await asyncio.sleep(0)  # let it connect: the listening backlog is finite
    await asyncio.sleep(0.5)
    opened_in = time.perf_counter() - start
    latencies = [await health_latency(port) for _ in range(20)]
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    models_status = (await reader.read())[:12].decode()
    writer.close()
    await asyncio.gather(*tasks)
    return {
        "opened_in": opened_in,
        "closed": len(closed_after),
        "answered_408": answered_408[0],
        "closed_after_max": max(closed_after),
        "closed_after_p50": percentile(closed_after, 50),
        "health_p50_ms": percentile(latencies, 50) * 1000,
        "health_max_ms": max(latencies) * 1000,
        "models_status": models_status,
    }


# -- 3. fan-out -----------------------------------------------------------------------------------


async def fan_out(port: int) -> tuple[str, dict[str, object], float]:
    body = json.dumps(
        {"model": "m", "prompt": [f"p{i}" for i in range(200)], "n": 128, "max_tokens": 1}
    ).encode()
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {KEY}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )
    answer = await reader.read()
    writer.close()
    head, _, content = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode(), json.loads(content)["error"], time.perf_counter() - start


# -- 5. many items --------------------------------------------------------------------------------


async def many_items(port: int, path: str, body: dict[str, object]) -> tuple[str, float]:
    """(the status line, the worst /health latency) of one large request, /health polled meanwhile."""
    data = json.dumps(body).encode()
    worst = [0.0]
    done = asyncio.Event()

    async def poll() -> None:
        while not done.is_set():
            worst[0] = max(worst[0], await health_latency(port))
            await asyncio.sleep(0.02)

    polling = asyncio.ensure_future(poll())
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n".encode()
        + f"authorization: Bearer {KEY}\r\ncontent-length: {len(data)}\r\nconnection: close\r\n\r\n".encode()
        + data
    )
    answer = await reader.read()
    writer.close()
    done.set()
    await polling
    return answer.split(b"\r\n", 1)[0].decode(), worst[0]


# -- 4. streams -----------------------------------------------------------------------------------


async def streams(port: int, pid: int, count: int, seconds: float, chunks: int) -> dict[str, object]:
    """``count`` workers, each a paced stream after another for ``seconds``; RSS every 5 s."""
    done, errors, events = [0], [0], [0]
    failures: list[str] = []
    body = stream_body(PACED_MODEL, chunks)
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {KEY}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    end = time.monotonic() + seconds

    async def worker(position: int) -> None:
        await asyncio.sleep(position * 0.002)  # not all in the same millisecond
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            while time.monotonic() < end:
                writer.write(request)
                received = b""
                try:
                    received = await reader.readuntil(b"\r\n0\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError) as exc:
                    errors[0] += 1
                    failures.append(f"{type(exc).__name__}")
                    writer.close()
                    reader, writer = await asyncio.open_connection(HOST, port)
                    continue
                ok = received.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in received
                if not ok or b'"error"' in received:
                    errors[0] += 1
                    failures.append(received[:120].decode(errors="replace"))
                else:
                    done[0] += 1
                    events[0] += received.count(b"data: {")
        finally:
            writer.close()

    samples: list[tuple[float, float]] = []

    async def sampler() -> None:
        start = time.monotonic()
        while time.monotonic() < end:
            samples.append((time.monotonic() - start, rss_mb(pid)))
            await asyncio.sleep(5)

    sampling = asyncio.create_task(sampler())
    await asyncio.gather(*(worker(i) for i in range(count)))
    await sampling
    samples.append((seconds, rss_mb(pid)))
    return {
        "completed": done[0],
        "errors": errors[0],
        "failures": failures[:5],
        "events": events[0],
        "rss": samples,
    }


# -- 6. long streams --------------------------------------------------------------------------------

_LONG_TEXT = ('lorem ipsum "dolor" sit\n' * 2731)[:65536]
"""One event's text: 64 KiB, with quotes and line ends that JSON escapes."""


def _framed_event(payload: dict[str, object]) -> bytes:
    data = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _long_chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    return _framed_event(
        {
            "id": "chatcmpl-long",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


@contextlib.contextmanager
def long_upstream(megabytes: int) -> Iterator[str]:
    """A raw upstream in a thread of its own: every chat request gets ``megabytes`` MiB of text in
    64 KiB events (the same event again: the upstream holds 64 KiB), anything else ``{}``."""
    event = _long_chunk({"content": _LONG_TEXT})
    last = _long_chunk({}, "stop") + _framed_done() + b"0\r\n\r\n"

    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(_EVENT_STREAM + _long_chunk({"role": "assistant", "content": ""}))
        for _ in range(megabytes * 16):
            writer.write(event)
            await writer.drain()
        writer.write(last)

    with _raw_upstream(b"/chat/completions", answer) as url:
        yield url


_EVENT_STREAM = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _responses_event(kind: str, **fields: object) -> bytes:
    return _framed_event({"type": kind, **fields})


@contextlib.contextmanager
def long_responses_upstream(megabytes: int) -> Iterator[str]:
    """A raw upstream that speaks ``/v1/responses`` itself (``--responses native``): ``megabytes`` MiB
    of text in 64 KiB deltas, then the events that repeat the whole text, as a Responses server sends
    them (``response.output_text.done`` and on); each of those is written a piece at a time, so that
    the upstream holds 64 KiB."""
    item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    delta = _responses_event("response.output_text.delta", delta=_LONG_TEXT, **where)
    escaped = json.dumps(_LONG_TEXT)[1:-1].encode()

    async def whole_text_event(writer: asyncio.StreamWriter, head: bytes, tail: bytes) -> None:
        """One event whose JSON holds the whole text between ``head`` and ``tail``."""
        size = len(head) + len(escaped) * megabytes * 16 + len(tail)
        writer.write(f"{size:x}\r\n".encode() + head)
        for _ in range(megabytes * 16):
            writer.write(escaped)
            await writer.drain()
        writer.write(tail + b"\r\n")

    async def answer(writer: asyncio.StreamWriter) -> None:
        response = {"id": "resp_1", "object": "response", "status": "in_progress", "model": "m", "output": []}
        writer.write(_EVENT_STREAM + _responses_event("response.created", response=response))
        writer.write(_responses_event("response.output_item.added", output_index=0, item=item))
        part = {"type": "output_text", "text": "", "annotations": []}
        writer.write(_responses_event("response.content_part.added", part=part, **where))
        for _ in range(megabytes * 16):
            writer.write(delta)
            await writer.drain()
        head = json.dumps({"type": "response.output_text.done", **where})[:-1] + ', "text": "'
        await whole_text_event(writer, b"data: " + head.encode(), b'"}\n\n')
        writer.write(_framed_done() + b"0\r\n\r\n")  # (the proxy has let go by now: the text ran past
        # its 4 MiB bound on one upstream line)

    with _raw_upstream(b"/responses", answer) as url:
        yield url


@contextlib.contextmanager
def _raw_upstream(path: bytes, answer: Callable[[asyncio.StreamWriter], Awaitable[None]]) -> Iterator[str]:
    """A raw HTTP/1.1 upstream in a thread of its own: a POST whose path ends in ``path`` gets
    ``answer``, anything else ``{}``."""
    port = free_port()
    other = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line[15:])
                        for line in request.split(b"\r\n")
                        if line[:15].lower() == b"content-length:"
                    ),
                    0,
                )
                await reader.readexactly(length)
                if not request.split(b"\r\n", 1)[0].split(b" ")[1].endswith(path):
                    writer.write(other)
                    continue
                await answer(writer)
                await writer.drain()
        writer.close()

    loop = asyncio.new_event_loop()
    started = threading.Event()

    async def serve() -> None:
        server = await asyncio.start_server(connection, HOST, port)
        started.set()
        async with server:
            await server.serve_forever()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    started.wait(10)
    yield f"http://{HOST}:{port}"
    # (a daemon thread: it ends with the bench)


def _framed_done() -> bytes:
    data = b"data: [DONE]\n\n"
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


async def long_stream(
    port: int, pid: int, path: str, body: dict[str, object], events: list[str] | None = None
) -> tuple[str, int, float, float, float]:
    """(status line, bytes read, idle RSS, peak RSS, seconds) of one long stream, read as fast as it
    comes and let go; the peak is the kernel's (``VmHWM``), reset before the request (``clear_refs``).
    ``events``, where given, gets the name of the stream's last ``event:`` line."""
    idle = rss_mb(pid)
    with open(f"/proc/{pid}/clear_refs", "w") as peak:  # noqa: ASYNC230 (a kernel file: no wait)
        peak.write("5")  # the peak RSS (VmHWM), from now on
    data = json.dumps(body).encode()
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 20)
    writer.write(
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n".encode()
        + f"authorization: Bearer {KEY}\r\ncontent-length: {len(data)}\r\nconnection: close\r\n\r\n".encode()
        + data
    )
    status = (await reader.readline()).decode().strip()
    received = 0
    carry = b""
    while part := await reader.read(1 << 20):
        received += len(part)
        if events is not None:  # (a line cut between two reads is read whole with the carry)
            lines = (carry + part).split(b"\n")
            events += [line[7:].decode() for line in lines[:-1] if line.startswith(b"event: ")]
            carry = lines[-1][-64:]
    writer.close()
    return status, received, idle, peak_rss_mb(pid), time.perf_counter() - start


def run_long_streams(args: argparse.Namespace) -> None:
    """Shape 6: its own upstream and proxy, one long stream per route."""
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(long_upstream(args.long_mb))
        port = free_port()
        serve = ["python", "-m", "conformance", "serve", "--upstream", upstream, "--port", str(port)]
        serve += ["--api-key", KEY, "--upstream-kind", "openai", "--log-level", "warning"]
        store = stack.enter_context(tempfile.TemporaryDirectory(prefix="hostile-load-store-"))
        serve += ["--responses-store", str(Path(store) / "responses.sqlite3")]
        _, proc = stack.enter_context(run_process(serve, health_path="/health", port=port))
        hi = [{"role": "user", "content": "hi"}]
        shapes = [
            ("chat", "/v1/chat/completions", {"model": "m", "messages": hi, "stream": True}),
            ("responses", "/v1/responses", {"model": "m", "input": "hi", "stream": True, "store": False}),
            (
                "responses, store",
                "/v1/responses",
                {"model": "m", "input": "hi", "stream": True, "store": True},
            ),
        ]

        async def run() -> None:
            for label, path, body in shapes:
                status, received, idle, peak, took = await long_stream(port, proc.pid, path, body)
                print(
                    f"6. {args.long_mb} MiB streamed, {label}: {status}, {received / MB:.0f} MiB read in "
                    f"{took:.1f} s; proxy "
                    f"RSS idle {idle:.1f} MB, peak {peak:.1f} MB ({peak - idle:+.1f} MB; goal < 100: "
                    f"{'met' if peak - idle < 100 else 'NOT met'})"
                )

        _run(run())


def run_long_native_stream(args: argparse.Namespace) -> None:
    """Shape 6 on an upstream's own ``/v1/responses`` (``--responses native``): the events that repeat
    the whole text are upstream lines past the proxy's 4 MiB bound on one, so the stream ends
    ``response.failed`` there, and the proxy holds no more than that bound of it."""
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(long_responses_upstream(args.long_mb))
        port = free_port()
        serve = ["python", "-m", "conformance", "serve", "--upstream", upstream, "--port", str(port)]
        serve += ["--api-key", KEY, "--upstream-kind", "openai", "--responses", "native"]
        serve += ["--log-level", "warning"]
        _, proc = stack.enter_context(run_process(serve, health_path="/health", port=port))
        body = {"model": "m", "input": "hi", "stream": True, "store": False}
        events: list[str] = []
        status, received, idle, peak, took = _run(long_stream(port, proc.pid, "/v1/responses", body, events))
        print(
            f"6. {args.long_mb} MiB streamed, responses, native: {status}, {received / MB:.0f} MiB read "
            f"in {took:.1f} s, ending {events[-1:]}; proxy RSS idle {idle:.1f} MB, peak "
            f"{peak:.1f} MB ({peak - idle:+.1f} MB; goal < 100: {'met' if peak - idle < 100 else 'NOT met'})"
        )


def run_long_stream_postgres(args: argparse.Namespace, url: str | None = None) -> None:
    """Shape 6 on ``/v1/responses`` with ``store: true`` and ``--responses-store postgresql://...``: its
    own upstream and proxy, storing in the database ``url`` names, else in a throwaway PostgreSQL server's
    (tests/support/postgres.py: its server programs on this machine); the store not asked first (it warms
    the proxy as the rows before it do in ``run_long_streams``), then asked; then what the database holds."""
    from tests.support.postgres import postgres_binaries, running_postgres

    with contextlib.ExitStack() as stack:
        if url is None:
            binaries = postgres_binaries()
            if binaries is None:
                print("6. PostgreSQL store: skipped, no PostgreSQL server programs here")
                return
            url = stack.enter_context(running_postgres(binaries)).url()
        upstream = stack.enter_context(long_upstream(args.long_mb))
        port = free_port()
        serve = [sys.executable, "-m", "conformance", "serve", "--upstream", upstream, "--port", str(port)]
        serve += ["--api-key", KEY, "--upstream-kind", "openai", "--log-level", "warning"]
        serve += ["--responses-store", url]
        _, proc = stack.enter_context(run_process(serve, health_path="/health", port=port))
        shapes = [
            ("responses", {"model": "m", "input": "hi", "stream": True, "store": False}),
            ("responses, PostgreSQL store", {"model": "m", "input": "hi", "stream": True, "store": True}),
        ]

        async def run() -> None:
            for label, body in shapes:
                status, received, idle, peak, took = await long_stream(port, proc.pid, "/v1/responses", body)
                print(
                    f"6. {args.long_mb} MiB streamed, {label}: {status}, {received / MB:.0f} MiB read in "
                    f"{took:.1f} s; proxy RSS idle {idle:.1f} MB, peak {peak:.1f} MB ({peak - idle:+.1f} MB; "
                    f"goal < 100: {'met' if peak - idle < 100 else 'NOT met'})"
                )

        _run(run())
        import psycopg

        with psycopg.connect(url, autocommit=True) as connection:
            query = "SELECT count(*), COALESCE(sum(size), 0) FROM conformant_responses"
            entries, size = connection.execute(query).fetchone() or (0, 0)
        print(f"   stored in PostgreSQL: {entries} entries, {size / MB:.1f} MiB")


async def long_socket_turn(
    port: int, pid: int, body: dict[str, object]
) -> tuple[str, int, float, float, float]:
    """(last message, bytes read, idle RSS, peak RSS, seconds) of one long turn over the Responses API's
    WebSocket mode (``body``: its ``response.create``), read as fast as it comes and let go, then a
    second turn on the same socket; the peak as in ``long_stream``. The last message is the first turn's
    terminal event type, or ``error <code>``, and ``, then <type>`` for the second turn."""
    from websockets.asyncio.client import connect  # (the core environment's: not every bench's)

    idle = rss_mb(pid)
    with open(f"/proc/{pid}/clear_refs", "w") as peak:  # noqa: ASYNC230 (a kernel file: no wait)
        peak.write("5")
    start = time.perf_counter()
    url, headers = f"ws://{HOST}:{port}/v1/responses", {"Authorization": f"Bearer {KEY}"}
    received, ends = 0, []
    # No bound of the client's own (1 MiB by default): the proxy's is the one measured; no pings of its
    # own (a proxy that holds an event of 200 MiB answers none for a while).
    async with connect(url, additional_headers=headers, max_size=None, ping_interval=None) as socket:
        for _ in range(2):
            await socket.send(json.dumps({"type": "response.create", **body}))
            while True:
                message = await socket.recv()
                received += len(message)
                event = json.loads(message)
                if event["type"] == "error":
                    ends.append(f"error {event['error']['code']}")
                    break
                if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                    ends.append(event["type"])
                    break
    return ", then ".join(ends), received, idle, peak_rss_mb(pid), time.perf_counter() - start


def run_long_socket(args: argparse.Namespace) -> None:
    """Shape 6 over the Responses API's WebSocket mode: its own upstream and proxy, one long turn (and
    a second on the same socket). The spec sends each event as one message, whole: past the socket's
    bound on one message (8 MiB, conformance/protocols/responses/websocket.py) the turn ends with an
    error message and the socket goes on; before that bound, 200 MiB took the proxy to 1.8 GB (+1.75 GB)."""
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(long_upstream(args.long_mb))
        port = free_port()
        serve = ["python", "-m", "conformance", "serve", "--upstream", upstream, "--port", str(port)]
        serve += ["--api-key", KEY, "--upstream-kind", "openai", "--log-level", "warning"]
        _, proc = stack.enter_context(run_process(serve, health_path="/health", port=port))
        body = {"model": "m", "input": "hi", "store": False}
        last, received, idle, peak, took = _run(long_socket_turn(port, proc.pid, body))
        print(
            f"6. {args.long_mb} MiB streamed, responses, WebSocket: {last}, {received / MB:.0f} MiB read in "
            f"{took:.1f} s; proxy RSS idle {idle:.1f} MB, peak {peak:.1f} MB ({peak - idle:+.1f} MB; goal "
            f"< 100: {'met' if peak - idle < 100 else 'NOT met'})"
        )


def run_shape_6(args: argparse.Namespace) -> None:
    """Shape 6 on every route that streams a Responses answer: each with its own upstream and proxy."""
    run_long_streams(args)
    run_long_stream_postgres(args)
    run_long_native_stream(args)
    run_long_socket(args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--client-timeout", type=float, default=5.0, help="the proxy's --client-timeout")
    parser.add_argument("--idle", type=int, default=3000, help="idle connections")
    parser.add_argument("--streams", type=int, default=500, help="concurrent streams")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the streams run")
    parser.add_argument("--pace-ms", type=float, default=100.0, help="ms between a stream's chunks")
    parser.add_argument("--chunks", type=int, default=50, help="content chunks per streamed request")
    parser.add_argument("--long-mb", type=int, default=200, help="MiB of text in shape 6's stream")
    parser.add_argument("--only-long", action="store_true", help="run shape 6 alone")
    args = parser.parse_args()
    if args.only_long:
        print(f"machine: {machine()}")
        run_shape_6(args)
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = args.idle + 2 * args.streams + 100
    if soft < needed:  # this process holds every client socket
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(needed, soft)), hard))
    print(f"machine: {machine()}; open files (soft limit): {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}")
    with contextlib.ExitStack() as stack:
        port = free_port()
        upstream_command = [
            "python", str(ROOT / "bench" / "proxy_overhead.py"), "--serve-upstream", str(port),
            "--pace-ms", str(args.pace_ms),
        ]  # fmt: skip
        upstream, _ = stack.enter_context(run_process(upstream_command, health_path="/health", port=port))
        port = free_port()
        serve = ["python", "-m", "conformance", "serve", "--upstream", upstream, "--port", str(port)]
        serve += ["--api-key", KEY, "--upstream-kind", "openai", "--log-level", "warning"]
        serve += ["--client-timeout", str(args.client_timeout)]
        _, proc = stack.enter_context(run_process(serve, health_path="/health", port=port))
        print(f"proxy: conformant serve --client-timeout {args.client_timeout:g} (other limits at defaults)")

        async def run() -> None:
            # Warm up: the first requests import and build what the proxy keeps for its lifetime.
            await streams(port, proc.pid, 20, 2.0, 5)
            before = rss_mb(proc.pid)
            sent, connections, refused = await header_flood(port, 64 * MB)
            await asyncio.sleep(1)
            after_headers = rss_mb(proc.pid)
            print(
                f"1. header flood: {sent / MB:.0f} MB sent on {connections} connections ({refused} answered "
                f"431); RSS {before:.1f} -> {after_headers:.1f} MB ({after_headers - before:+.1f} MB)"
            )
            answers, closed = await pipeline_flood(port, 13 * MB)
            await asyncio.sleep(1)
            after_pipeline = rss_mb(proc.pid)
            print(
                f"   pipelined flood: 13 MB of GET /health (about 380,000 requests) on 4 connections: "
                f"{answers} answered, {closed} connections closed by the proxy; "
                f"RSS {after_headers:.1f} -> {after_pipeline:.1f} MB "
                f"(total {after_pipeline - before:+.1f} MB; goal < 20: "
                f"{'met' if after_pipeline - before < 20 else 'NOT met'})"
            )
            idle = await idle_connections(port, args.idle)
            print(
                f"2. {args.idle} idle connections (opened in {idle['opened_in']:.1f} s): "
                f"{idle['closed']} closed by the proxy ({idle['answered_408']} with a 408), "
                f"after {idle['closed_after_p50']:.2f} s "
                f"(median) and {idle['closed_after_max']:.2f} s at most (--client-timeout "
                f"{args.client_timeout:g}); GET /health while open: {idle['health_p50_ms']:.1f} ms median, "
                f"{idle['health_max_ms']:.1f} ms max; GET /v1/models past --max-connections: "
                f"{idle['models_status']}"
            )
            status, error, took = await fan_out(port)
            print(
                f"3. 200 prompts x n 128: {status} in {took * 1000:.0f} ms, code {error['code']}, "
                f"param {error['param']}"
            )
            load = await streams(port, proc.pid, args.streams, args.seconds, args.chunks)
            rss = load["rss"]
            assert isinstance(rss, list)
            values = [value for _, value in rss]
            print(
                f"4. {args.streams} concurrent streams for {args.seconds:g} s ({args.chunks} chunks each, "
                f"{args.pace_ms:g} ms apart): {load['completed']} streams completed, {load['events']} "
                f"events, {load['errors']} errors {load['failures'] or ''}"
            )
            print(
                "   proxy RSS (MB) every 5 s: "
                + " ".join(f"{value:.1f}" for value in values)
                + f" (min {min(values):.1f}, max {max(values):.1f})"
            )

            n = 400_000
            turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": "hi"} for i in range(n)]
            shapes = [
                ("chat, alternating roles", "/v1/chat/completions", {"model": "m", "messages": turns}),
                ("responses, alternating roles", "/v1/responses", {"model": "m", "input": turns}),
                ("responses, one role", "/v1/responses", {"model": "m", "input": [turns[0]] * n}),
            ]
            for label, path, body in shapes:
                status, worst = await many_items(port, path, body)
                print(
                    f"5. {n:,} items, {label}: {status}; worst GET /health meanwhile {worst * 1000:.0f} ms "
                    f"(goal 250: {'met' if worst <= 0.25 else 'NOT met'})"
                )

        _run(run())
    run_shape_6(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
