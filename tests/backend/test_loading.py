"""Model loading: flags, override specs, clear errors, and loading real (synthetic) GGUF files."""

from __future__ import annotations

import argparse
import ctypes
import logging
import re
from pathlib import Path

import pytest

from backend.loading import (
    CUDA_BUILD_HINT,
    BufferTypes,
    LoadOptions,
    ModelLoadError,
    add_load_arguments,
    load_model,
    options_from_args,
)
from backend.placement import (
    FFN_EXPS_REGEX,
    LOG_CONT,
    LOG_INFO,
    LoadLog,
    TensorOverride,
    parse_override_specs,
)


def parse(*argv: str) -> LoadOptions:
    parser = argparse.ArgumentParser()
    add_load_arguments(parser)
    return options_from_args(parser.parse_args(list(argv)))


# --- flags and specs (no llama.cpp needed) ---------------------------------------------------------------


def test_defaults_load_on_cpu_with_mmap() -> None:
    assert parse() == LoadOptions()
    assert LoadOptions().n_gpu_layers == 0
    assert LoadOptions().overrides() == []


def test_llama_cpp_flag_names_and_short_forms() -> None:
    opts = parse(
        "-ngl", "all", "-sm", "row", "-ts", "3,1", "-mg", "1", "--n-cpu-moe", "2",
        "-ot", "attn=CPU", "--override-tensor", "exps=CUDA0,norm=CPU", "--no-mmap", "--mlock", "--no-repack",
    )  # fmt: skip
    assert opts == LoadOptions(
        n_gpu_layers=-1,
        split_mode="row",
        tensor_split=[3.0, 1.0],
        main_gpu=1,
        n_cpu_moe=2,
        override_tensor=["attn=CPU", "exps=CUDA0,norm=CPU"],
        use_mmap=False,
        use_mlock=True,
        repack=False,
    )
    # Explicit rules come first (llama.cpp takes the first match), then the per-block expert rules.
    assert [str(r) for r in opts.overrides()] == [
        "attn=CPU",
        "exps=CUDA0",
        "norm=CPU",
        rf"blk\.0{FFN_EXPS_REGEX}=CPU",
        rf"blk\.1{FFN_EXPS_REGEX}=CPU",
    ]


def test_cpu_moe_is_one_rule_for_every_expert_tensor() -> None:
    (rule,) = parse("--cpu-moe").overrides(cpu_buffer_type="CPU")
    assert rule == TensorOverride(FFN_EXPS_REGEX, "CPU")
    for name in ("blk.0.ffn_up_exps.weight", "blk.31.ffn_gate_exps.weight", "blk.2.ffn_gate_up_exps.weight"):
        assert re.search(rule.pattern, name)
    for name in ("blk.0.ffn_up.weight", "blk.0.ffn_gate_inp.weight", "blk.0.ffn_up_shexp.weight"):
        assert not re.search(rule.pattern, name)


def test_n_cpu_moe_rule_for_block_1_does_not_catch_block_10() -> None:
    rules = parse("--n-cpu-moe", "2").overrides()
    assert [bool(re.search(r.pattern, "blk.1.ffn_down_exps.weight")) for r in rules] == [False, True]
    assert not any(re.search(r.pattern, "blk.10.ffn_down_exps.weight") for r in rules)


def test_override_with_equals_inside_the_regex_splits_at_the_last_one() -> None:
    assert parse_override_specs(["a(?=b)=CPU"]) == [TensorOverride("a(?=b)", "CPU")]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-ot", "exps"], "expected REGEX=BUFFER"),
        (["-ot", "=CPU"], "expected REGEX=BUFFER"),
        (["-ot", "exps="], "expected REGEX=BUFFER"),
        (["-ot", "ffn_(up=CPU"], "invalid regular expression 'ffn_(up'"),
        (["-ot", "attn=CPU,[x=CPU"], "invalid regular expression"),
        (["--n-cpu-moe", "-1"], "--n-cpu-moe must be 0 or more"),
        (["-ts", "0,0"], "--tensor-split needs"),
        (["-mg", "-1"], "--main-gpu must be 0 or more"),
    ],
)
def test_bad_placement_flags_are_one_line_errors(argv: list[str], message: str) -> None:
    with pytest.raises(ModelLoadError, match=re.escape(message)) as raised:
        parse(*argv)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("argv", [["-ngl", "many"], ["-ts", "3,x"], ["-sm", "tensor"]])
def test_malformed_values_are_argparse_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(*argv)


def test_load_log_joins_continuations_and_reads_placement() -> None:
    log = LoadLog()
    log.add(LOG_INFO, "load_tensors:   CPU_Mapped model buffer size =     1.96 MiB\n")
    log.add(LOG_INFO, "load_tensors: offloaded 2/")
    log.add(LOG_CONT, "3 layers to GPU\n")
    placement = log.placement([TensorOverride("nothing_here", "CPU")])
    assert placement.buffers == {"CPU_Mapped": 1.96}
    assert placement.offloaded_layers == (2, 3)
    assert placement.unmatched == (TensorOverride("nothing_here", "CPU"),)


# --- loading with llama.cpp ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dense_q8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf")
    from backend.synthetic import SyntheticSpec, write_synthetic

    return write_synthetic(tmp_path_factory.mktemp("models") / "dense-q8_0.gguf", SyntheticSpec())


def test_dense_model_loads_decodes_and_closes(dense_q8: Path) -> None:
    pytest.importorskip("llama_cpp")
    from backend.smoke import greedy_decode

    loaded = load_model(str(dense_q8), LoadOptions(use_mmap=False))
    try:
        first = greedy_decode(loaded.model or 0, [1, 300, 301, 302], 6)
        again = greedy_decode(loaded.model or 0, [1, 300, 301, 302], 6)
        assert len(first) == 6
        assert first == again  # greedy decoding of one model is deterministic
        assert loaded.placement.buffers  # llama.cpp reported where the weights went
        assert not loaded.placement.overridden
    finally:
        loaded.close()
    assert loaded.closed
    loaded.close()  # a second close does nothing


def test_load_gives_the_previous_log_callback_back(dense_q8: Path) -> None:
    llama = pytest.importorskip("llama_cpp")
    seen: list[bytes] = []
    mine = llama.llama_log_callback(lambda _level, text, _data: seen.append(text))
    llama.llama_log_set(mine, None)
    try:
        with load_model(str(dense_q8)):
            pass
        current = llama.llama_log_callback()
        data = ctypes.c_void_p()
        llama.llama_log_get(ctypes.byref(current), ctypes.byref(data))
        assert ctypes.cast(current, ctypes.c_void_p).value == ctypes.cast(mine, ctypes.c_void_p).value
        assert not seen  # the load's messages went to the loader, not to the callback it replaced
    finally:
        from llama_cpp._logger import llama_log_callback as default_callback

        llama.llama_log_set(default_callback, None)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"model file not found: .*nothing\.gguf$"):
        load_model(str(tmp_path / "nothing.gguf"))


def test_directory_and_non_gguf_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="is a directory"):
        load_model(str(tmp_path))
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    with pytest.raises(ModelLoadError, match="not a GGUF model file"):
        load_model(str(text))


def test_truncated_gguf_reports_llama_cpp_reason(dense_q8: Path, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(dense_q8.read_bytes()[:5000])
    with pytest.raises(ModelLoadError, match=r"cannot load model .*cut\.gguf: \S") as raised:
        load_model(str(cut))
    assert "\n" not in str(raised.value)


def test_unknown_buffer_type_names_the_available_ones(dense_q8: Path) -> None:
    pytest.importorskip("llama_cpp")
    with pytest.raises(ModelLoadError, match=r"unknown buffer type 'VRAM9' .*available: .*CPU") as raised:
        load_model(str(dense_q8), LoadOptions(override_tensor=["attn_q=VRAM9"]))
    assert "\n" not in str(raised.value)


def test_bad_regex_is_rejected_before_llama_cpp_sees_it(dense_q8: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"invalid regular expression '\*attn'"):
        load_model(str(dense_q8), LoadOptions(override_tensor=["*attn=CPU"]))


def test_gpu_layers_without_a_gpu_build_warn_and_load_on_cpu(
    dense_q8: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A GPU device, not llama_supports_gpu_offload(): that is true for any build with RPC (the backend
    # tox env's), which has no GPU, and this test would never run there.
    if BufferTypes.from_registry().gpu_count:
        pytest.skip("this machine's llama.cpp build has a GPU device")
    caplog.set_level(logging.WARNING, logger="conformant.backend")
    with load_model(str(dense_q8), LoadOptions(n_gpu_layers=-1, tensor_split=[1.0])) as loaded:
        assert set(loaded.placement.layer_devices.values()) == {"CPU"}
    assert CUDA_BUILD_HINT in caplog.text


def test_more_tensor_split_shares_than_devices_is_a_clear_error(dense_q8: Path) -> None:
    llama = pytest.importorskip("llama_cpp")
    shares = [1.0] * (llama.llama_max_devices() + 1)
    with pytest.raises(ModelLoadError, match="--tensor-split has"):
        load_model(str(dense_q8), LoadOptions(tensor_split=shares))


@pytest.mark.parametrize(("setting", "faults"), [("off", True), ("0", True), ("on", False), ("1", False)])
def test_amx_setting_decides_without_probing(
    monkeypatch: pytest.MonkeyPatch, setting: str, faults: bool
) -> None:
    from backend import smoke

    def no_probe(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the probe must not run when CONFORMANT_AMX decides")

    monkeypatch.setenv("CONFORMANT_AMX", setting)
    monkeypatch.setattr("subprocess.run", no_probe)
    smoke.amx_faults.cache_clear()
    try:
        assert smoke.amx_faults() is faults
    finally:
        smoke.amx_faults.cache_clear()
