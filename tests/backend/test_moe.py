"""Quantized MoE expert placement: --cpu-moe, --n-cpu-moe and --override-tensor put exactly the expert tensors
where they were asked, and the model still generates.

The proof is llama.cpp's own load log, read by backend.placement: a "tensor X buffer type overridden to Y"
line per tensor an override matched, the model buffer sizes per buffer type, and a "repack tensor X" line
per weight copied into the CPU's repacking buffer. On a CPU-only machine, "CPU" and "CPU_REPACK" are the two
places a Q4_0 expert can live; with repacking off the default is plain CPU, so an override to CPU_REPACK is
a placement the log can only show if the override took effect, tensor by tensor.
"""

from __future__ import annotations

import argparse
import logging

import pytest

pytestmark = pytest.mark.backend

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from backend.loading import (  # noqa: E402 - after the importorskips that guard the backend extra
    BufferTypes,
    LoadedModel,
    add_load_arguments,
    load_model,
    options_from_args,
)
from backend.smoke import greedy_decode  # noqa: E402
from backend.synthetic import SyntheticSpec, expert_tensor_names, write_synthetic  # noqa: E402

SPEC = SyntheticSpec(kind="moe", quant="q4_0", n_layer=2)
EXPERTS = expert_tensor_names(SPEC)
PROMPT = [1, 300, 301, 302, 303]
N_TOKENS = 6


@pytest.fixture(scope="module")
def moe_q4(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_synthetic(tmp_path_factory.mktemp("models") / "moe-q4_0.gguf", SPEC))


def load_with_flags(path: str, *argv: str) -> LoadedModel:
    parser = argparse.ArgumentParser()
    add_load_arguments(parser)
    return load_model(path, options_from_args(parser.parse_args(list(argv))))


def generate(loaded: LoadedModel) -> list[int]:
    assert loaded.model is not None
    return greedy_decode(loaded.model, PROMPT, N_TOKENS)


@pytest.fixture(scope="module")
def baseline(moe_q4: str) -> tuple[dict[str, float], list[int]]:
    """Repacking off, no overrides: every weight in plain CPU memory. The reference the overrides move from.

    Read into memory (--no-mmap): a mapped file counts whole in CPU_Mapped whatever moved elsewhere.
    """
    with load_with_flags(moe_q4, "--no-repack", "--no-mmap") as loaded:
        assert loaded.placement.overridden == {}
        assert loaded.placement.repacked == {}
        assert "CPU_REPACK" not in loaded.placement.buffers
        return loaded.placement.buffers, generate(loaded)


def test_cpu_moe_places_every_expert_tensor_and_generates(
    moe_q4: str, baseline: tuple[dict[str, float], list[int]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="conformant.backend")
    cpu = BufferTypes.from_registry().cpu_name
    with load_with_flags(moe_q4, "--cpu-moe", "--no-repack") as loaded:
        assert loaded.placement.overridden == dict.fromkeys(EXPERTS, cpu)
        assert loaded.placement.unmatched == ()
        tokens = generate(loaded)
    # Where the tensors went is logged, not only returned.
    assert f"{len(EXPERTS)} tensors overridden to {cpu}: blk.0.ffn_gate_exps.weight" in caplog.text
    assert "model buffers: CPU" in caplog.text
    # Same weights, same kind of buffer, same kernels: the same greedy continuation as without the flag.
    assert tokens == baseline[1]


def test_cpu_moe_with_repacking_keeps_experts_in_host_memory(moe_q4: str) -> None:
    registry = BufferTypes.from_registry()
    with load_with_flags(moe_q4, "--cpu-moe") as loaded:
        # llama.cpp lets an override to "CPU" pick the CPU's repacking buffer: still host memory.
        assert set(loaded.placement.overridden) == set(EXPERTS)
        assert set(loaded.placement.overridden.values()) <= registry.host_names
        assert len(generate(loaded)) == N_TOKENS


def test_n_cpu_moe_places_only_the_first_blocks_experts(moe_q4: str) -> None:
    with load_with_flags(moe_q4, "--n-cpu-moe", "1", "--no-repack") as loaded:
        assert set(loaded.placement.overridden) == {n for n in EXPERTS if n.startswith("blk.0.")}
        assert len(generate(loaded)) == N_TOKENS


def test_override_tensor_moves_the_experts_into_the_repack_buffer_and_generates(
    moe_q4: str, baseline: tuple[dict[str, float], list[int]]
) -> None:
    override = r"\.ffn_(up|down|gate)_exps=CPU_REPACK"
    with load_with_flags(moe_q4, "--no-repack", "--no-mmap", "-ot", override) as loaded:
        placement = loaded.placement
        assert placement.overridden == dict.fromkeys(EXPERTS, "CPU_REPACK")
        # Each expert tensor, and nothing else, was copied into the repacked layout...
        assert set(placement.repacked) == set(EXPERTS)
        assert all(layout.startswith("q4_0_") for layout in placement.repacked.values())
        # ...and the memory moved with it: a CPU_REPACK buffer appears, the plain one shrinks by as much.
        (plain,) = baseline[0]
        repack = placement.buffers["CPU_REPACK"]
        assert repack > 0
        assert baseline[0][plain] - placement.buffers[plain] == pytest.approx(repack, abs=0.02)
        assert len(generate(loaded)) == N_TOKENS


def test_override_tensor_places_a_single_tensor(moe_q4: str) -> None:
    with load_with_flags(
        moe_q4, "--no-repack", "--override-tensor", r"blk\.1\.ffn_up_exps=CPU_REPACK"
    ) as loaded:
        assert loaded.placement.overridden == {"blk.1.ffn_up_exps.weight": "CPU_REPACK"}
        assert set(loaded.placement.repacked) == {"blk.1.ffn_up_exps.weight"}
        assert len(generate(loaded)) == N_TOKENS


def test_first_matching_rule_wins_as_in_llama_cpp(moe_q4: str) -> None:
    # The explicit rule claims layer 0's experts; --cpu-moe takes the rest.
    with load_with_flags(
        moe_q4, "--no-repack", "--cpu-moe", "-ot", r"blk\.0\.ffn_.*_exps=CPU_REPACK"
    ) as loaded:
        expected = {n: ("CPU_REPACK" if n.startswith("blk.0.") else "CPU") for n in EXPERTS}
        assert loaded.placement.overridden == expected


def test_override_placing_no_tensor_is_reported(moe_q4: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="conformant.backend")
    with load_with_flags(
        moe_q4, "--no-repack", "-ot", "ffn_experts=CPU", "-ot", "exps=CPU", "--cpu-moe"
    ) as loaded:
        assert loaded.placement.overridden == dict.fromkeys(EXPERTS, "CPU")
        # The first rule matches nothing; --cpu-moe's rule comes after "exps", which took every expert.
        assert [str(rule) for rule in loaded.placement.unmatched] == [
            "ffn_experts=CPU",
            str(loaded.placement.requested[-1]),
        ]
    assert "--override-tensor ffn_experts=CPU placed no tensor" in caplog.text
