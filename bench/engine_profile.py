"""Where the bundled backend's engine spends a decode step, at N streams (issue 23).

Starts ``conformant backend`` (Gemma 3 270M by default, 16 slots, 2 threads, the bench's settings) and
keeps ``--streams`` greedy completions of 256 tokens running, then:

1. for 15 s, unprofiled: decode steps per second (``/health``) and each thread's CPU (its run time in
   ``/proc/PID/task/*/schedstat``);
2. for 15 s, under ``py-spy record --native`` (200 Hz): the engine thread's samples by where they are:
   ``llama_decode`` computing or waiting in OpenMP (libgomp at the top of the stack), sampling, batch
   building, the stop scan, detokenizing, handing events to the event loop. py-spy slows the process
   (about half the steps per second), and calls through ctypes cost more under it than they do alone:
   read its shares as where the time goes, the unprofiled step rate as how fast it goes.

    python bench/engine_profile.py [--streams 4] [--llama-server PATH] [--model PATH]

``--llama-server`` runs the backend on the llama.cpp library beside that binary (``LLAMA_CPP_LIB_PATH``),
as bench/backend_throughput.py does. Needs ``py-spy`` (``pip install py-spy``) and the rights to attach.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from backend_throughput import (  # noqa: E402
    add_model_arguments,
    backend_command,
    end_of_generation_tokens,
    model_path,
    same_library,
)

from tests.support.servers import free_port, run_process  # noqa: E402

_WHERE = [  # (share's name, any of these frames in the stack), the first that matches
    ("sampling", ("sample (backend/sampling.py", "llama_sampler_sample")),
    ("handing events to the loop", ("_hand_over (backend/engine.py",)),
    ("detokenizing", ("piece (backend/vocab.py",)),
    ("stop scan", ("add (backend/engine.py",)),
    ("batch building, other decode-call Python", ("_decode (backend/engine.py",)),
    ("waiting for work", ("wait (threading.py",)),
]


def classify(stack: str) -> str:
    if "llama_decode" in stack:
        return "llama_decode: waiting in OpenMP" if "libgomp" in stack.rsplit(";", 1)[-1] else "llama_decode"
    return next((name for name, frames in _WHERE if any(f in stack for f in frames)), "other engine Python")


def thread_cpu(pid: int) -> dict[str, int]:
    """Nanoseconds of CPU per thread (its name and id)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            name = (task / "comm").read_text().strip()
            out[f"{name} {task.name}"] = int((task / "schedstat").read_text().split()[0])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--streams", type=int, default=4)
    add_model_arguments(parser, threads=False)
    parser.add_argument("--llama-server", help="run on the llama.cpp library beside this llama-server")
    a = parser.parse_args()
    a.model = model_path(a.model)
    port = free_port()
    command = backend_command(a.model, port, threads=2, slots=16)
    env = same_library(a.llama_server)
    with run_process(command, health_path="/v1/models", port=port, timeout=180, env=env) as (url, proc):
        ban = {str(token): -100 for token in end_of_generation_tokens(a.model)}  # answers of full length
        stop = threading.Event()

        def stream(i: int) -> None:
            n = 0
            while not stop.is_set():
                body = {"model": "m", "prompt": f"Story {i}.{n}: once upon a time", "max_tokens": 256}
                body |= {"temperature": 0, "logit_bias": ban}
                httpx.post(url + "/v1/completions", json=body, timeout=600).raise_for_status()
                n += 1

        with concurrent.futures.ThreadPoolExecutor(a.streams) as pool:
            running = [pool.submit(stream, i) for i in range(a.streams)]
            time.sleep(5)
            steps, cpu, started = (
                httpx.get(url + "/health").json()["decode_steps"],
                thread_cpu(proc.pid),
                time.time(),
            )
            time.sleep(15)
            took = time.time() - started
            rate = (httpx.get(url + "/health").json()["decode_steps"] - steps) / took
            after = thread_cpu(proc.pid)
            print(f"{a.streams} streams, unprofiled: {rate:.2f} decode steps/s; CPU per thread:")
            for name in sorted(after, key=lambda n: cpu.get(n, 0) - after[n])[:4]:
                print(f"  {name:30s} {(after[name] - cpu.get(name, 0)) / 1e9 / took:6.1%} of a core")
            with tempfile.TemporaryDirectory() as directory:
                raw = Path(directory) / "stacks.txt"
                spy = ["py-spy", "record", "--native", "--threads", "-r", "200", "-d", "15", "-f", "raw"]
                subprocess.run([*spy, "-o", str(raw), "-p", str(proc.pid)], check=True, capture_output=True)
                lines = raw.read_text().splitlines()
            stop.set()
            for future in running:
                future.result()
    shares: collections.Counter[str] = collections.Counter()
    for line in lines:
        stack, _, samples = line.rpartition(" ")
        if "_run (backend/engine.py" in stack:
            shares[classify(stack)] += int(samples)
    total = sum(shares.values())
    print(f"engine thread under py-spy ({total} samples):")
    for name, count in shares.most_common():
        print(f"  {name:42s} {count / total:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
