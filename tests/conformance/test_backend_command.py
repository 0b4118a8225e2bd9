"""`conformant backend` on a core install: without llama-cpp-python, one line on stderr, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# llama_cpp made unimportable whether or not this environment has it: a None entry in sys.modules
# makes `import llama_cpp` raise ModuleNotFoundError.
_WITHOUT_LLAMA_CPP = (
    "import sys; sys.modules['llama_cpp'] = None; "
    "from conformance.cli import main; sys.exit(main(['backend', *sys.argv[1:]]))"
)


@pytest.mark.parametrize("extra", [[], ["--model", "missing.gguf"]])
def test_backend_without_llama_cpp_is_one_line(extra: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_LLAMA_CPP, *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("conformant backend: llama-cpp-python is not installed")
    assert "pip install '.[backend]'" in lines[0]
    assert done.stdout == ""


def test_a_bad_backend_variable_is_one_usage_line_naming_it() -> None:
    """The backend reads its ``CONFORMANT_*`` variables as serve does; a bad one is refused before
    anything loads (llama-cpp-python or not)."""
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_LLAMA_CPP],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CONFORMANT_CTX_SIZE": "big"},
    )
    assert done.returncode == 2
    assert "'big' is not an integer (from the flag or CONFORMANT_CTX_SIZE)" in done.stderr
    assert "Traceback" not in done.stderr
