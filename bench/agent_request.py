"""What the proxy adds to an agent's request, against the stack floor and a direct connection, in one run.

bench/proxy_overhead.py measures the proxy on a request of a few dozen bytes; an agent's request is a
long one (issue 35: "prompts of 10-40k tokens, tools on every turn"): here a streamed chat request of
about 55 KB, a system prompt of 5,000 words, eight function tools with JSON Schemas and six turns of
tool calls and their results, deterministic from a seed. The same fast upstream, floor and raw client
as bench/proxy_overhead.py (its module), one closed-loop stream, the targets in alternating rounds:

- added TTFT p50: the TTFT median through a target minus the direct connection's, and its ratio to the
  floor's (what the stack costs for the same request: uvicorn, the body read, the upstream transport);
- CPU per request: the target process's CPU time over the round's requests (``cpu_seconds``), and its
  ratio to the floor's;
- with ``--baseline DIR``, the proxy run from another checkout beside this one: ratios, this / that.

    python bench/agent_request.py [--rounds 3] [--requests 300] [--chunks 16] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import proxy_overhead as overhead  # noqa: E402

_WORDS = [
    "the",
    "agent",
    "reads",
    "a",
    "file",
    "in",
    "the",
    "repository",
    "then",
    "calls",
    "a",
    "tool",
    "and",
    "writes",
    "the",
    "answer",
    "to",
    "its",
    "user",
]


def _text(draw: random.Random, words: int) -> str:
    return " ".join(draw.choice(_WORDS) for _ in range(words))


def agent_body(chunks: int) -> bytes:
    """A streamed chat request shaped like an agent's turn (see the module), the same bytes every run."""
    draw = random.Random(35)
    properties = {f"arg{j}": {"type": "string", "description": _text(draw, 15)} for j in range(5)}
    parameters = {
        "type": "object",
        "properties": properties,
        "required": ["arg0"],
        "additionalProperties": False,
    }
    tools = [
        {
            "type": "function",
            "function": {"name": f"tool_{i}", "description": _text(draw, 60), "parameters": parameters},
        }
        for i in range(8)
    ]
    messages: list[dict[str, Any]] = [{"role": "system", "content": _text(draw, 5000)}]
    for turn in range(6):
        call = {"name": "tool_1", "arguments": json.dumps({"arg0": _text(draw, 10)})}
        messages += [
            {"role": "user", "content": _text(draw, 200)},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{turn}", "type": "function", "function": call}],
            },
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": _text(draw, 400)},
        ]
    messages.append({"role": "user", "content": "Go on."})
    body = {
        "model": overhead.MODEL,
        "messages": messages,
        "tools": tools,
        "stream": True,
        "max_tokens": chunks,
    }
    return json.dumps(body).encode()


def _measure(url: str, body: bytes, requests: int) -> overhead.Result:
    """``requests`` of ``body`` one after another on one connection (a single post ``interleaved``)."""
    return overhead.interleaved([overhead.Post(url, "/v1/chat/completions", body)], requests)[0]


def _targets(stack: contextlib.ExitStack, args: argparse.Namespace) -> list[overhead.Target]:
    """bench/proxy_overhead.py's: the upstream (``direct``), one ``conformant serve``, ``--baseline``'s
    where given, and the floor."""
    wanted = argparse.Namespace(pace_ms=20.0, workers=1, baseline=args.baseline, routed=0)
    return overhead._targets(stack, wanted, Path(stack.enter_context(tempfile.TemporaryDirectory())))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds over the targets")
    parser.add_argument("--requests", type=int, default=300, help="requests per target and round")
    parser.add_argument("--chunks", type=int, default=16, help="content chunks per answer")
    parser.add_argument("--baseline", help="a checkout whose proxy is measured beside this one")
    args = parser.parse_args()
    body = agent_body(args.chunks)
    print(f"machine: {overhead.machine()}")
    print(
        f"request: {len(body):,} bytes, {args.chunks} content chunks, {args.rounds} rounds of {args.requests}"
    )
    with contextlib.ExitStack() as stack:
        targets = _targets(stack, args)
        cpu: dict[str, list[float]] = {t.name: [] for t in targets}
        for target in targets:  # warm: the first requests of a process pay for its imports and caches
            _measure(target.url, body, 50)
        for _ in range(args.rounds):
            for target in targets:
                overhead.settle(targets)
                before = overhead.cpu_seconds(target.pid) if target.pid else 0.0
                result = _measure(target.url, body, args.requests)  # (a failure raises)
                used = (overhead.cpu_seconds(target.pid) if target.pid else 0.0) - before
                cpu[target.name].append(used / args.requests)
                target.ttft.setdefault("agent", []).extend(result.ttft)
    _report(targets, cpu)
    return 0


def _report(targets: list[overhead.Target], cpu: dict[str, list[float]]) -> None:
    direct = statistics.median(targets[0].ttft["agent"])
    added = {t.name: statistics.median(t.ttft["agent"]) - direct for t in targets}
    used = {name: statistics.median(values) for name, values in cpu.items()}
    print(f"\n{'target':<14}{'TTFT p50':>10}{'added':>10}{'x floor':>9}{'CPU/request':>13}{'x floor':>9}")
    for target in targets:
        name = target.name
        p50 = statistics.median(target.ttft["agent"])
        ratio = added[name] / added["floor"] if added["floor"] > 0 else float("nan")
        print(
            f"{name:<14}{p50 * 1e3:>8.3f}ms{added[name] * 1e3:>8.3f}ms{ratio:>8.2f}x"
            f"{used[name] * 1e6:>11.0f}us{used[name] / used['floor']:>8.2f}x"
        )
    if overhead.BASELINE in added:
        this, that = added["conformant"], added[overhead.BASELINE]
        print(f"\nthis checkout / --baseline: added TTFT p50 {this / that:.2f}x", end="")
        print(f", CPU per request {used['conformant'] / used[overhead.BASELINE]:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
