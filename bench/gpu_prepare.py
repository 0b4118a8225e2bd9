"""Prepare, on a machine with a network, what ``bench/gpu_check.py`` needs on a GPU machine without one.

    python bench/gpu_prepare.py [DEST]        (default DEST: .gpu, which git ignores)

DEST then holds, in about 30 MiB (the GPU machine takes at most 64 MiB with the working tree):

- ``llama.cpp/``: the llama.cpp source of the llama-cpp-python release the project is tested with
  (``LLAMA_CPP_PYTHON``), trimmed to what CMake needs for the shared libraries llama-cpp-python loads
  (``LLAMA_CPP_LIB_PATH``), llama-server and the CPU and CUDA backends: 176 MiB of source (mostly models,
  docs and other GPU backends) become about 20. ``tools/CMakeLists.txt`` is rewritten to add only the
  server and the two libraries it links (the web UI's stub and mtmd).
- ``wheels/``: Python 3.12 x86-64 wheels of what the project needs that the GPU machine's image lacks
  (its image has numpy, httpx, uvloop, jinja2, rich, prometheus-client...), llama-cpp-python's Python
  part alone, built with ``LLAMA_BUILD=OFF`` (its ctypes bindings; the library is the GPU build), and
  the project's own wheel (its entry points).
- ``VERSION``: the llama-cpp-python release, which the check prints beside its figures.

Third-party source stays out of the repository: this script fetches it again whenever it is needed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLAMA_CPP_PYTHON = "0.3.36"
"""The release the tox environments build (pip resolves ``llama-cpp-python>=0.3.9`` to it, 2026-11)."""

# Wheels for the GPU machine's Python 3.12: the project's dependencies its image does not have, each
# pinned to what this project is tested with. Pure-Python ones are tagged py3 and fit any version.
WHEELS = [
    "starlette==1.10.0",
    "uvicorn==0.54.0",
    "httptools==0.9.0",
    "orjson==3.13.0",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "gguf==0.19.0",
    "diskcache==5.6.3",
]
_PLATFORMS = [
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
]

# What of llama.cpp's source a build of the libraries, llama-server and the CPU/CUDA backends reads.
_KEEP = [
    "CMakeLists.txt",
    "LICENSE",
    "cmake",
    "include",
    "src",
    "common",
    "vendor",
    "scripts/ui-assets.cmake",
    "ggml/CMakeLists.txt",
    "ggml/cmake",
    "ggml/include",
    "ggml/src/ggml-cpu",
    "ggml/src/ggml-cuda",
    "tools/server",
    "tools/mtmd",
    "tools/ui/CMakeLists.txt",
    "tools/ui/ui.cpp.in",
    "tools/ui/ui.h.in",
    "tools/ui/sources.cmake",
]
_DROP = ["tools/server/tests", "tools/server/bench", "tools/server/README.md", "tools/server/README-dev.md"]
_TOOLS_CMAKE = """\
# Trimmed by conformant's bench/gpu_prepare.py: the server and the libraries it links, nothing else.
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(ui)
add_subdirectory(mtmd)
add_subdirectory(server)
"""


def trim(source: Path, dest: Path) -> None:
    """Copy from the llama.cpp tree ``source`` to ``dest`` what CMake needs (``_KEEP``): every file at the
    top of ``ggml/src`` too (the base library), but none of its backends except CPU and CUDA."""
    if dest.exists():
        shutil.rmtree(dest)
    for item in _KEEP:
        src = source / item
        if src.is_dir():
            shutil.copytree(src, dest / item)
        elif src.is_file():
            (dest / item).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / item)
    for entry in (source / "ggml" / "src").iterdir():
        if entry.is_file():
            shutil.copy2(entry, dest / "ggml" / "src" / entry.name)
    for item in _DROP:
        target = dest / item
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    (dest / "tools" / "CMakeLists.txt").write_text(_TOOLS_CMAKE)


def size_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def fetch_source(work: Path) -> tuple[Path, Path]:
    """llama-cpp-python's source release and where it was unpacked (its ``vendor/llama.cpp`` is the
    llama.cpp it builds)."""
    _pip(
        "download",
        "--quiet",
        "--no-deps",
        "--no-binary",
        ":all:",
        "-d",
        str(work),
        f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
    )
    archive = next(work.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    return archive, work / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"


def fetch_wheels(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in _PLATFORMS for arg in ("--platform", p)]
    _pip(
        *("download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", "3.12"),
        *("--implementation", "cp", *platforms, "-d", str(dest), *WHEELS),
    )
    # The project's own wheel, for its metadata: its commands are found through its entry points
    # (``python -m backend`` is ``conformant backend``), and the GPU machine has no network to build it
    # with. gpu_check.sh puts the working tree first on the path, so the code run is the tree's.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dest), str(ROOT)], check=True
    )
    # llama-cpp-python's bindings without its library: no compiler runs, the wheel holds Python alone.
    env = {**os.environ, "CMAKE_ARGS": "-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dest), str(archive)],
        check=True,
        env=env,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dest", nargs="?", default=".gpu", type=Path)
    args = parser.parse_args(argv)
    dest: Path = args.dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        archive, unpacked = fetch_source(Path(tmp))
        trim(unpacked / "vendor" / "llama.cpp", dest / "llama.cpp")
        if (dest / "wheels").exists():
            shutil.rmtree(dest / "wheels")
        fetch_wheels(archive, dest / "wheels")
    (dest / "VERSION").write_text(f"llama-cpp-python {LLAMA_CPP_PYTHON}\n")
    source, wheels = size_mib(dest / "llama.cpp"), size_mib(dest / "wheels")
    print(f"{dest}: llama.cpp source {source:.1f} MiB, wheels {wheels:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
