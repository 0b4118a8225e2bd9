"""The default context (issue 37): the model's training context, capped by memory, said at start-up."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from backend import kv_size
from backend.context import ContextOptionError, ContextOptions
from backend.kv_size import GRANULE, ContextSize, KvShape, Memory, available_ram, context_size
from backend.service import Backend
from backend.synthetic import SyntheticSpec, write_synthetic

MIB = 1 << 20
GEMMA = KvShape(n_layer=18, k_width=256, v_width=256, n_ctx_train=32768)
"""Gemma 3 270M: 18 layers, one KV head of 256 values for K and for V."""


def test_the_kv_cache_per_token_follows_the_layers_and_the_cache_types() -> None:
    # 576 MiB for 32,768 tokens in f16, what llama.cpp's log says of Gemma 3 270M's cache (96 + 480 MiB).
    assert GEMMA.bytes_per_token("f16", "f16") * 32768 == 576 * MIB
    assert GEMMA.bytes_per_token("q8_0", "q4_0") == 18 * (256 * 34 / 32 + 256 * 18 / 32)


def test_the_default_is_the_training_context_where_memory_allows() -> None:
    size = context_size(0, GEMMA, 18432, [Memory("RAM", 8 << 30)])
    assert size == ContextSize(32768, "training", 32768)
    assert size.reason() == "the model's training context"


def test_the_default_is_capped_so_the_cache_takes_half_the_memory_it_lives_in() -> None:
    size = context_size(0, GEMMA, 18432, [Memory("RAM", 200 * MIB)])
    # Half of 200 MiB is 5,688 tokens of 18 KiB, down to a multiple of 256 (llama.cpp pads up to one).
    assert (size.tokens, size.origin) == (5632, "memory")
    assert size.tokens * 18432 <= 100 * MIB
    assert size.reason() == (
        "the model's training context 32768 capped so that the KV cache takes at most 50% of the 200 MiB "
        "of RAM available"
    )


def test_a_gpu_holding_half_the_layers_bounds_its_half_of_the_cache() -> None:
    memories = [Memory("RAM", 64 << 30, 0.5), Memory("GPU memory", 200 * MIB, 0.5)]
    size = context_size(0, GEMMA, 18432, memories)
    assert (size.tokens, size.limit) == (11264, memories[1])  # 100 MiB for half of 18 KiB a token


def test_a_flag_is_taken_as_given_and_no_memory_leaves_a_floor() -> None:
    assert context_size(65536, GEMMA, 18432, [Memory("RAM", MIB)]) == ContextSize(65536, "flag", 32768)
    assert context_size(0, GEMMA, 18432, [Memory("RAM", MIB)], floor=512).tokens == 512
    assert context_size(0, GEMMA, 18432, [Memory("RAM", MIB)]).tokens == GRANULE
    no_training = KvShape(2, 128, 128, 0)
    assert context_size(0, no_training, 1024, []).tokens == 4096


def test_available_ram_reads_memavailable(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemAvailable:    1048576 kB\n")
    assert available_ram(meminfo) == 1 << 30
    assert available_ram(tmp_path / "none") is None


def test_a_negative_or_too_small_context_is_refused() -> None:
    with pytest.raises(ContextOptionError, match="--ctx-size must be 0"):
        ContextOptions(ctx_size=-1).check()
    with pytest.raises(ContextOptionError, match="too little per slot"):
        ContextOptions(ctx_size=32, parallel=4).check()
    ContextOptions().check()  # 0: the model's


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SyntheticSpec(n_ctx_train=4096)  # 2 layers, 2 KV heads of 64: 1 KiB a token in f16
    return write_synthetic(tmp_path_factory.mktemp("models") / "dense.gguf", spec)


def _started(model: Path, options: ContextOptions, caplog: pytest.LogCaptureFixture) -> tuple[str, int, int]:
    with caplog.at_level(logging.INFO, logger="conformant.backend"):
        backend = Backend.open(str(model), context=options)
    try:
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("context: ")]
        assert len(lines) == 1, caplog.records
        return lines[0], backend.engine.n_cells, backend.engine.n_ctx_seq
    finally:
        backend.close()


def test_start_up_says_the_context_its_origin_its_sharing_and_its_size(
    model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    line, cells, per_sequence = _started(model, ContextOptions(parallel=2, threads=2), caplog)
    assert (cells, per_sequence) == (4096, 4096)
    assert line == (
        "context: 4096 tokens (the model's training context); one KV cache for 2 slots, any of which may "
        "fill it (unified); KV cache about 4 MiB"
    )


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (ContextOptions(ctx_size=2048, parallel=2, threads=2, no_kv_unified=True), "--no-kv-unified"),
        (ContextOptions(ctx_size=2048, parallel=2, threads=2, batch_invariant=True), "--batch-invariant"),
    ],
)
def test_a_stream_per_slot_is_said_with_the_flag_that_asked_for_it(
    model: Path, caplog: pytest.LogCaptureFixture, options: ContextOptions, said: str
) -> None:
    line, cells, per_sequence = _started(model, options, caplog)
    assert (cells, per_sequence) == (2048, 1024)
    assert line == (
        f"context: 2048 tokens (--ctx-size); a KV stream per slot ({said}): 2 slots of 1024 tokens; "
        "KV cache about 2 MiB"
    )


def test_little_memory_caps_the_context_the_engine_gets(
    model: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kv_size, "available_ram", lambda: 2 * MIB)  # half of it: 1,024 tokens of 1 KiB
    line, cells, _ = _started(model, ContextOptions(parallel=2, threads=2), caplog)
    assert cells == 1024
    assert line.startswith("context: 1024 tokens (the model's training context 4096 capped so that the KV")
