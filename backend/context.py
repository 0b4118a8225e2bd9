"""Context (KV cache, batch, threads) options: the CLI flags, their checks, and llama_context_params."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any, NamedTuple

from conformance.settings import Setting, add_settings, boolean, integer, one_of, text

__all__ = [
    "CACHE_TYPES",
    "CONTEXT_SETTINGS",
    "CacheType",
    "ContextOptions",
    "add_context_arguments",
    "context_options_from_args",
]


class CacheType(NamedTuple):
    ggml_type: int
    """The type's id in ggml.h."""
    value_bytes: float
    """Bytes a cached value takes: ggml's type size over its block size (q8_0: 34 bytes a block of 32)."""


# The KV cache types llama.cpp's server accepts.
CACHE_TYPES = {
    "f32": CacheType(0, 4.0),
    "f16": CacheType(1, 2.0),
    "bf16": CacheType(30, 2.0),
    "q8_0": CacheType(8, 34 / 32),
    "q4_0": CacheType(2, 18 / 32),
    "q4_1": CacheType(3, 20 / 32),
    "iq4_nl": CacheType(20, 18 / 32),
    "q5_0": CacheType(6, 22 / 32),
    "q5_1": CacheType(7, 24 / 32),
}
_FLASH = {"auto": -1, "off": 0, "on": 1}

# The context flags (llama.cpp's names and short forms); ContextOptions takes its defaults from them.
CTX_SIZE = Setting(
    "ctx_size",
    integer,
    0,
    "KV cache tokens, all slots together; 0: the model's training context, capped so that the cache "
    "takes at most half the memory it lives in (backend/kv_size.py)",
    aliases=("-c",),
    metavar="N",
)
PARALLEL = Setting("parallel", integer, 4, "sequence slots decoded together", aliases=("-np",), metavar="N")
BATCH_SIZE = Setting(
    "batch_size", integer, 512, "tokens per decode step (at least --parallel)", aliases=("-b",), metavar="N"
)
UBATCH_SIZE = Setting(
    "ubatch_size",
    integer,
    512,
    "physical batch size (capped at --batch-size)",
    aliases=("-ub",),
    metavar="N",
)
THREADS = Setting("threads", integer, 0, "CPU threads (0: one per core)", aliases=("-t",), metavar="N")
FLASH_ATTN = Setting(
    "flash_attn",
    one_of(sorted(_FLASH)),
    "off",
    "flash attention; off because llama.cpp's CPU kernels for it reduce in a batch-dependent order, so "
    "a greedy output would depend on the other sequences in a step",
    aliases=("-fa",),
    choices=tuple(sorted(_FLASH)),
)
CACHE_TYPE_K = Setting(
    "cache_type_k", text, "f16", "K cache type: " + ", ".join(CACHE_TYPES), aliases=("-ctk",), metavar="TYPE"
)
CACHE_TYPE_V = Setting(
    "cache_type_v",
    text,
    "f16",
    "V cache type (a quantized one needs flash attention)",
    aliases=("-ctv",),
    metavar="TYPE",
)
BATCH_INVARIANT = Setting(
    "batch_invariant",
    boolean,
    False,
    "greedy outputs independent of concurrent requests, at some cost in 4-stream throughput",
    kind="switch",
)
NO_KV_UNIFIED = Setting(
    "no_kv_unified",
    boolean,
    False,
    "a KV stream per slot, each of --ctx-size / --parallel tokens, instead of one cache that any slot "
    "may fill while the others share the rest (--batch-invariant implies it)",
    kind="switch",
)
CONTEXT_SETTINGS: tuple[Setting[Any], ...] = (
    CTX_SIZE,
    PARALLEL,
    NO_KV_UNIFIED,
    BATCH_SIZE,
    UBATCH_SIZE,
    THREADS,
    FLASH_ATTN,
    CACHE_TYPE_K,
    CACHE_TYPE_V,
    BATCH_INVARIANT,
)


class ContextOptionError(ValueError):
    """Flags that cannot work together; the CLI shows the message as is."""


@dataclass(slots=True)
class ContextOptions:
    """The context flags' values; each default and its help is its setting's, above."""

    ctx_size: int = CTX_SIZE.default
    """0: the model's training context, capped by memory (``backend.kv_size``). With a unified cache any
    slot may use all of it; with a stream per slot each has an equal share (as llama-server's)."""
    parallel: int = PARALLEL.default
    no_kv_unified: bool = NO_KV_UNIFIED.default
    batch_size: int = BATCH_SIZE.default
    ubatch_size: int = UBATCH_SIZE.default
    threads: int = THREADS.default
    flash_attn: str = FLASH_ATTN.default
    cache_type_k: str = CACHE_TYPE_K.default
    cache_type_v: str = CACHE_TYPE_V.default
    batch_invariant: bool = BATCH_INVARIANT.default
    """Schedule so that a greedy output never depends on what else runs (see backend/engine.py); costs
    part of the throughput gain of batching, so it is off by default."""

    def check(self) -> None:
        if self.parallel < 1:
            raise ContextOptionError("--parallel must be at least 1")
        if self.ctx_size < 0:
            raise ContextOptionError("--ctx-size must be 0 (the model's training context) or more")
        if 0 < self.ctx_size < self.min_ctx_size:
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

    @property
    def min_ctx_size(self) -> int:
        return 16 * self.parallel

    @property
    def kv_unified(self) -> bool:
        """One KV cache for all slots (llama-server's ``--kv-unified``, its default with automatic slots).
        Batch invariance needs a stream per slot: in one cache a sequence's cells sit wherever the others
        left room, and the attention's sums over them then group differently than when it runs alone."""
        return not self.no_kv_unified and not self.batch_invariant

    def to_params(self, n_ctx: int | None = None) -> Any:
        """llama_context_params, with ``n_ctx`` tokens where ``ctx_size`` is 0 (``backend.kv_size``)."""
        import llama_cpp as ll

        self.check()
        params = ll.llama_context_default_params()
        params.n_ctx = self.ctx_size or n_ctx or 0
        params.n_batch = self.batch_size
        params.n_ubatch = min(self.ubatch_size, self.batch_size)
        params.n_seq_max = self.parallel
        threads = self.threads or os.cpu_count() or 1
        params.n_threads = threads
        params.n_threads_batch = threads
        # A quantized V cache forces flash attention on: "auto" could resolve to off and fail late.
        params.flash_attn_type = _FLASH["on"] if self.quantized_v else _FLASH[self.flash_attn]
        params.type_k = CACHE_TYPES[self.cache_type_k].ggml_type
        params.type_v = CACHE_TYPES[self.cache_type_v].ggml_type
        params.kv_unified = self.kv_unified
        # Full-size sliding-window cache: a slot's cached prefix stays usable (prompt reuse) on SWA models.
        params.swa_full = True
        params.no_perf = True
        return params


def add_context_arguments(parser: argparse.ArgumentParser) -> None:
    add_settings(parser.add_argument_group("context"), CONTEXT_SETTINGS)


def context_options_from_args(args: argparse.Namespace) -> ContextOptions:
    opts = ContextOptions(**{setting.name: getattr(args, setting.name) for setting in CONTEXT_SETTINGS})
    opts.check()
    return opts
