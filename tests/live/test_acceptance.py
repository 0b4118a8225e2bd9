"""Acceptance: the bundled backend, and the proxy in front of llama-cpp-python's server, pass every probe."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live.conftest import OVERFLOW_WORDS
from tests.support.check_report import check_results, errors_by_probe
from tests.support.servers import free_port, run_process

# Every probe of the battery (tools and JSON included, issue 20) against a CPU model: minutes, not the
# 300 s a single test usually gets.
pytestmark = [pytest.mark.backend, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def proxy_url(llama_cpp_python_url: str) -> Iterator[str]:
    port = free_port()
    args = ["python", "-m", "conformance", "serve", "--upstream", llama_cpp_python_url]
    args += ["--host", "127.0.0.1", "--port", str(port)]
    with run_process(args, health_path="/health", port=port, timeout=120) as (url, _):
        yield url


def _errors(url: str, tmp_path: Path, *extra: str) -> dict[str, list[str]]:
    return errors_by_probe(check_results(url, tmp_path, *extra))


def test_bundled_backend_has_no_errors(backend_url: str, tmp_path: Path) -> None:
    assert _errors(backend_url, tmp_path) == {}


def test_proxy_before_llama_cpp_python_has_no_errors(proxy_url: str, tmp_path: Path) -> None:
    assert _errors(proxy_url, tmp_path, "--overflow-words", OVERFLOW_WORDS) == {}
