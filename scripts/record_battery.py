"""Record one server's answers to ``conformant check``'s battery, for the judge's tests (issue 33).

The batteries in tests/data/batteries/ were made by this script: each server on Gemma 3 270M Q4_K_M,
CPU only, one slot, the context llama-cpp-python gets (as COMPATIBILITY.md's rows), its exchanges saved
by ``check --record``. What the judge must find in each is written by hand beside it
(``NAME.expected.json``, tests/conformance/test_batteries.py); a new recording is reviewed again before it
replaces one.
Usage: python scripts/record_battery.py DEST --server NAME [--binary LLAMA_SERVER] [-- SERVER_ARGS...]
Without ``--binary`` the server is llama-cpp-python's own.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.compat_matrix import llama_cpp_python, llama_server, skips_for  # noqa: E402
from tests.live import llama_cpp_server  # noqa: E402


def _server(binary: str | None, extra: list[str]) -> contextlib.AbstractContextManager[str]:
    return llama_server(binary, *extra) if binary else llama_cpp_python()


def record(dest: Path, name: str, url: str) -> int:
    """``check --record`` into ``dest`` (emptied first), the probes no row can answer left out."""
    if dest.exists():
        shutil.rmtree(dest)
    skips = list(skips_for(name))
    command = [sys.executable, "-m", "conformance", "check", url, "--record", str(dest), "--server", name]
    command += ["--overflow-words", str(llama_cpp_server.OVERFLOW_WORDS), "--timeout", "300", "--brief"]
    command += ["--skip", *skips] if skips else []
    return subprocess.run(command, check=False, timeout=3600).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--server", required=True, help="the server's name in the recordings")
    parser.add_argument("--binary", help="a llama.cpp-family llama-server binary")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    with _server(args.binary, argv[split + 1 :]) as url:
        status = record(args.dest, args.server, url)
    print(f"recorded {args.server} in {args.dest} (check exit status {status})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
