"""bench/gpu_prepare.py and bench/gpu_check.py: the GPU check runs rarely, on a borrowed machine with a
short lease, so everything it can be wrong about is tried here first.

- ``gpu_prepare.trim`` keeps what CMake reads of llama.cpp's tree and drops the rest (stdlib only: runs in
  every env).
- ``gpu_check``'s CMake flags, and its verdicts (``checks``, ``placement_check``) on hand-built runs
  (``gpu_check`` imports the backend's synthetic models, numpy and gguf: the backend extra).
- The dry run (``--dry-run``): the whole script on a CPU with tiny models, against a real llama-server and
  its libraries loaded by llama-cpp-python, so that the script cannot rot between GPU runs. It needs
  llama-cpp-python and ``CONFORMANT_LLAMA_SERVER``; skipped, saying why, without them, unless
  ``CONFORMANT_REQUIRE_LLAMA_SERVER`` is set and the binary is missing (then it fails).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


def _bench(name: str) -> ModuleType:
    """A bench script as a module (bench/ is no package). Registered in ``sys.modules`` before it runs, as
    an import would, for its dataclasses; ``sys.path`` is restored after: gpu_check puts bench/ on it
    for its own imports, which must not leak into the other tests' imports."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.path[:] = saved
    return module


# --- gpu_prepare: the trimmed llama.cpp source --------------------------------------------------------------


def _tree(root: Path, files: Sequence[str]) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"source of {name}\n")


def test_trim_keeps_what_cmake_reads_and_drops_the_rest(tmp_path: Path) -> None:
    """The GPU machine takes 64 MiB with the working tree: models, docs, other GPU backends, the server's
    tests and the other tools must stay behind, while the base library, the CPU and CUDA backends and the
    server must all arrive, unchanged. A destination left from an earlier run is replaced, not merged."""
    prepare = _bench("gpu_prepare")
    source, dest = tmp_path / "llama.cpp", tmp_path / "trimmed"
    kept = [
        "CMakeLists.txt",
        "ggml/src/ggml.c",
        "ggml/src/ggml-cpu/ops.cpp",
        "ggml/src/ggml-cuda/y.cu",
        "tools/server/server.cpp",
    ]
    dropped = [
        "ggml/src/ggml-vulkan/x.cpp",
        "models/big.gguf",
        "docs/d.md",
        "tools/server/tests/t.py",
        "tools/server/README.md",
        "tools/quantize/q.cpp",
    ]
    _tree(source, [*kept, *dropped, "tools/CMakeLists.txt"])
    _tree(dest, ["stale/left-over.txt"])

    prepare.trim(source, dest)

    files = {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()}
    assert files == {*kept, "tools/CMakeLists.txt"}
    for name in kept:
        assert (dest / name).read_text() == f"source of {name}\n"
    assert (dest / "tools" / "CMakeLists.txt").read_text() == prepare._TOOLS_CMAKE


def test_the_trimmed_tools_cmake_adds_only_folders_trim_keeps() -> None:
    """Every ``add_subdirectory`` of the rewritten tools/CMakeLists.txt must name a folder ``_KEEP`` copies
    (whole, or its CMakeLists.txt): one left out fails the configure step on the GPU machine, where no
    network can fetch it again."""
    prepare = _bench("gpu_prepare")
    added = [
        line.removeprefix("add_subdirectory(").removesuffix(")")
        for line in prepare._TOOLS_CMAKE.splitlines()
        if line.startswith("add_subdirectory(")
    ]
    assert added == ["ui", "mtmd", "server"]
    for folder in added:
        assert f"tools/{folder}" in prepare._KEEP or f"tools/{folder}/CMakeLists.txt" in prepare._KEEP, folder


# --- gpu_check: flags and verdicts --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_check() -> ModuleType:
    return _bench("gpu_check")


@pytest.mark.backend
def test_cmake_flags_without_a_gpu_build_the_cpu_alone(gpu_check: ModuleType) -> None:
    """No architecture (no GPU found): no CUDA at all, or CMake would look for a toolkit that is not
    there; shared libraries, which llama-cpp-python loads through LLAMA_CPP_LIB_PATH."""
    flags = gpu_check.cmake_flags(None)
    assert "-DGGML_CUDA=ON" not in flags
    assert not [f for f in flags if "CUDA" in f]
    assert "-DBUILD_SHARED_LIBS=ON" in flags
    assert "-DGGML_NATIVE=OFF" in flags


@pytest.mark.backend
def test_cmake_flags_build_cuda_for_the_gpu_found_without_flash_attention(gpu_check: ModuleType) -> None:
    """CUDA for the one architecture found (a build for every architecture would not fit the lease) and
    without FlashAttention's kernels; cuBLAS and the driver left to the toolkit unless named."""
    flags = gpu_check.cmake_flags("90")
    assert "-DGGML_CUDA=ON" in flags
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in flags
    assert "-DGGML_CUDA_FA=OFF" in flags
    assert not [f for f in flags if f.startswith(("-DCUDA_cublas", "-DCUDA_cuda_driver"))]


@pytest.mark.backend
def test_cmake_flags_name_the_cublas_and_driver_given(gpu_check: ModuleType, tmp_path: Path) -> None:
    """A toolkit made of NVIDIA's wheels lacks cuBLAS and the driver's stub: the flags must point CMake at
    PyTorch's cuBLAS (its Lt library apart from the other) and headers, and at the driver's libcuda."""
    cublas = tmp_path / "nvidia" / "cu13"
    _tree(cublas, ["lib/libcublas.so.13", "lib/libcublasLt.so.13", "include/cublas_v2.h"])
    driver = tmp_path / "libcuda.so.1"
    flags = gpu_check.cmake_flags("90", cublas, driver)
    assert f"-DCUDA_cublas_LIBRARY={cublas / 'lib' / 'libcublas.so.13'}" in flags
    assert f"-DCUDA_cublasLt_LIBRARY={cublas / 'lib' / 'libcublasLt.so.13'}" in flags
    assert f"-DCMAKE_CUDA_FLAGS=-I{cublas / 'include'}" in flags
    assert f"-DCMAKE_CXX_FLAGS=-I{cublas / 'include'}" in flags
    assert f"-DCUDA_cuda_driver_LIBRARY={driver}" in flags
    assert "-DGGML_CUDA=ON" in flags


@pytest.mark.backend
def test_pip_cublas_finds_the_wheels_cublas_on_sys_path(
    gpu_check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder ``cmake_flags`` reads (``lib/`` and ``include/`` below it), found where pip put
    PyTorch's NVIDIA wheels; None where there are none."""
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert gpu_check.pip_cublas() is None
    _tree(tmp_path / "nvidia" / "cu13", ["lib/libcublas.so.13", "lib/libcublasLt.so.13"])
    assert gpu_check.pip_cublas() == tmp_path / "nvidia" / "cu13"


def _side(tps: float, greedy: str = "a b c", summary: Sequence[str] = ()) -> dict[str, Any]:
    """One server's figures in a run, as ``measure`` records them."""
    return {
        "tps1": tps,
        "tps4": tps,
        "tps16": tps,
        "ttft_long": 0.5,
        "prompt_tokens": 4001,
        "greedy": greedy,
        "placement": {"summary": list(summary)},
    }


_EXPERTS = [f"blk.{i}.ffn_{t}_exps.weight" for i in range(2) for t in ("gate", "up", "down")]
_ON_CPU = f"6 tensors overridden to CPU_REPACK: {', '.join(_EXPERTS)}"
_ON_GPU = ["model buffers: CPU_Mapped 10.00 MiB, CUDA0 200.00 MiB", "offloaded 3/3 layers to GPU"]


def _moe_run(summary: Sequence[str], experts: Sequence[str]) -> dict[str, Any]:
    return {
        "setup": "moe, --cpu-moe",
        "model": "moe",
        "backend": _side(100, summary=summary),
        "llama-server": _side(100),
        "experts_on_cpu": 2,
        "expert_tensors_on_cpu": list(experts),
    }


@pytest.mark.backend
def test_placement_check_counts_the_expert_tensors_in_host_memory(gpu_check: ModuleType) -> None:
    """The expert tensors llama.cpp reported overridden to host memory must be exactly those asked for:
    six reported for six asked holds, six reported for three (``--n-cpu-moe 1``) does not."""
    assert gpu_check.placement_check(_moe_run([_ON_CPU], _EXPERTS), on_gpu=False)["ok"]
    assert not gpu_check.placement_check(_moe_run([_ON_CPU], _EXPERTS[:3]), on_gpu=False)["ok"]
    assert not gpu_check.placement_check(_moe_run([], _EXPERTS), on_gpu=False)["ok"]


@pytest.mark.backend
def test_placement_check_counts_the_gpus_pinned_host_buffer_as_host_memory(gpu_check: ModuleType) -> None:
    """With the model offloaded, llama.cpp puts CPU-placed weights in the GPU's pinned host buffer
    ("CUDA_Host", as the H200 run reported for --cpu-moe): host memory all the same. A rule that sent
    the experts to the GPU itself ("CUDA0") is not."""
    pinned = _ON_CPU.replace("CPU_REPACK", "CUDA_Host")
    assert gpu_check.placement_check(_moe_run([*_ON_GPU, pinned], _EXPERTS), on_gpu=True)["ok"]
    on_gpu = _ON_CPU.replace("CPU_REPACK", "CUDA0")
    assert not gpu_check.placement_check(_moe_run([*_ON_GPU, on_gpu], _EXPERTS), on_gpu=True)["ok"]


@pytest.mark.backend
@pytest.mark.parametrize(
    ("summary", "ok"),
    [
        ([*_ON_GPU, _ON_CPU], True),
        ([_ON_CPU], False),  # nothing offloaded
        (
            ["model buffers: CPU_Mapped 10.00 MiB, CUDA0 200.00 MiB", "offloaded 2/3 layers to GPU", _ON_CPU],
            False,
        ),
        (["model buffers: CPU_Mapped 210.00 MiB", "offloaded 3/3 layers to GPU", _ON_CPU], False),  # no CUDA
    ],
    ids=["all-offloaded-to-cuda", "none-offloaded", "one-layer-short", "no-cuda-buffer"],
)
def test_placement_check_on_a_gpu_wants_every_layer_in_cuda(
    gpu_check: ModuleType, summary: list[str], ok: bool
) -> None:
    """On a GPU the rest of the model must be there: every layer offloaded, into a CUDA buffer."""
    assert gpu_check.placement_check(_moe_run(summary, _EXPERTS), on_gpu=True)["ok"] is ok


def _verdicts(gpu_check: ModuleType, runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in gpu_check.checks(runs, False)}


@pytest.mark.backend
@pytest.mark.parametrize(("ours", "ok"), [(96.0, True), (95.0, True), (90.0, False)])
def test_checks_want_the_backend_within_5_percent_of_llama_server(
    gpu_check: ModuleType, ours: float, ok: bool
) -> None:
    """Every stream count is judged on its own, against llama-server's figure in the same run."""
    run = {
        "setup": "dense, full offload",
        "model": "dense",
        "backend": _side(ours),
        "llama-server": _side(100),
    }
    found = _verdicts(gpu_check, [run])
    for n in gpu_check.STREAMS:
        verdict = found[f"dense, full offload: backend vs llama-server, {n} streams"]
        assert verdict["value"] == pytest.approx(ours / 100)
        assert verdict["ok"] is ok
    assert found["dense, full offload: greedy output equal to llama-server's"]["ok"]
    assert not [c for c in found if "placement" in c]  # no experts asked for: nothing to check


@pytest.mark.backend
def test_checks_judge_greedy_output_offload_speed_and_placement_together(gpu_check: ModuleType) -> None:
    """Full offload must be 10x CPU only with the same greedy answer; a greedy answer unlike
    llama-server's fails; a run asking for experts on the CPU gets its placement check."""
    runs = [
        {"setup": "dense, full offload", "backend": _side(100, "x y"), "llama-server": _side(100, "x y")},
        {"setup": "dense, CPU only", "backend": _side(9.0, "x y"), "llama-server": _side(9.0, "x z")},
        _moe_run([_ON_CPU], _EXPERTS),
    ]
    found = _verdicts(gpu_check, runs)
    assert found["dense full offload vs CPU only, 1 streams"]["ok"] is True
    runs[1]["backend"]["tps1"] = 11.0
    assert _verdicts(gpu_check, runs)["dense full offload vs CPU only, 1 streams"]["ok"] is False
    assert found["greedy output equal on GPU and CPU (backend, dense)"]["ok"] is True
    assert found["dense, CPU only: greedy output equal to llama-server's"]["ok"] is False
    assert found["moe, --cpu-moe: placement as asked (6 expert tensors in host memory)"]["ok"] is True
    assert gpu_check.checks([], True) == []


# --- the dry run --------------------------------------------------------------------------------------------


def _llama_server() -> Path:
    """The llama-server binary; its folder holds the libraries it was linked with, which the backend then
    loads too (LLAMA_CPP_LIB_PATH), so that both servers run the same llama.cpp."""
    binary = os.environ.get("CONFORMANT_LLAMA_SERVER")
    if not binary or not os.access(binary, os.X_OK):
        if os.environ.get("CONFORMANT_REQUIRE_LLAMA_SERVER"):
            pytest.fail(f"CONFORMANT_REQUIRE_LLAMA_SERVER is set but {binary!r} is no llama-server binary")
        pytest.skip("set CONFORMANT_LLAMA_SERVER to a llama-server binary to run the GPU check's dry run")
    pytest.importorskip(
        "llama_cpp", reason="the GPU check's dry run runs the backend: needs llama-cpp-python"
    )
    return Path(binary).resolve()


def _gpu_check_run(
    out: Path, work: Path, *extra: str, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    binary = _llama_server()
    command = [
        *(sys.executable, str(BENCH / "gpu_check.py"), "--dry-run", "--out", str(out), "--work", str(work)),
        *("--threads", "2", "--lib-path", str(binary.parent), "--llama-server", str(binary), *extra),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, Path]:
    """(gpu_check.json, --out, --work) of one dry run, shared by the tests that read it."""
    out, work = tmp_path_factory.mktemp("gpu-check-out"), tmp_path_factory.mktemp("gpu-check-work")
    done = _gpu_check_run(out, work)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "gpu_check.json").read_text()), out, work


def _dry(test: Any) -> Any:
    """The dry run's marks: the backend and a llama-server (the tox env that builds one runs it), slow, and
    longer than the suite's 300 s (the fixture's run counts toward the first test that asks for it)."""
    for mark in (pytest.mark.backend, pytest.mark.llama_server, pytest.mark.slow, pytest.mark.timeout(900)):
        test = mark(test)
    return test


@_dry
def test_dry_run_measures_every_setup_on_both_servers(dry_run: tuple[dict[str, Any], Path, Path]) -> None:
    """Every setup measured on both servers, each figure taken (a prompt of the length asked for), the
    same greedy answer from both (one llama.cpp build, temperature 0: a difference is the backend's), the
    experts where each MoE setup asked for them, and the report written in Markdown too."""
    data, out, _ = dry_run
    gpu_check = _bench("gpu_check")  # after the fixture: where it skips, numpy and gguf may be missing
    notes = "\n".join(data["notes"])
    names = [s.name for s in gpu_check.setups(gpu_check.DRY_SCALE)]
    assert [r["setup"] for r in data["runs"]] == names, notes
    for run in data["runs"]:
        for side in ("backend", "llama-server"):
            figures = run[side]
            for key in ("tps1", "tps4", "tps16", "ttft_long"):
                assert figures[key] > 0, (run["setup"], side, key)
            assert figures["prompt_tokens"] >= 250, (run["setup"], side)
        assert run["backend"]["greedy"], run["setup"]
        assert run["backend"]["greedy"] == run["llama-server"]["greedy"], run["setup"]
    placements = {c["check"].split(":")[0]: c for c in data["checks"] if "placement as asked" in c["check"]}
    assert set(placements) == {"moe, --cpu-moe", "moe, full offload", "moe, --n-cpu-moe 1"}
    for setup, verdict in placements.items():
        assert verdict["ok"], (setup, verdict["value"])
    assert data["facts"]["dry run"] is True
    assert "| check |" in (out / "gpu_check.md").read_text()


@_dry
def test_a_run_out_of_budget_skips_the_setups_it_cannot_finish(
    dry_run: tuple[dict[str, Any], Path, Path], tmp_path: Path
) -> None:
    """A setup is begun only with its expected time and 15 s to spare left: with 5 s of budget every one is
    skipped, saying so, and the run still ends well and at once, its report written. The dry run's models
    are reused (its --work), so that the budget is spent on nothing but the check itself."""
    _, _, work = dry_run
    begun = time.monotonic()
    done = _gpu_check_run(tmp_path, work, "--budget", "5", timeout=120)
    took = time.monotonic() - begun
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert data["runs"] == []
    skipped = [n for n in data["notes"] if n.startswith("skipped ")]
    assert len(skipped) == 5, data["notes"]
    assert took < 60, f"a run of 5 s budget took {took:.0f} s"
