"""Context (KV cache, batch, threads) options: the CLI flags, their checks, and llama_context_params."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["CACHE_TYPES", "ContextOptions", "add_context_arguments", "context_options_from_args"]

# ggml type ids (ggml.h) for the KV cache types llama.cpp's server accepts.
CACHE_TYPES = {
    "f32": 0,
    "f16": 1,
    "bf16": 30,
    "q8_0": 8,
    "q4_0": 2,
    "q4_1": 3,
    "iq4_nl": 20,
    "q5_0": 6,
    "q5_1": 7,
}
_FLASH = {"auto": -1, "off": 0, "on": 1}


class ContextOptionError(ValueError):
    """Flags that cannot work together; the CLI shows the message as is."""


@dataclass(slots=True)
class ContextOptions:
    ctx_size: int = 8192
    """Total KV cache tokens, shared equally by the ``parallel`` slots (llama.cpp's server does the same)."""
    parallel: int = 4
    batch_size: int = 512
    ubatch_size: int = 512
    threads: int = 0
    """0: one per CPU core."""
    flash_attn: str = "off"
    """Off by default: llama.cpp's CPU flash-attention kernels reduce in a batch-dependent order, so a
    sequence's greedy output would change with the other sequences in the step."""
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    batch_invariant: bool = False
    """Schedule so that a greedy output never depends on what else runs (see backend/engine.py); costs
    part of the throughput gain of batching, so it is off by default."""

    def check(self) -> None:
        if self.parallel < 1:
            raise ContextOptionError("--parallel must be at least 1")
        if self.ctx_size < 16 * self.parallel:
            raise ContextOptionError(
                f"--ctx-size {self.ctx_size} leaves too little per slot for --parallel {self.parallel}"
            )
        if self.batch_size < self.parallel:
            raise ContextOptionError(
                "--batch-size must be at least --parallel (one token per running stream)"
            )
        for flag, value in (("--cache-type-k", self.cache_type_k), ("--cache-type-v", self.cache_type_v)):
            if value not in CACHE_TYPES:
                raise ContextOptionError(f"{flag} {value!r} is not one of {', '.join(CACHE_TYPES)}")
        if self.flash_attn not in _FLASH:
            raise ContextOptionError("--flash-attn takes on, off or auto")
        if self.quantized_v and self.flash_attn == "off":
            # llama.cpp stores a quantized V cache only for its flash-attention kernels; without them the
            # context fails to build with a log line most users never see.
            raise ContextOptionError(
                f"--cache-type-v {self.cache_type_v} needs flash attention: use --flash-attn on (or auto)"
            )

    @property
    def quantized_v(self) -> bool:
        return self.cache_type_v not in ("f32", "f16", "bf16")

    def to_params(self) -> Any:
        import llama_cpp as ll

        self.check()
        params = ll.llama_context_default_params()
        params.n_ctx = self.ctx_size
        params.n_batch = self.batch_size
        params.n_ubatch = min(self.ubatch_size, self.batch_size)
        params.n_seq_max = self.parallel
        threads = self.threads or os.cpu_count() or 1
        params.n_threads = threads
        params.n_threads_batch = threads
        # A quantized V cache forces flash attention on: "auto" could resolve to off and fail late.
        params.flash_attn_type = _FLASH["on"] if self.quantized_v else _FLASH[self.flash_attn]
        params.type_k = CACHE_TYPES[self.cache_type_k]
        params.type_v = CACHE_TYPES[self.cache_type_v]
        params.kv_unified = False
        # Full-size sliding-window cache: a slot's cached prefix stays usable (prompt reuse) on SWA models.
        params.swa_full = True
        params.no_perf = True
        return params


def add_context_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("context")
    d = ContextOptions()
    group.add_argument(
        "--ctx-size", "-c", type=int, default=d.ctx_size, help="KV cache tokens, all slots together"
    )
    group.add_argument(
        "--parallel", "-np", type=int, default=d.parallel, help="sequence slots decoded together"
    )
    group.add_argument("--batch-size", "-b", type=int, default=d.batch_size, help="tokens per decode step")
    group.add_argument("--ubatch-size", "-ub", type=int, default=d.ubatch_size, help="physical batch size")
    group.add_argument("--threads", "-t", type=int, default=d.threads, help="CPU threads (0: all cores)")
    group.add_argument("--flash-attn", "-fa", choices=sorted(_FLASH), default=d.flash_attn)
    group.add_argument(
        "--cache-type-k", "-ctk", default=d.cache_type_k, help="K cache type: " + ", ".join(CACHE_TYPES)
    )
    group.add_argument(
        "--cache-type-v",
        "-ctv",
        default=d.cache_type_v,
        help="V cache type (quantized needs flash attention)",
    )
    group.add_argument(
        "--batch-invariant",
        action="store_true",
        help="greedy outputs independent of concurrent requests, at some cost in 4-stream throughput",
    )


def context_options_from_args(args: argparse.Namespace) -> ContextOptions:
    opts = ContextOptions(
        ctx_size=args.ctx_size,
        parallel=args.parallel,
        batch_size=args.batch_size,
        ubatch_size=args.ubatch_size,
        threads=args.threads,
        flash_attn=args.flash_attn,
        cache_type_k=args.cache_type_k,
        cache_type_v=args.cache_type_v,
        batch_invariant=args.batch_invariant,
    )
    opts.check()
    return opts
