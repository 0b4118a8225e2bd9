"""What storing a Response (``store: true``, the default) adds to a ``/v1/responses`` stream, in one run.

The fast fake upstream of bench/proxy_overhead.py (raw asyncio, its own process) streams chat chunks;
one ``conformant serve`` sits in front of it with its response store in a temporary directory. A raw
keep-alive client measures, in alternating rounds, the time from sending a streamed Responses request
to its terminal event (the Response is stored before that event leaves) three ways: ``store: false``,
``store: true``, and ``store: true`` continuing a stored response by ``previous_response_id`` (a read
of the store too). Printed: the medians, and what storing adds to the request, absolute and as a
ratio of the ``store: false`` request. With ``--workers 2`` both processes write the same file.

    python bench/responses_store.py [--rounds 3] [--requests 200] [--workers 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from proxy_overhead import MODEL, machine, percentile  # noqa: E402

from tests.support.servers import free_port, run_process  # noqa: E402

_TERMINATOR = b"\r\n0\r\n\r\n"


def _body(store: bool, previous: str | None = None) -> bytes:
    body: dict[str, object] = {"model": MODEL, "input": "hi", "stream": True, "max_output_tokens": 16}
    body["store"] = store
    if previous is not None:
        body["previous_response_id"] = previous
    return json.dumps(body).encode()


async def _measure(url: str, body: bytes, requests: int) -> tuple[list[float], bytes]:
    """Seconds to the end of each of ``requests`` streamed requests on one connection; the last body."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = f"POST /v1/responses HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
    message = (head + f"content-length: {len(body)}\r\n\r\n").encode() + body
    times: list[float] = []
    received = b""
    try:
        for _ in range(requests):
            started = time.perf_counter()
            writer.write(message)
            response = await reader.readuntil(b"\r\n\r\n")
            if not response.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"{response[:200]!r}")
            received = b""
            while not received.endswith(_TERMINATOR):
                data = await reader.read(65536)
                if not data:
                    raise RuntimeError("connection closed mid-stream")
                received += data
            times.append(time.perf_counter() - started)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return times, received


def _response_id(body: bytes) -> str:
    start = body.index(b'"id":"resp_') + len(b'"id":"')
    return body[start : body.index(b'"', start)].decode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200, help="requests per way per round")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with contextlib.ExitStack() as stack:
        directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="conformant-bench-store-"))
        port = free_port()
        command = ["python", str(ROOT / "bench" / "proxy_overhead.py"), "--serve-upstream", str(port)]
        upstream, _ = stack.enter_context(run_process(command, health_path="/health", port=port))
        port = free_port()
        serve = ["python", "-m", "conformance", "serve", "--upstream", upstream, "--port", str(port)]
        serve += ["--upstream-kind", "openai", "--workers", str(args.workers)]
        serve += ["--responses-store", str(Path(directory) / "responses.sqlite3"), "--log-level", "warning"]
        proxy, _ = stack.enter_context(run_process(serve, health_path="/health", port=port))
        _, first = asyncio.run(_measure(proxy, _body(True), 1))
        ways = {
            "store false": _body(False),
            "store true": _body(True),
            "continued": _body(True, _response_id(first)),
        }
        for body in ways.values():  # warm-up: connections and caches
            asyncio.run(_measure(proxy, body, 20))
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, body in ways.items():
                times[name] += asyncio.run(_measure(proxy, body, args.requests))[0]
    median = {name: percentile(values, 50) * 1e6 for name, values in times.items()}
    print(f"{args.rounds} rounds x {args.requests} streamed requests per way, {args.workers} worker(s)")
    for name in ways:
        p90 = percentile(times[name], 90) * 1e6
        print(f"  {name:12} to the terminal event: median {median[name]:7.0f} us  p90 {p90:7.0f} us")
    base = median["store false"]
    for name in ("store true", "continued"):
        added = median[name] - base
        print(f"  {name}: +{added:.0f} us per request, {median[name] / base:.2f}x the store-false request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
