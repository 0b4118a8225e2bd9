"""Smoke checks of llama.cpp on this machine: greedy decoding of a few tokens, and the AMX probe built on it.

Some virtual machines advertise Intel AMX in CPUID but fault on its tile instructions: llama.cpp then puts
weights in its AMX buffer type and the process dies (SIGILL/SIGSEGV in ``ggml_backend_amx_mul_mat``) on the
first decode. A crash cannot be caught in-process, so a child process decodes one batch with a tiny synthetic
model; if the child dies by a signal, the loader turns weight repacking off (``--no-repack``) in this process.

``CONFORMANT_AMX=off`` skips the probe and treats AMX as broken; ``CONFORMANT_AMX=on`` trusts it.
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path

PROBE_TIMEOUT_S = 120
_SILENT: object = None


class DecodeError(RuntimeError):
    """llama_decode failed or produced non-finite logits."""


def greedy_decode(model: int, prompt: Sequence[int], n_tokens: int, *, n_threads: int = 1) -> list[int]:
    """Decode ``prompt`` in one batch, then ``n_tokens`` more by argmax; return the generated token ids.

    A check that a loaded model runs (placement included), not a generator: the engine owns generation.
    """
    import llama_cpp as llama

    params = llama.llama_context_default_params()
    params.n_ctx = max(64, len(prompt) + n_tokens + 1)
    params.n_batch = params.n_ubatch = max(len(prompt), 1)
    params.n_seq_max = 1
    params.n_threads = params.n_threads_batch = n_threads
    ctx = llama.llama_init_from_model(model, params)
    if not ctx:
        raise DecodeError("cannot create a context")
    try:
        n_vocab = llama.llama_vocab_n_tokens(llama.llama_model_get_vocab(model))
        batch, out = list(prompt), []
        for _ in range(n_tokens):
            tokens = (llama.llama_token * len(batch))(*batch)
            code = llama.llama_decode(ctx, llama.llama_batch_get_one(tokens, len(batch)))
            if code != 0:
                raise DecodeError(f"llama_decode returned {code}")
            logits = llama.llama_get_logits_ith(ctx, -1)
            row = [logits[i] for i in range(n_vocab)]
            if not all(math.isfinite(v) for v in row):
                raise DecodeError("non-finite logits")
            batch = [max(range(n_vocab), key=row.__getitem__)]
            out.append(batch[0])
        return out
    finally:
        llama.llama_free(ctx)


@cache
def amx_faults() -> bool:
    """True when this CPU claims AMX and llama.cpp's AMX kernels crash here (probed once per process)."""
    setting = os.environ.get("CONFORMANT_AMX", "").strip().lower()
    if setting in ("off", "0", "false"):
        return True
    if setting in ("on", "1", "true") or not cpu_claims_amx():
        return False
    try:
        done = subprocess.run(
            [sys.executable, "-m", "backend.smoke"], capture_output=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return False
    # A negative code is a signal: the crash this probe exists for. Other failures say nothing about AMX.
    return done.returncode < 0


def cpu_claims_amx() -> bool:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        return " amx_tile" in Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False


def _probe() -> int:
    import llama_cpp as llama

    from backend.synthetic import SyntheticSpec, write_synthetic

    # The callback object must outlive every llama.cpp log call: a temporary one is freed at once, and
    # the next log line would jump into freed memory (a segfault that looks like the AMX crash).
    global _SILENT
    _SILENT = llama.llama_log_callback(lambda *_: None)
    llama.llama_log_set(_SILENT, None)
    llama.llama_backend_init()
    with tempfile.TemporaryDirectory(prefix="conformant-amx-") as tmp:
        # Q8_0 weights: a type the AMX buffer takes, so the decode runs the AMX kernels. Loaded with
        # llama.cpp's plain defaults (repacking on), not through backend.loading, which calls this probe.
        spec = SyntheticSpec(kind="dense", quant="q8_0", n_layer=1)
        path = write_synthetic(Path(tmp) / "probe.gguf", spec)
        model = llama.llama_model_load_from_file(str(path).encode(), llama.llama_model_default_params())
        if not model:
            return 3
        try:
            greedy_decode(model, [1, 300, 301, 302, 303, 304, 305, 306], 1)
        except DecodeError:
            return 4
        finally:
            llama.llama_model_free(model)
    return 0


if __name__ == "__main__":
    sys.exit(_probe())
