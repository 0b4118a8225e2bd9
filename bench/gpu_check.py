"""The bundled backend on a GPU, in one command that stops itself in time: CUDA offload and MoE expert
placement measured against llama.cpp's llama-server, both on one llama.cpp build made here.

    bench/gpu_check.sh OUT                 (on the GPU machine: wheels, then this script)
    python bench/gpu_check.py --out OUT [--source .gpu/llama.cpp] [--work /tmp/conformant-gpu]
                              [--budget 530] [--dry-run] [--lib-path DIR --llama-server BIN]

What it does, each step only while the budget (``--budget`` seconds, from the start) allows it:

1. Builds llama.cpp with CUDA for the GPU it finds (its architecture alone, e.g. ``90`` for Hopper) from
   the trimmed source ``bench/gpu_prepare.py`` wrote: the shared libraries llama-cpp-python loads
   (``LLAMA_CPP_LIB_PATH``) and llama-server, from one build. FlashAttention's CUDA kernels are compiled
   out (``GGML_CUDA_FA=OFF``: its 41 files still compile, empty), so that the build fits the machine's
   lease (189-225 s on an H200 machine's 16 cores, 2026-11-28); both servers run ``--flash-attn off``.
   ``--lib-path`` and ``--llama-server`` use builds made before instead (the dry run: the builds CI
   already has).
2. Meanwhile writes two synthetic models (``backend/synthetic.py``, Q4_0): a dense one of 1.1 B
   parameters and a MoE one of 1.8 B in 32 experts per layer, 4 used per token, so that where the
   experts live matters.
3. Runs ``conformant backend`` and llama-server side by side, both loaded, with the same flags: full
   offload, CPU only (dense); full offload, ``--cpu-moe`` and ``--n-cpu-moe 6`` (MoE). Each figure is
   taken from one and then the other: tokens/s at 1, 4 and 16 streams (every request exactly
   ``TOKENS`` tokens: end-of-generation tokens banned), TTFT of a 4,000-token prompt, the greedy
   answer to one prompt, and where llama.cpp reports the weights went.
4. Checks the placement asked for (experts in host memory, the rest on the GPU), greedy output equal on
   GPU and CPU, the backend within 5% of llama-server, full offload 10x CPU only; writes
   ``gpu_check.json`` and ``gpu_check.md`` to ``--out`` after every step, so a run cut short still says
   what it measured.

The dry run (``--dry-run``, tests/test_gpu_check.py) runs the same steps on a CPU with tiny models, few
tokens and a short prompt, so that the script cannot rot between the rare runs on a GPU.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from backend_throughput import PROMPTS, Target, end_of_generation_tokens, tokens_per_second  # noqa: E402

from backend.placement import LOG_INFO, LoadLog  # noqa: E402
from backend.synthetic import SyntheticSpec, expert_tensor_names, write_synthetic  # noqa: E402
from tests.support.servers import free_port, run_process  # noqa: E402

STREAMS = (1, 4, 16)
_BUILD_OFF = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DGGML_CCACHE=OFF",
]
# The CPU kernels of the tox environments' builds (tox.ini [llamacpp]): no AMX, whose kernels crash on
# CPUs that advertise it inside sandboxes that do not grant its tile state.
_CPU_FLAGS = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON"]
_CUDA_FLAGS = ["-DGGML_CUDA=ON", "-DGGML_CUDA_FA=OFF", "-DGGML_CUDA_NCCL=OFF"]


@dataclass(frozen=True)
class Scale:
    """How big a run is: the GPU run's, or the dry run's on a CPU."""

    dense: SyntheticSpec
    moe: SyntheticSpec
    tokens: int
    prompt_words: int
    n_cpu_moe: int

    @property
    def ctx_per_slot(self) -> int:
        return 2 * self.prompt_words + self.tokens + 512


REPLY = (
    "the hello world is and of to in it you that was for on are with as be at this have from or one had by"
    " can an do their up a e f g h i j k l m n o p q r s t v w x y z"
)
"""The dense model's script: 64 tokens, all different (synthetic.reply_tokens), longer than a greedy probe."""
NOISE = 0.3
"""How far the dense model's random blocks move its residual stream: real work in every kernel, and the
script's margin in the logits, so that GPU and CPU greedy answers must agree. The 2026-11-28 run's random
dense model parted at its first character (near-flat logits)."""

GPU_SCALE = Scale(
    # 1.7 B parameters: on a CPU, one stream reads all of them per token; at 1.1 B (2026-11-28) a GPU's
    # one stream, bound by kernel launches more than by memory, was 9.4x the CPU's, short of the goal.
    dense=SyntheticSpec(
        kind="dense",
        quant="q4_0",
        n_layer=24,
        n_embd=2560,
        n_head=20,
        n_head_kv=5,  # 4 query heads a KV head, as the 2026-11-28 run's model that ran (a change the less)
        n_ff=6912,
        n_ctx_train=16384,
        reply=REPLY,
        reply_noise=NOISE,
    ),
    moe=SyntheticSpec(
        kind="moe",
        quant="q4_0",
        n_layer=12,
        n_embd=2048,
        n_head=16,
        n_head_kv=4,
        n_ff=768,
        n_expert=32,
        n_expert_used=4,
        n_ctx_train=16384,
    ),
    tokens=128,
    prompt_words=4000,
    n_cpu_moe=6,
)
DRY_SCALE = Scale(
    dense=SyntheticSpec(
        kind="dense", quant="q4_0", n_layer=2, n_ctx_train=4096, reply=REPLY, reply_noise=NOISE
    ),
    moe=SyntheticSpec(kind="moe", quant="q4_0", n_layer=2, n_expert=8, n_expert_used=2, n_ctx_train=4096),
    tokens=8,
    prompt_words=300,
    n_cpu_moe=1,
)


@dataclass(frozen=True)
class Setup:
    """One placement of one model, given to both servers in their own flags."""

    name: str
    model: str  # "dense" or "moe"
    ours: tuple[str, ...]
    theirs: tuple[str, ...]
    experts_on_cpu: int | None = None  # layers whose experts must be in host memory; None: no check
    cpu_only: bool = False  # a quarter of the tokens per request: a CPU decodes a tenth as fast or less


def setups(scale: Scale) -> list[Setup]:
    """In order of what the issue's goals need first: a run cut short keeps the most telling figures."""
    n = scale.n_cpu_moe
    return [
        Setup("dense, full offload", "dense", ("--n-gpu-layers", "99"), ("-ngl", "99"), experts_on_cpu=None),
        Setup("dense, CPU only", "dense", ("--n-gpu-layers", "0"), ("-ngl", "0"), cpu_only=True),
        Setup(
            "moe, --cpu-moe",
            "moe",
            ("--n-gpu-layers", "99", "--cpu-moe"),
            ("-ngl", "99", "--cpu-moe"),
            experts_on_cpu=scale.moe.n_layer,
        ),
        Setup("moe, full offload", "moe", ("--n-gpu-layers", "99"), ("-ngl", "99"), experts_on_cpu=0),
        Setup(
            f"moe, --n-cpu-moe {n}",
            "moe",
            ("--n-gpu-layers", "99", "--n-cpu-moe", str(n)),
            ("-ngl", "99", "--n-cpu-moe", str(n)),
            experts_on_cpu=n,
        ),
    ]


REQUEST_TIMEOUT = 90.0
"""Seconds one request may take: the longest, a 4,000-token prompt on a CPU, took 1.7 s (2026-11-28)."""


class Clock:
    """The run's budget: every step asks whether what it needs is left."""

    def __init__(self, budget: float) -> None:
        self.start = time.monotonic()
        self.budget = budget

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def request(self) -> float:
        """A request's timeout: one that hangs costs its setup, not the run (2026-12-01: one request hung
        until the budget was spent, and no setup after it ran)."""
        return max(min(REQUEST_TIMEOUT, self.left()), 1.0)


@dataclass
class Report:
    """Everything measured so far; written whole after every step."""

    out: Path
    facts: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        print(text, flush=True)
        self.notes.append(text)

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        on_gpu = bool(self.facts.get("on gpu"))
        data = {
            "facts": self.facts,
            "runs": self.runs,
            "checks": checks(self.runs, on_gpu),
            "notes": self.notes,
        }
        (self.out / "gpu_check.json").write_text(json.dumps(data, indent=2) + "\n")
        (self.out / "gpu_check.md").write_text(markdown(data))


# --- the machine and the build ------------------------------------------------------------------------------


def gpu() -> dict[str, str] | None:
    """The first GPU nvidia-smi lists (name, compute capability, memory), None without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    query = "--query-gpu=name,compute_cap,memory.total,driver_version"
    done = subprocess.run([smi, query, "--format=csv,noheader"], capture_output=True, text=True, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    name, cap, memory, driver = (part.strip() for part in done.stdout.splitlines()[0].split(","))
    return {"name": name, "compute_cap": cap, "memory": memory, "driver": driver}


def pip_cublas() -> Path | None:
    """cuBLAS from the NVIDIA wheels PyTorch installs (``nvidia/cu13``), for a toolkit without its own."""
    for base in map(Path, sys.path):
        found = sorted(base.glob("nvidia/cu*/lib/libcublas.so.*")) + sorted(
            base.glob("nvidia/cublas/lib/libcublas.so.*")
        )
        if found:
            return found[0].parent.parent
    return None


def cuda_driver() -> Path | None:
    """The driver's libcuda, for a toolkit without its link stub: where the dynamic linker finds it."""
    listed = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    for line in listed.splitlines():
        if "libcuda.so" in line and "=>" in line:
            return Path(line.split("=>")[1].strip())
    return next(iter(sorted(Path("/usr/local/nvidia").glob("lib*/libcuda.so*"))), None)


def cmake_flags(arch: str | None, cublas: Path | None = None, driver: Path | None = None) -> list[str]:
    """The configure flags: CPU kernels as the tox environments build them, and CUDA for ``arch`` ("90");
    cuBLAS and the driver named where the toolkit lacks them."""
    flags = [*_BUILD_OFF, *_CPU_FLAGS]
    if arch is None:
        return flags
    flags += [*_CUDA_FLAGS, f"-DCMAKE_CUDA_ARCHITECTURES={arch}"]
    if cublas is not None:
        lib, include = cublas / "lib", cublas / "include"
        flags += [
            f"-DCUDA_cublas_LIBRARY={next(lib.glob('libcublas.so.*'))}",
            f"-DCUDA_cublasLt_LIBRARY={next(lib.glob('libcublasLt.so.*'))}",
            f"-DCMAKE_CUDA_FLAGS=-I{include}",
            f"-DCMAKE_CXX_FLAGS=-I{include}",
        ]
    if driver is not None:
        flags.append(f"-DCUDA_cuda_driver_LIBRARY={driver}")
    return flags


def configure(source: Path, build: Path, arch: str | None, log: Path) -> list[str]:
    """Run CMake's configure step; where the CUDA toolkit lacks cuBLAS or the driver's stub (a toolkit
    made of NVIDIA's wheels), again with PyTorch's cuBLAS and the driver's own library."""
    base = ["cmake", "-S", str(source), "-B", str(build), *(["-G", "Ninja"] if shutil.which("ninja") else [])]
    flags = cmake_flags(arch)
    with log.open("a") as out:
        if subprocess.run([*base, *flags], stdout=out, stderr=out, check=False).returncode == 0:
            return flags
        if arch is None:
            raise RuntimeError(f"cmake configure failed: see {log.name}")
        shutil.rmtree(build, ignore_errors=True)
        flags = cmake_flags(arch, pip_cublas(), cuda_driver())
        out.write(f"configuring again with {flags[-5:]}\n")
        out.flush()
        subprocess.run([*base, *flags], stdout=out, stderr=out, check=True)
        return flags


def build_llama(source: Path, build: Path, arch: str | None, log: Path, clock: Clock) -> tuple[Path, Path]:
    """(the libraries' folder, llama-server), built in ``build`` (again only what changed)."""
    flags = configure(source, build, arch, log)
    jobs = str(os.cpu_count() or 2)
    cmd = ["cmake", "--build", str(build), "--target", "llama", "llama-server", "-j", jobs]
    with log.open("a") as out:
        out.write(f"configure flags: {' '.join(flags)}\n")
        out.flush()
        subprocess.run(cmd, stdout=out, stderr=out, check=True, timeout=max(clock.left() - 60, 30))
    return build / "bin", build / "bin" / "llama-server"


# --- the servers -------------------------------------------------------------------------------------------


def prompt_of(words: int, tag: str) -> str:
    """A prompt of about ``words`` tokens (the synthetic vocabulary has each word as one token), starting
    with ``tag`` so that no server's prefix cache holds it."""
    vocabulary = [
        "the",
        "hello",
        "world",
        "is",
        "and",
        "of",
        "to",
        "in",
        "it",
        "you",
        "that",
        "was",
        "for",
        "on",
        "are",
        "with",
        "as",
        "be",
        "at",
        "this",
    ]
    return tag + " " + " ".join(vocabulary[i % len(vocabulary)] for i in range(words))


def time_to_first_token(url: str, body: dict[str, Any], timeout: float) -> tuple[float, int]:
    """(seconds to the first text, prompt tokens the server counted) of one streamed completion."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first, prompt_tokens = None, 0
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=timeout) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            data = line.removeprefix("data:").strip()
            if not line.startswith("data:") or data == "[DONE]":
                continue
            chunk = json.loads(data)
            if first is None and any(c.get("text") for c in chunk.get("choices") or []):
                first = time.perf_counter() - start
            prompt_tokens = int((chunk.get("usage") or {}).get("prompt_tokens") or prompt_tokens)
    if first is None:
        raise RuntimeError("no text arrived")
    return first, prompt_tokens


def greedy(url: str, ban: dict[str, float], tokens: int, timeout: float) -> str:
    body = {"model": "m", "prompt": PROMPTS[0], "max_tokens": tokens, "temperature": 0, "logit_bias": ban}
    r = httpx.post(url + "/v1/completions", json=body, timeout=timeout)
    r.raise_for_status()
    return str(r.json()["choices"][0]["text"])


def placement(log: Path, *, ours: bool) -> dict[str, Any]:
    """Where llama.cpp reported it put the weights: the backend's summary of llama.cpp's load log, and
    for llama-server the same reading (backend.placement) of the load log it prints itself, which at its
    default verbosity leaves out the tensor overrides (debug messages there)."""
    text = log.read_text(errors="replace")
    if ours:
        return {"summary": [line.split(": ", 1)[-1] for line in text.splitlines() if _is_summary(line)]}
    load = LoadLog()
    for line in text.splitlines():
        load.add(LOG_INFO, line)
    return {"summary": load.placement().summary()}


def _is_summary(line: str) -> bool:
    return any(
        k in line for k in ("model buffers:", "layers to GPU", "tensors overridden to", "tensors repacked")
    )


@dataclass(frozen=True)
class Pair:
    ours: tuple[str, Path]
    theirs: tuple[str, Path]


def logs(setup: Setup, work: Path) -> tuple[Path, Path]:
    """Where the backend and llama-server write their logs for ``setup``."""
    slug = setup.name.replace(",", "").replace(" ", "_").replace("-", "")
    return work / f"{slug}.backend.log", work / f"{slug}.llama-server.log"


def tail(log: Path, lines: int = 8) -> str:
    """The end of a server's log, for the report of a setup that failed (the logs stay on the machine)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text.splitlines()[-lines:])


@contextlib.contextmanager
def pair(setup: Setup, model: Path, env: dict[str, str], tools: dict[str, Any], work: Path) -> Iterator[Pair]:
    """Both servers loaded with ``setup``'s placement, the same context, batch and threads, and the same
    KV layout: a stream per slot, llama-server's own with ``-np`` given (the backend's unified cache, its
    default since 2026-11-29, parks idle slots' cells in host memory, a path no GPU has run yet; the
    2026-12-01 run hung on the first setup's second request, the first on the backend since that change)."""
    scale: Scale = tools["scale"]
    slots, threads = max(STREAMS), str(tools["threads"])
    ctx = str(scale.ctx_per_slot * slots)
    ours_port, theirs_port = free_port(), free_port()
    ours_cmd = [
        *("python", "-m", "backend", "--model", str(model), "--port", str(ours_port), "-t", threads),
        *("--parallel", str(slots), "--ctx-size", ctx, "--batch-size", "512", "--flash-attn", "off"),
        *("--no-kv-unified", "--log-level", "info", *setup.ours),
    ]
    theirs_cmd = [
        *(str(tools["llama_server"]), "-m", str(model), "--port", str(theirs_port), "-t", threads),
        *("-np", str(slots), "-c", ctx, "-b", "512", "-ub", "512", "-fa", "off", *setup.theirs),
    ]
    ours_log, theirs_log = logs(setup, work)
    with contextlib.ExitStack() as stack:
        ours_url, _ = stack.enter_context(
            run_process(
                ours_cmd, health_path="/v1/models", port=ours_port, timeout=240, env=env, log_path=ours_log
            )
        )
        theirs_url, _ = stack.enter_context(
            run_process(theirs_cmd, health_path="/health", port=theirs_port, timeout=240, log_path=theirs_log)
        )
        yield Pair((ours_url, ours_log), (theirs_url, theirs_log))


PROBES = 3
"""Long-prompt TTFT probes per server; the figure is their median (the first long prompt a server sees
on a GPU also pays one-time allocations: llama-server's first took 1.9 s more than its prompt eval)."""


def measure(setup: Setup, servers: Pair, tools: dict[str, Any], clock: Clock) -> dict[str, Any]:
    """Each figure taken twice, in the order backend, llama-server, llama-server, backend, so that a drift
    of the machine falls on both alike; the figure is the mean of the two."""
    scale: Scale = tools["scale"]
    ban = tools["ban"]
    tokens = scale.tokens // 4 if setup.cpu_only else scale.tokens
    sides = {"backend": servers.ours[0], "llama-server": servers.theirs[0]}
    targets = {
        name: Target(name, url, ban, ttft_under_load=True, timeout=REQUEST_TIMEOUT)
        for name, url in sides.items()
    }
    figures: dict[str, dict[str, Any]] = {name: {} for name in sides}
    # A scripted model's greedy answer is its reply, ended by its end of turn; a random model's is noise
    # that would end anywhere.
    scripted = getattr(scale, setup.model).reply is not None
    for name, target in targets.items():
        print(f"  {setup.name}: {name} warm-up and greedy answer", flush=True)
        target.complete(PROMPTS[0], 4)  # warm-up: kernels loaded, graphs built
        figures[name]["greedy"] = greedy(sides[name], {} if scripted else ban, 32, clock.request())
    abba = [*targets, *reversed(targets)]
    for n in STREAMS:
        print(f"  {setup.name}: tokens/s at {n} streams", flush=True)
        taken: dict[str, list[float]] = {name: [] for name in sides}
        for name in abba:
            taken[name].append(tokens_per_second(targets[name], n, tokens))
        for name, values in taken.items():
            figures[name][f"tps{n}"] = statistics.mean(values)
    print(f"  {setup.name}: time to first token of a long prompt", flush=True)
    for i in range(PROBES):
        for name in abba[: len(sides)] if i % 2 == 0 else abba[len(sides) :]:
            tag = f"probe{i}{name}"  # a first token no earlier prompt had: no prefix cache helps
            body = {
                "model": "m",
                "prompt": prompt_of(scale.prompt_words, tag),
                "max_tokens": 2,
                "temperature": 0,
            }
            ttft, figures[name]["prompt_tokens"] = time_to_first_token(sides[name], body, clock.request())
            figures[name].setdefault("ttft_probes", []).append(ttft)
    for name in sides:
        figures[name]["ttft_long"] = statistics.median(figures[name]["ttft_probes"])
    figures["backend"]["placement"] = placement(servers.ours[1], ours=True)
    figures["llama-server"]["placement"] = placement(servers.theirs[1], ours=False)
    return {"setup": setup.name, "model": setup.model, **figures}


# --- the verdicts ------------------------------------------------------------------------------------------


def _run(runs: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((r for r in runs if r["setup"] == name), None)


def checks(runs: list[dict[str, Any]], on_gpu: bool) -> list[dict[str, Any]]:
    """The issue's goals, each judged from what was measured (absent where its runs are missing)."""
    found: list[dict[str, Any]] = []
    gpu_dense, cpu_dense = _run(runs, "dense, full offload"), _run(runs, "dense, CPU only")
    if gpu_dense and cpu_dense:
        for n in STREAMS:
            ratio = gpu_dense["backend"][f"tps{n}"] / cpu_dense["backend"][f"tps{n}"]
            found.append(
                {
                    "check": f"dense full offload vs CPU only, {n} streams",
                    "value": ratio,
                    "goal": ">= 10",
                    "ok": ratio >= 10,
                }
            )
        gpu_text, cpu_text = gpu_dense["backend"]["greedy"], cpu_dense["backend"]["greedy"]
        same = gpu_text == cpu_text
        agree = next(
            (i for i, (g, c) in enumerate(zip(gpu_text, cpu_text, strict=False)) if g != c), len(cpu_text)
        )
        found.append(
            {
                "check": "greedy output equal on GPU and CPU (backend, dense)",
                "value": "equal" if same else f"first {agree} of {len(cpu_text)} characters equal",
                "goal": "equal",
                "ok": same,
            }
        )
    for run in runs:
        for n in STREAMS:
            ratio = run["backend"][f"tps{n}"] / run["llama-server"][f"tps{n}"]
            found.append(
                {
                    "check": f"{run['setup']}: backend vs llama-server, {n} streams",
                    "value": ratio,
                    "goal": ">= 0.95",
                    "ok": ratio >= 0.95,
                }
            )
        same = run["backend"]["greedy"] == run["llama-server"]["greedy"]
        found.append(
            {
                "check": f"{run['setup']}: greedy output equal to llama-server's",
                "value": same,
                "goal": "equal",
                "ok": same,
            }
        )
        if run.get("experts_on_cpu") is not None:
            found.append(placement_check(run, on_gpu))
    return found


_OVERRIDDEN = re.compile(r"(\d+) tensors overridden to (\S+):")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


def placement_check(run: dict[str, Any], on_gpu: bool) -> dict[str, Any]:
    """The backend's reading of llama.cpp's load log: the expert tensors of the first ``experts_on_cpu``
    layers in host memory (the rules match expert tensors alone, so their count names them) and, on a
    GPU, every layer offloaded into a CUDA buffer."""
    want = len(run["expert_tensors_on_cpu"])
    text = "\n".join(run["backend"]["placement"]["summary"])
    # Host memory: the CPU's buffer types, or a GPU's pinned host buffer ("CUDA_Host"), which llama.cpp
    # picks for CPU-placed weights when the model is offloaded, so that copies to the GPU run faster.
    on_cpu = sum(
        int(m[1]) for m in _OVERRIDDEN.finditer(text) if m[2].startswith("CPU") or m[2].endswith("_Host")
    )
    offloaded = _OFFLOADED.search(text)
    all_offloaded = bool(offloaded) and offloaded is not None and offloaded[1] == offloaded[2]
    gpu_ok = not on_gpu or (all_offloaded and "CUDA" in text)
    layers = f"{offloaded[1]}/{offloaded[2]}" if offloaded else "none"
    return {
        "check": f"{run['setup']}: placement as asked ({want} expert tensors in host memory)",
        "value": f"{on_cpu} expert tensors in host memory, layers offloaded {layers}",
        "goal": "as asked",
        "ok": on_cpu == want and gpu_ok,
    }


def markdown(data: dict[str, Any]) -> str:
    facts = data["facts"]
    lines = ["# GPU check", ""]
    lines += [f"- {k}: {v}" for k, v in facts.items()]
    lines += [
        "",
        "| setup | server | tok/s 1 | tok/s 4 | tok/s 16 | TTFT long prompt (s) | prompt tokens |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for run in data["runs"]:
        for side in ("backend", "llama-server"):
            f = run[side]
            lines.append(
                f"| {run['setup']} | {side} | {f['tps1']:.1f} | {f['tps4']:.1f} | {f['tps16']:.1f} | "
                f"{f['ttft_long']:.3f} | {f['prompt_tokens']} |"
            )
    lines += ["", "| check | value | goal | holds |", "|---|---|---|---|"]
    for c in data["checks"]:
        value = f"{c['value']:.2f}x" if isinstance(c["value"], float) else str(c["value"])
        lines.append(f"| {c['check']} | {value} | {c['goal']} | {'yes' if c['ok'] else 'NO'} |")
    lines += ["", "Placement as llama.cpp reported it:", ""]
    for run in data["runs"]:
        for side in ("backend", "llama-server"):
            lines.append(f"- {run['setup']}, {side}: " + "; ".join(run[side]["placement"]["summary"]))
    lines += ["", *(f"- {n}" for n in data["notes"])]
    return "\n".join(lines) + "\n"


# --- the run -----------------------------------------------------------------------------------------------


def write_models(scale: Scale, models: Path) -> concurrent.futures.Future[list[Path]]:
    """Both models written in processes of their own (a model already there from an earlier run is kept)."""
    models.mkdir(parents=True, exist_ok=True)
    pool = concurrent.futures.ProcessPoolExecutor(2)
    jobs = []
    for name, spec in (("dense", scale.dense), ("moe", scale.moe)):
        path = models / f"{name}-{spec.n_layer}x{spec.n_embd}-{spec.n_expert if name == 'moe' else 0}.gguf"
        jobs.append(pool.submit(_existing_or_written, path, spec))
    waiter: concurrent.futures.Future[list[Path]] = concurrent.futures.Future()

    def done(_: object) -> None:
        if all(j.done() for j in jobs):
            try:
                waiter.set_result([j.result() for j in jobs])
            except Exception as exc:
                waiter.set_exception(exc)
            pool.shutdown(wait=False)

    for job in jobs:
        job.add_done_callback(done)
    return waiter


def _existing_or_written(path: Path, spec: SyntheticSpec) -> Path:
    return path if path.exists() else write_synthetic(path, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument(
        "--source", type=Path, default=ROOT / ".gpu" / "llama.cpp", help="bench/gpu_prepare.py's source"
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/conformant-gpu"), help="build, models, logs")
    parser.add_argument("--budget", type=float, default=530, help="seconds; the run stops itself before")
    parser.add_argument("--dry-run", action="store_true", help="tiny models and few tokens, on any machine")
    parser.add_argument("--lib-path", type=Path, help="a llama.cpp build's libraries (skips the build)")
    parser.add_argument("--llama-server", type=Path, help="llama-server of that build (skips the build)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--only", help="the setups to run, by number from 1, comma-separated (default: all)")
    a = parser.parse_args(argv)
    clock = Clock(a.budget)
    report = Report(a.out)
    scale = DRY_SCALE if a.dry_run else GPU_SCALE
    card = gpu()
    arch = card["compute_cap"].replace(".", "") if card else None
    a.work.mkdir(parents=True, exist_ok=True)
    report.facts.update(
        {
            "gpu": f"{card['name']}, {card['memory']}, driver {card['driver']}"
            if card
            else "none (CPU only)",
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "load average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "llama.cpp": (a.source.parent / "VERSION").read_text().strip()
            if (a.source.parent / "VERSION").exists()
            else str(a.source),
            "threads": a.threads,
            "tokens per request": scale.tokens,
            "dry run": a.dry_run,
            "on gpu": card is not None,
        }
    )
    report.write()
    models = write_models(scale, a.work / "models")
    try:
        lib_path, llama_server = built(a, arch, clock, report)
    except (subprocess.SubprocessError, RuntimeError, OSError) as exc:
        report.note(f"build failed after {clock.elapsed():.0f} s: {exc}")
        report.write()
        return 1
    try:
        dense, moe = models.result(timeout=max(clock.left(), 1))
    except TimeoutError:
        report.note(f"the models were not written within the budget ({clock.elapsed():.0f} s)")
        report.write()
        return 1
    sizes = ", ".join(f"{m.name} {m.stat().st_size >> 20} MiB" for m in (dense, moe))
    report.note(f"models written by {clock.elapsed():.0f} s: {sizes}")
    os.environ["LLAMA_CPP_LIB_PATH"] = str(lib_path)
    env = {"LLAMA_CPP_LIB_PATH": str(lib_path)}
    ban = {str(t): -100.0 for t in end_of_generation_tokens(str(dense))}
    tools = {"scale": scale, "threads": a.threads, "llama_server": llama_server, "ban": ban}
    chosen = setups(scale)
    if a.only:
        chosen = [chosen[int(i) - 1] for i in a.only.split(",")]
    run_setups(chosen, {"dense": dense, "moe": moe}, env, tools, clock, report, a.work)
    report.note(f"done in {clock.elapsed():.0f} s")
    report.write()
    return 0


def built(a: argparse.Namespace, arch: str | None, clock: Clock, report: Report) -> tuple[Path, Path]:
    if a.lib_path and a.llama_server:
        report.note(f"builds given: libraries {a.lib_path}, llama-server {a.llama_server}")
        return a.lib_path, a.llama_server
    log = a.out / "build.log"
    a.out.mkdir(parents=True, exist_ok=True)
    lib_path, llama_server = build_llama(a.source, a.work / "build", arch, log, clock)
    report.facts["build"] = f"CUDA arch {arch}" if arch else "CPU only"
    report.note(f"built by {clock.elapsed():.0f} s")
    return lib_path, llama_server


def run_setups(
    chosen: list[Setup],
    models: dict[str, Path],
    env: dict[str, str],
    tools: dict[str, Any],
    clock: Clock,
    report: Report,
    work: Path,
) -> None:
    spent: list[float] = []
    for setup in chosen:
        # A setup takes about what the last one took; one not expected to finish is not begun.
        expected = statistics.median(spent) if spent else 30.0
        if clock.left() < expected + 15:
            report.note(f"skipped {setup.name}: {clock.left():.0f} s left, a setup took {expected:.0f} s")
            continue
        begun = time.monotonic()
        try:
            with pair(setup, models[setup.model], env, tools, work) as servers:
                run = measure(setup, servers, tools, clock)
        except (httpx.HTTPError, RuntimeError, OSError) as exc:
            ours, theirs = logs(setup, work)
            report.note(
                f"{setup.name} failed: {exc}; backend log: {tail(ours)}; llama-server log: {tail(theirs)}"
            )
            continue
        if setup.experts_on_cpu is not None:
            spec: SyntheticSpec = getattr(tools["scale"], setup.model)
            run["experts_on_cpu"] = setup.experts_on_cpu
            run["expert_tensors_on_cpu"] = [
                t for t in expert_tensor_names(spec) if int(t.split(".")[1]) < setup.experts_on_cpu
            ]
        spent.append(time.monotonic() - begun)
        report.runs.append(run)
        report.note(f"{setup.name}: measured in {spent[-1]:.0f} s ({clock.elapsed():.0f} s in all)")
        report.write()


if __name__ == "__main__":
    sys.exit(main())
