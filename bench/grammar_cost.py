"""What grammar-constrained decoding costs: single-stream tokens/s with and without a grammar, same model,
same engine, one run.

    python bench/grammar_cost.py [--model PATH] [--threads 2] [--tokens 96] [--rounds 5]

Each round runs every case once, one request at a time on a one-slot engine (in process: no HTTP, so
only decoding and sampling are measured), and a case's figure is the median over rounds. Tokens/s counts
decode steps from the first generated token to the last (the prompt's prefill is left out). Cases:

- ``unconstrained``: greedy, ``ignore_eos``, exactly ``--tokens`` tokens;
- ``json_schema``: ``response_format`` with a schema whose free ``story`` string lets the model write
  up to ``--tokens`` tokens inside the grammar;
- ``tools required``: ``tool_choice: "required"`` with a tool whose free ``text`` argument does the same
  (Gemma 3's template knows no tools: the generic JSON format, grammar from the first token);
- ``json_schema, grammar on every candidate``: the json_schema case with the grammar applied to the
  whole vocabulary at every step (the sampler's path for a refused token), to show what checking the
  drawn token first saves.

The goal (issue 20): a constrained stream at most 15% slower than an unconstrained one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from backend_throughput import add_model_arguments, model_path
from proxy_overhead import machine

from backend.context import ContextOptions
from backend.requests import parse_chat_request
from backend.sampling import Sampler
from backend.service import Backend

ASK = [{"role": "user", "content": "Tell me a long story about a dragon who learns to cook."}]
STORY = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "story": {"type": "string"}},
    "required": ["title", "story"],
    "additionalProperties": False,
}
TOOL = {
    "type": "function",
    "function": {
        "name": "write_story",
        "description": "Write a story",
        "parameters": {
            "type": "object",
            "properties": {"title": {"type": "string"}, "text": {"type": "string"}},
            "required": ["title", "text"],
        },
    },
}


def cases(tokens: int) -> dict[str, dict[str, Any]]:
    base: dict[str, Any] = {"messages": ASK, "temperature": 0, "max_tokens": tokens}
    schema = {"type": "json_schema", "json_schema": {"name": "story", "schema": STORY, "strict": True}}
    return {
        "unconstrained": {**base, "ignore_eos": True},
        "json_schema": {**base, "response_format": schema},
        "tools required": {**base, "tools": [TOOL], "tool_choice": "required"},
        "json_schema, grammar on every candidate": {**base, "response_format": schema, "_full": True},
    }


def _grammar_on_every_candidate(self: Sampler, ctx: Any, index: int) -> int:
    import llama_cpp as ll
    import numpy as np

    logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx, index), shape=(self.n_vocab,))
    self.kept = None  # no shortlist: the grammar over the whole vocabulary
    token = self._redraw(logits)
    ll.llama_sampler_accept(self.grammar, token)
    ll.llama_sampler_accept(self.chain, token)
    return token


def decode_rate(backend: Backend, body: dict[str, Any]) -> tuple[float, int]:
    """(tokens/s over the decode steps, tokens generated) for one request."""
    full = body.pop("_full", False)
    req = parse_chat_request(body)
    prompts = backend.prompts(req)
    done = threading.Event()
    stamps: list[float] = []
    result: dict[str, Any] = {}

    def emit(event: Any) -> None:
        if event.text and not stamps:
            stamps.append(time.perf_counter())
        if event.finish_reason is not None or event.error is not None:
            result.update(end=time.perf_counter(), n=event.completion_tokens, error=event.error)
            done.set()

    original: Callable[..., int] = Sampler.sample
    if full:
        Sampler.sample = _grammar_on_every_candidate  # type: ignore[method-assign]
    try:
        backend.engine.submit(backend.jobs(req, prompts, emit))
        done.wait()
    finally:
        Sampler.sample = original  # type: ignore[method-assign]
    if result["error"]:
        raise RuntimeError(result["error"])
    steps = int(result["n"]) - 1
    return steps / (result["end"] - stamps[0]), int(result["n"])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--skip-full", action="store_true", help="leave out the grammar-on-every-candidate case (slow)"
    )
    args = parser.parse_args()
    args.model = model_path(args.model)
    options = ContextOptions(ctx_size=1024, parallel=1, threads=args.threads)
    backend = Backend.open(args.model, context=options)
    rates: dict[str, list[float]] = {}
    counts: dict[str, list[int]] = {}
    try:
        decode_rate(backend, cases(8)["unconstrained"])  # warm-up
        for _ in range(args.rounds):
            for name, body in cases(args.tokens).items():
                if args.skip_full and body.get("_full"):
                    continue
                rate, n = decode_rate(backend, body)
                print(f"  {name}: {n} tokens, {rate:.1f} tokens/s", flush=True)
                rates.setdefault(name, []).append(rate)
                counts.setdefault(name, []).append(n)
    finally:
        backend.close()
    print(f"machine: {machine()}")
    model = Path(args.model).name
    print(f"model: {model}, threads {args.threads}, {args.rounds} rounds, up to {args.tokens} tokens")
    base = statistics.median(rates["unconstrained"])
    print(f"{'case':<42} {'tokens':>7} {'tokens/s':>9} {'vs unconstrained':>17}")
    for name, values in rates.items():
        rate = statistics.median(values)
        cost = 1 - rate / base
        tokens = statistics.median(counts[name])
        print(f"{name:<42} {tokens:>7.0f} {rate:>9.1f} {rate / base:>12.3f}x ({cost:+.1%} cost)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
