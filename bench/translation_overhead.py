"""What a translated protocol's route (the Responses API, the Messages API) adds to time to first token,
against the chat route, in one run.

The fast fake upstream of bench/proxy_overhead.py (raw asyncio, its own process) streams chat chunks;
one ``conformant serve`` (one worker) sits in front of it. A raw keep-alive client measures the TTFT
of streamed requests of the same length (16 content chunks) three ways: chat to the upstream directly,
chat through the proxy, and the protocol through the proxy (``--protocol``: a translated request whose
normalized chunks become the protocol's events; a Responses request with ``store: false``, so that this
measures the translation). The three are interleaved request by request in a shuffled order, so that
each meets the machine in the same state: in alternating rounds of 300, the ratio moved from 1.24x to
1.78x between runs on a shared 2-core VM (bench/RESULTS.md runs 37 and 38). Added TTFT is a route's
median minus the direct median, with a 95% bootstrap interval for the ratio; the goals: the Responses
route's added TTFT at most 1.5x the chat route's (issue 21), the Messages route's at most 1.2x (issue
31). (This script was bench/responses_overhead.py before the Messages API.)

``--stored`` (Responses) adds a fourth kind, Responses requests stored as OpenAI's default ``store:
true`` asks. Storing happens after the last content event, so it adds nothing to its own request's
TTFT; but its work on the store's thread (SQLite, JSON) slows whichever request comes next on this
2-core machine (about 100-150 us, run 38), which in an interleaved run is any of the kinds: the stored
kind then raises every route's added TTFT alike.

Also printed: the events each route sends per request, and the proxy's CPU time per content chunk over
long streams (``--long-chunks``) on each route, in alternating rounds: the translation's cost per
event, which does not depend on what else the shared machine is doing.

    python bench/translation_overhead.py [--protocol responses|messages] [--rounds 3] [--requests 300]
        [--chunks 16] [--long-chunks 4000] [--stored]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from proxy_overhead import (  # noqa: E402
    MODEL,
    Post,
    bootstrap_interval,
    cpu_seconds,
    interleaved,
    machine,
    percentile,
    stream_body,
)

from tests.support.servers import free_port, run_process  # noqa: E402


def responses_body(chunks: int, *, store: bool = False) -> bytes:
    body = {"model": MODEL, "input": "hi", "stream": True, "max_output_tokens": chunks, "store": store}
    return json.dumps(body).encode()


def messages_body(chunks: int) -> bytes:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": chunks,
    }
    return json.dumps(body).encode()


# Each protocol's path, its streamed request of ``chunks`` content chunks, and the goal for its ratio.
PROTOCOLS: dict[str, tuple[str, Callable[[int], bytes], float]] = {
    "responses": ("/v1/responses", responses_body, 1.5),
    "messages": ("/v1/messages", messages_body, 1.2),
}


def measure(url: str, path: str, body: bytes, requests: int) -> None:
    """``requests`` streamed requests, one after another on one connection."""
    interleaved([Post(url, path, body, key=None)], requests)


def added_ratio(direct: float, chat: float, translated: float) -> float:
    """(translated - direct) / (chat - direct): the translated route's added time over the chat route's."""
    return (translated - direct) / (chat - direct) if chat > direct else float("inf")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300, help="requests per route per round")
    parser.add_argument("--chunks", type=int, default=16, help="content chunks per request (16 at least)")
    parser.add_argument("--long-chunks", type=int, default=4000, help="content chunks per long stream")
    parser.add_argument("--stored", action="store_true", help="also time Responses requests stored")
    parser.add_argument("--protocol", choices=sorted(PROTOCOLS), default="responses")
    args = parser.parse_args()
    chunks = max(args.chunks, 16)  # max_output_tokens is 16 at least
    path, body_of, goal = PROTOCOLS[args.protocol]
    translated = f"proxy {args.protocol}"
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
            translated: (proxy, path, body_of(chunks)),
        }
        if args.stored and args.protocol == "responses":
            routes["stored responses"] = (proxy, "/v1/responses", responses_body(chunks, store=True))
        ttft: dict[str, list[float]] = {name: [] for name in routes}
        events: dict[str, int] = {}
        for url, path, body in routes.values():  # warm-up: connections and caches
            measure(url, path, body, 20)
        posts = [Post(url, path, body, key=None) for url, path, body in routes.values()]
        for _ in range(args.rounds):
            results = interleaved(posts, args.requests)
            for name, result in zip(routes, results, strict=True):
                ttft[name] += result.ttft
                events[name] = result.chunks // args.requests
        cpu: dict[str, list[float]] = {"proxy chat": [], translated: []}
        long_bodies = {
            "proxy chat": stream_body(MODEL, args.long_chunks),
            translated: body_of(args.long_chunks),
        }
        for _ in range(args.rounds):
            for name in cpu:
                _, path, _ = routes[name]
                before = cpu_seconds(process.pid)
                measure(proxy, path, long_bodies[name], 1)
                cpu[name].append((cpu_seconds(process.pid) - before) / args.long_chunks)
    median = {name: percentile(times, 50) * 1e6 for name, times in ttft.items()}
    p90 = {name: percentile(times, 90) * 1e6 for name, times in ttft.items()}
    print(
        f"{args.rounds} rounds x {args.requests} requests per route, interleaved, {chunks} content chunks "
        "each, 1 stream"
    )
    for name in routes:
        print(
            f"  {name:16} TTFT median {median[name]:7.0f} us  p90 {p90[name]:7.0f} us  events {events[name]}"
        )
    chat = median["proxy chat"] - median["direct chat"]
    for name in [name for name in routes if not name.endswith("chat")]:
        added = median[name] - median["direct chat"]
        ratio = added / chat if chat > 0 else float("inf")
        low, high = bootstrap_interval([ttft["direct chat"], ttft["proxy chat"], ttft[name]], added_ratio)
        print(
            f"added TTFT: chat {chat:.0f} us, {name} {added:.0f} us, ratio {ratio:.2f}x "
            f"(95% interval {low:.2f}-{high:.2f}x; goal <= {goal}x)"
        )
    per_chunk = {name: min(values) * 1e6 for name, values in cpu.items()}  # the least disturbed round
    print(
        f"proxy CPU per content chunk over {args.long_chunks}-chunk streams (best of {args.rounds}): "
        f"chat {per_chunk['proxy chat']:.1f} us, {args.protocol} {per_chunk[translated]:.1f} us, "
        f"ratio {per_chunk[translated] / per_chunk['proxy chat']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
