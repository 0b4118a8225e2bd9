"""Prefix affinity measured: two replicas of the bundled backend behind ``conformant serve --config``,
requests that share long prompt prefixes, routed with affinity and without it, in one run.

Each request is one of ``--prefixes`` long documents (a few hundred tokens each) followed by a short
question of its own, sent by ``--concurrency`` clients at once, ``max_tokens`` 1 (time to first token is
the prompt's processing). Requests of the same shape (fresh documents for each) go through two proxies
over the same two backends (``--parallel 2`` each: two cached prompts per replica), in alternating
rounds:

- "affinity": ``prefix_chars`` 512, within the document, so one document's requests go to one replica
  (a key that reaches into the question differs for every request, and spreads them like no affinity);
- "no affinity": ``prefix_chars = 0``, least outstanding requests alone (which replica a document
  lands on is left to chance, as with random or round-robin routing).

Reported: the prompt-cache hit rate (prompt tokens the backends took from a slot's cache, from their
``/health`` ``reused_prompt_tokens``, over the prompt tokens of the answers' usage) and TTFT p50/p90.

    python bench/prefix_affinity.py [--prefixes 4] [--words 200] [--requests 16] [--concurrency 2]
                                    [--rounds 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.proxy_overhead import machine, percentile  # noqa: E402
from tests.support.servers import free_port, run_process  # noqa: E402

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
]


def documents(count: int, words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        f"Document {seed}.{i}: " + " ".join(rng.choice(WORDS) for _ in range(words)) for i in range(count)
    ]


def prompts(count: int, words: int, requests: int, seed: int) -> list[str]:
    """``requests`` prompts over ``count`` documents of their own (no other run's cache holds them)."""
    docs = documents(count, words, seed)
    rng = random.Random(seed)
    return [f"{rng.choice(docs)}\nQuestion {i}: what is word {i % 50}?\nAnswer:" for i in range(requests)]


def ask(url: str, model: str, prompt: str) -> tuple[float, int]:
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "stream": True, "temperature": 0}
    body["stream_options"] = {"include_usage": True}
    started = time.perf_counter()
    ttft = None
    prompt_tokens = 0
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=300) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if ttft is None and line.startswith("data: {"):
                ttft = time.perf_counter() - started
            if '"prompt_tokens"' in line:
                usage = json.loads(line[6:]).get("usage") or {}
                prompt_tokens = usage.get("prompt_tokens") or prompt_tokens
    assert ttft is not None
    return ttft, prompt_tokens


def reused(backends: list[str]) -> int:
    return sum(int(httpx.get(b + "/health", timeout=30).json()["reused_prompt_tokens"]) for b in backends)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--prefixes", type=int, default=4)
    parser.add_argument("--words", type=int, default=200, help="words per document")
    parser.add_argument("--requests", type=int, default=16, help="requests per round per mode")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--prefix-chars", type=int, default=512, help="routing.prefix_chars with affinity")
    parser.add_argument("--affinity-slack", type=int, default=4, help="routing.affinity_slack with affinity")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        backends = []
        for _ in range(2):
            port = free_port()
            command = ["python", "-m", "conformance", "backend", "--port", str(port), "--parallel", "2"]
            command += ["--log-level", "warning"]
            backends.append(
                stack.enter_context(run_process(command, health_path="/health", port=port, timeout=600))[0]
            )
        model = httpx.get(backends[0] + "/v1/models").json()["data"][0]["id"]
        proxies = {}
        for name, chars in (("affinity", args.prefix_chars), ("no affinity", 0)):
            config = directory / f"{chars}.toml"
            entries = [
                f'[[upstream]]\nurl = "{b}"\nkind = "openai"\nmodels = ["{model}"]\n' for b in backends
            ]
            options = f"[routing]\nprefix_chars = {chars}\naffinity_slack = {args.affinity_slack}\n\n"
            config.write_text(options + "\n".join(entries))
            port = free_port()
            command = ["python", "-m", "conformance", "serve", "--config", str(config), "--port", str(port)]
            command += ["--log-level", "warning"]
            proxies[name] = stack.enter_context(run_process(command, health_path="/health", port=port))[0]
        ttfts: dict[str, list[float]] = {name: [] for name in proxies}
        hits: dict[str, list[int]] = {name: [0, 0] for name in proxies}
        for round_ in range(args.rounds):
            for position, (name, url) in enumerate(proxies.items()):
                # The same shape of work for both, on documents neither saw before: the backends' slots
                # still hold the other run's prompts, which this run's cannot reuse.
                work = prompts(args.prefixes, args.words, args.requests, 2 * round_ + position)
                before = reused(backends)
                with ThreadPoolExecutor(args.concurrency) as pool:
                    results = list(pool.map(lambda p, u=url: ask(u, model, p), work))
                hits[name][0] += reused(backends) - before
                hits[name][1] += sum(tokens for _, tokens in results)
                ttfts[name].extend(t for t, _ in results)
            print(f"round {round_ + 1}/{args.rounds} done", flush=True)
    print(
        f"\n{args.prefixes} documents of {args.words} words, {args.requests} requests x {args.rounds} rounds"
    )
    print(f"{'routing':<14}{'cache hit rate':>16}{'TTFT p50 ms':>14}{'TTFT p90 ms':>14}{'mean ms':>10}")
    for name in proxies:
        rate = hits[name][0] / hits[name][1] if hits[name][1] else float("nan")
        values = ttfts[name]
        p50, p90 = percentile(values, 50) * 1e3, percentile(values, 90) * 1e3
        print(f"{name:<14}{rate:>16.1%}{p50:>14.1f}{p90:>14.1f}{statistics.mean(values) * 1e3:>10.1f}")
    ratio = percentile(ttfts["affinity"], 50) / percentile(ttfts["no affinity"], 50)
    print(f"\nTTFT p50, affinity / no affinity: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
