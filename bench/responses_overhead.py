"""What ``POST /v1/responses`` adds to time to first token, against the chat route, in one run.

The fast fake upstream of bench/proxy_overhead.py (raw asyncio, its own process) streams chat chunks;
one ``conformant serve`` (one worker) sits in front of it. A raw keep-alive client measures, in
alternating rounds, the TTFT of streamed requests of the same length (16 content chunks) three ways:
chat to the upstream directly, chat through the proxy, and the Responses API through the proxy (a
translated request whose normalized chunks become Responses events). Added TTFT is a route's median
minus the direct median; the goal (issue 21) is the Responses route's added TTFT at most 1.5x the chat
route's. Also printed: the events each route sends per request, and the proxy's CPU time per content
chunk over long streams (``--long-chunks``) on each route, in alternating rounds: the translation's
cost per event, which does not depend on what else the shared machine is doing.

    python bench/responses_overhead.py [--rounds 3] [--requests 300] [--chunks 16] [--long-chunks 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from proxy_overhead import (  # noqa: E402
    MODEL,
    Connection,
    Result,
    cpu_seconds,
    machine,
    percentile,
    stream_body,
)

from tests.support.servers import free_port, run_process  # noqa: E402

GOAL = 1.5


def responses_body(chunks: int) -> bytes:
    body = {"model": MODEL, "input": "hi", "stream": True, "max_output_tokens": chunks}
    return json.dumps(body).encode()


async def _measure(url: str, path: str, body: bytes, requests: int) -> tuple[list[float], int]:
    """TTFT of ``requests`` streamed requests, one after another on one connection; and the events of
    each."""
    host, port = url.removeprefix("http://").split(":")
    connection = Connection(host, int(port), path, key=None)
    result = Result()
    try:
        for _ in range(requests):
            await connection.post(body, result)
            if result.failures:
                raise RuntimeError(f"{path}: {connection.refused!r}")
    finally:
        await connection.close()
    return result.ttft, result.chunks // requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300, help="requests per route per round")
    parser.add_argument("--chunks", type=int, default=16, help="content chunks per request (16 at least)")
    parser.add_argument("--long-chunks", type=int, default=4000, help="content chunks per long stream")
    args = parser.parse_args()
    chunks = max(args.chunks, 16)  # max_output_tokens is 16 at least
    print(f"machine: {machine()}")
    with contextlib.ExitStack() as stack:
        port = free_port()
        command = ["python", str(ROOT / "bench" / "proxy_overhead.py"), "--serve-upstream", str(port)]
        upstream, _ = stack.enter_context(run_process(command, health_path="/health", port=port))
        port = free_port()
        serve = ["python", "-m", "conformance", "serve", "--upstream", upstream, "--port", str(port)]
        proxy, process = stack.enter_context(
            run_process([*serve, "--upstream-kind", "openai"], health_path="/health", port=port)
        )
        routes = {
            "direct chat": (upstream, "/v1/chat/completions", stream_body(MODEL, chunks)),
            "proxy chat": (proxy, "/v1/chat/completions", stream_body(MODEL, chunks)),
            "proxy responses": (proxy, "/v1/responses", responses_body(chunks)),
        }
        ttft: dict[str, list[float]] = {name: [] for name in routes}
        events: dict[str, int] = {}
        for url, path, body in routes.values():  # warm-up: connections and caches
            asyncio.run(_measure(url, path, body, 20))
        for _ in range(args.rounds):
            for name, (url, path, body) in routes.items():
                times, events[name] = asyncio.run(_measure(url, path, body, args.requests))
                ttft[name] += times
        cpu: dict[str, list[float]] = {"proxy chat": [], "proxy responses": []}
        long_bodies = {
            "proxy chat": stream_body(MODEL, args.long_chunks),
            "proxy responses": responses_body(args.long_chunks),
        }
        for _ in range(args.rounds):
            for name in cpu:
                _, path, _ = routes[name]
                before = cpu_seconds(process.pid)
                asyncio.run(_measure(proxy, path, long_bodies[name], 1))
                cpu[name].append((cpu_seconds(process.pid) - before) / args.long_chunks)
    median = {name: percentile(times, 50) * 1e6 for name, times in ttft.items()}
    p90 = {name: percentile(times, 90) * 1e6 for name, times in ttft.items()}
    print(
        f"{args.rounds} rounds x {args.requests} requests per route, {chunks} content chunks each, 1 stream"
    )
    for name in routes:
        print(
            f"  {name:16} TTFT median {median[name]:7.0f} us  p90 {p90[name]:7.0f} us  events {events[name]}"
        )
    chat = median["proxy chat"] - median["direct chat"]
    responses = median["proxy responses"] - median["direct chat"]
    ratio = responses / chat if chat > 0 else float("inf")
    print(
        f"added TTFT: chat {chat:.0f} us, responses {responses:.0f} us, ratio {ratio:.2f}x (goal <= {GOAL}x)"
    )
    per_chunk = {name: min(values) * 1e6 for name, values in cpu.items()}  # the least disturbed round
    print(
        f"proxy CPU per content chunk over {args.long_chunks}-chunk streams (best of {args.rounds}): "
        f"chat {per_chunk['proxy chat']:.1f} us, responses {per_chunk['proxy responses']:.1f} us, "
        f"ratio {per_chunk['proxy responses'] / per_chunk['proxy chat']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
