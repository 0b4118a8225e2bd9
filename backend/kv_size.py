"""How many tokens of context the backend holds: ``--ctx-size``, or by default (0, as llama-server's
``--ctx-size 0``) the model's training context, capped by the memory the KV cache would live in.

Why the training context (issue 37): with 8,192 tokens over 4 per-slot streams, one request could use
2,048 tokens, while Codex CLI's first request is about 8,700 Gemma tokens and Claude Code's about 11,500;
Gemma 3 270M, the default model, was trained for 32,768. Why a cap: a training context can be far
larger than a machine holds (128K-token models), and llama.cpp allocates the whole KV cache up front. So
the default context is the largest that keeps the cache within ``MEMORY_SHARE`` of the memory it lives
in: available RAM, or the GPUs' free memory for the layers offloaded there (llama.cpp keeps each layer's
K and V on that layer's device).

The cache's size per token comes from the model's hyperparameters and the cache types: every attention
layer holds a K row (``n_head_kv`` x key length values) and a V row per token, the sliding-window layers
as much as the others (the backend runs with ``swa_full``, so that a cached prefix stays reusable).
Gemma 3 270M: 18 layers x (256 + 256) f16 values = 18 KiB a token, 576 MiB for 32,768 tokens, what
llama.cpp's own log reports for that context.

llama_cpp is imported lazily (as in backend/loading.py): the computation here runs without a model.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.context import CACHE_TYPES, ContextOptions
from backend.loading import LoadedModel, gpu_free_memory

__all__ = [
    "MEMORY_SHARE",
    "ContextSize",
    "KvShape",
    "Memory",
    "available_ram",
    "context_size",
    "default_context",
    "startup_line",
]

MEMORY_SHARE = 0.5
"""At most this share of the memory the KV cache lives in goes to a default context: the rest is left
for the compute buffers, the weights' pages and whatever else runs on the machine."""
GRANULE = 256
"""llama.cpp pads a context up to a multiple of 256 cells (llama-context.cpp): a capped context is
rounded down to one, so that the padding never takes it over the cap."""
NO_TRAINING_CONTEXT = 4096
"""The default where a model file states no training context (llama.cpp then refuses ``n_ctx`` 0)."""


@dataclass(frozen=True)
class KvShape:
    """What a model's KV cache holds per token: values per layer for K and for V, over ``n_layer``."""

    n_layer: int
    k_width: int
    v_width: int
    n_ctx_train: int

    @classmethod
    def of(cls, model: Any) -> KvShape:
        """A loaded model's (``llama_model *``); key and value lengths as its file states them, else
        the embedding width over the heads, as llama.cpp reads them."""
        import llama_cpp as ll

        n_head = max(1, int(ll.llama_model_n_head(model)))
        n_head_kv = int(ll.llama_model_n_head_kv(model))
        default = int(ll.llama_model_n_embd(model)) // n_head
        arch = _metadata(model, "general.architecture") or ""
        key = _metadata(model, f"{arch}.attention.key_length")
        value = _metadata(model, f"{arch}.attention.value_length")
        return cls(
            n_layer=int(ll.llama_model_n_layer(model)),
            k_width=n_head_kv * (int(key) if key and key.isdigit() else default),
            v_width=n_head_kv * (int(value) if value and value.isdigit() else default),
            n_ctx_train=int(ll.llama_model_n_ctx_train(model)),
        )

    def bytes_per_token(self, cache_type_k: str, cache_type_v: str) -> float:
        per_layer = (
            self.k_width * CACHE_TYPES[cache_type_k].value_bytes
            + self.v_width * CACHE_TYPES[cache_type_v].value_bytes
        )
        return self.n_layer * per_layer


@dataclass(frozen=True)
class Memory:
    """One place the KV cache lives: its name as the log says it, bytes free there, and the share of the
    cache's layers that go there."""

    name: str
    free: int
    share: float = 1.0

    def tokens(self, bytes_per_token: float) -> int:
        """The most tokens whose cache keeps within ``MEMORY_SHARE`` of this memory."""
        return int(MEMORY_SHARE * self.free / (bytes_per_token * self.share))


@dataclass(frozen=True)
class ContextSize:
    """The context chosen and why: ``flag`` (``--ctx-size N``), ``training`` (the model's training
    context) or ``memory`` (the training context capped by ``limit``)."""

    tokens: int
    origin: str
    n_ctx_train: int
    limit: Memory | None = None

    def reason(self) -> str:
        if self.origin == "flag":
            return "--ctx-size"
        if self.origin == "memory" and self.limit is not None:
            return (
                f"the model's training context {self.n_ctx_train} capped so that the KV cache takes at most "
                f"{MEMORY_SHARE:.0%} of the {_size(self.limit.free)} of {self.limit.name} available"
            )
        if self.n_ctx_train <= 0:
            return "the model file states no training context"
        return "the model's training context"


def startup_line(
    size: ContextSize, per_token: float, *, n_ctx: int, n_ctx_seq: int, slots: int, split_by: str | None
) -> str:
    """The start-up log's line on the context llama.cpp made (``n_ctx`` cells, padded from ``size``):
    tokens and why, how the slots share them (``split_by``: the flag that asked for a stream per slot),
    the KV cache's size."""
    if split_by is None:
        sharing = f"one KV cache for {slots} slots, any of which may fill it (unified)"
    else:
        sharing = f"a KV stream per slot ({split_by}): {slots} slots of {n_ctx_seq} tokens"
    return f"context: {n_ctx} tokens ({size.reason()}); {sharing}; KV cache about {_size(per_token * n_ctx)}"


def context_size(
    requested: int, shape: KvShape, bytes_per_token: float, memories: list[Memory], *, floor: int = GRANULE
) -> ContextSize:
    """``requested`` tokens when it is not 0; else the training context, capped by each of ``memories``
    (at least ``floor`` tokens, whatever the memory: a context too small for any prompt serves nothing)."""
    if requested > 0:
        return ContextSize(requested, "flag", shape.n_ctx_train)
    trained = shape.n_ctx_train if shape.n_ctx_train > 0 else NO_TRAINING_CONTEXT
    origin = "training"
    if bytes_per_token <= 0:  # no KV cache to speak of (a recurrent model's state is per sequence)
        return ContextSize(trained, origin, shape.n_ctx_train)
    tokens, limit = trained, None
    for memory in memories:
        fits = memory.tokens(bytes_per_token)
        if fits < tokens:
            tokens, limit = max(floor, fits - fits % GRANULE), memory
    return ContextSize(tokens, "memory" if limit else origin, shape.n_ctx_train, limit)


def default_context(loaded: LoadedModel, options: ContextOptions) -> tuple[ContextSize, float]:
    """The context for ``options`` on ``loaded`` and the KV cache's bytes per token."""
    assert loaded.model is not None
    shape = KvShape.of(loaded.model)
    per_token = shape.bytes_per_token(options.cache_type_k, options.cache_type_v)
    size = context_size(
        options.ctx_size, shape, per_token, _memories(loaded), floor=max(GRANULE, options.min_ctx_size)
    )
    return size, per_token


def _memories(loaded: LoadedModel) -> list[Memory]:
    """Where the KV cache goes: each offloaded layer's share on the GPUs, the rest in RAM."""
    offloaded = loaded.placement.offloaded_layers
    # llama.cpp counts the output layer too ("offloaded 19/19 layers"): the repeating layers come first.
    on_gpu = min(1.0, offloaded[0] / max(1, offloaded[1] - 1)) if offloaded else 0.0
    memories = []
    ram = available_ram()
    if on_gpu < 1 and ram is not None:
        memories.append(Memory("RAM", ram, 1 - on_gpu))
    if on_gpu > 0:
        memories.append(Memory("GPU memory", gpu_free_memory(), on_gpu))
    return memories


def _metadata(model: Any, key: str) -> str | None:
    import llama_cpp as ll

    buf = ctypes.create_string_buffer(256)
    n = ll.llama_model_meta_val_str(model, key.encode(), buf, ctypes.sizeof(buf))
    return buf.value.decode("utf-8", "replace") if n >= 0 else None


def available_ram(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """RAM the kernel could give without swapping (``MemAvailable``), None where it does not say."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _size(size: float) -> str:
    return f"{size / (1 << 30):.1f} GiB" if size >= 1 << 30 else f"{size / (1 << 20):,.0f} MiB"
