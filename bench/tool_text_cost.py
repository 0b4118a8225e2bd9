"""What looking for tool calls written as text (Q79, proxy/normalizer/tool_text.py) costs a stream.

The proxy reads every content piece of a request that offered tools for the markers of ten call
syntaxes (conformance/tool_formats/catalog.py). Measured here on the normalizer, the proxy's per-chunk
hot path, with the CPU time of one process (``time.process_time``), each workload run with tools
offered and without, interleaved round by round so that a machine's load falls on both alike:

- ``prose``: an agent's answer in words, ~4 characters a chunk, no ``<`` or ``[`` in it;
- ``code``: an answer of Python and HTML, where ``<`` and ``[`` (the first characters of every marker)
  come every few chunks;
- ``call``: a Hermes call whose arguments are 2,000, 20,000 and 200,000 characters, streamed 4
  characters a chunk: the CPU per character at each size against the smallest's (linear: about 1).

Prints the median of the rounds' ratios (tools / no tools; per character against the smallest call).
Issue 34's goal: at most 1.2 with tools, and linear in the call's length.

    python bench/tool_text_cost.py [--rounds 5] [--chunks 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from conformance.request_info import RequestInfo  # noqa: E402
from proxy.normalizer import StreamNormalizer  # noqa: E402

_TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}]
_PROSE = (
    "The build failed because the test runner could not find the fixture that opens the database, so "
    "I will move the fixture into the shared conftest module and run the suite again before the commit. "
)
_CODE = (
    "def pick(items: list[int]) -> int:\n    if len(items) < 2:\n        return items[0]\n"
    '    return sorted(items)[len(items) // 2]\n\n<div class="row"><span>[draft]</span></div>\n'
)


def _chunks(text: str, size: int = 4) -> list[dict[str, Any]]:
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    out = [
        {**head, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces
    ]
    out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return out


def _run(chunks: list[dict[str, Any]], tools: bool) -> float:
    """CPU seconds to normalize ``chunks`` as one stream (fresh dicts: the normalizer may keep them)."""
    body: dict[str, Any] = {"model": "m", "messages": [], "stream": True}
    if tools:
        body["tools"] = _TOOLS
    copies = [
        {**c, "choices": [{**c["choices"][0], "delta": dict(c["choices"][0]["delta"])}]} for c in chunks
    ]
    normalizer = StreamNormalizer(RequestInfo.from_body("chat", body))
    start = time.process_time()
    for chunk in copies:
        normalizer.feed_payload(chunk)
    normalizer.upstream_done = True
    normalizer.close()
    return time.process_time() - start


def _ratio(
    rounds: int, first: Callable[[], float], second: Callable[[], float]
) -> tuple[float, float, float]:
    """Medians of ``first`` and ``second``'s times and of their rounds' ratios, interleaved."""
    a, b = [], []
    for _ in range(rounds):
        a.append(first())
        b.append(second())
    return (
        statistics.median(a),
        statistics.median(b),
        statistics.median(x / y for x, y in zip(a, b, strict=True)),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=20_000, help="chunks of the prose and code streams")
    args = parser.parse_args()
    for name, unit in (("prose", _PROSE), ("code", _CODE)):
        text = (unit * (args.chunks * 4 // len(unit) + 1))[: args.chunks * 4]
        chunks = _chunks(text)
        _run(chunks, True)  # warm up
        with_tools, without, ratio = _ratio(
            args.rounds, partial(_run, chunks, True), partial(_run, chunks, False)
        )
        per = 1e6 / len(chunks)
        print(
            f"{name:5}: {len(chunks)} chunks, {with_tools * per:.2f} us/chunk with tools, {without * per:.2f}"
            f" without: ratio {ratio:.3f} (median of {args.rounds} rounds)"
        )
    base: float | None = None
    for size in (2_000, 20_000, 200_000):
        arguments = '{"path": "a.txt", "text": "' + "x" * (size - 30) + '"}'
        text = '<tool_call>{"name": "write_file", "arguments": ' + arguments + "}</tool_call>"
        chunks = _chunks(text)
        times = sorted(_run(chunks, True) for _ in range(args.rounds))
        per_char = statistics.median(times) / len(text)
        base = base or per_char
        print(
            f"call : {len(text)} characters, {per_char * 1e9:.1f} ns/character,"
            f" {per_char / base:.3f}x the smallest's"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
