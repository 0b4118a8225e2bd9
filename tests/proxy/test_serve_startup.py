"""A newcomer's first ``conformant serve`` (issue 18 item 18): what the bundled start-up prints.

The proxy's address is the last start-up line and the only address printed (the backend's random port
was the most visible one); the bundled Gemma is called a base model; each request is one access-log
line (the backend's own access log doubled it, with a 404 for the proxy's /props probe).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.servers import free_port, wait_http

pytestmark = pytest.mark.backend

CHAT = {"model": "gemma", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 2}


def _backend_port(pid: int) -> int:
    """The port of the backend that ``conformant serve`` (process ``pid``) started."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    for child in children:
        argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        if b"backend" in argv:
            return int(argv[argv.index(b"--port") + 1])
    raise AssertionError(f"no backend among {children}")


def test_bundled_start_up_prints_the_proxy_address_last_and_one_line_per_request(tmp_path: Path) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    port = free_port()
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "conformance", "serve", "--port", str(port), "--log-level", "info"],
            stdout=stdout,
            stderr=stderr,
        )
        try:
            wait_http(f"http://127.0.0.1:{port}/health", 300, proc)
            backend_port = _backend_port(proc.pid)
            response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=CHAT, timeout=120)
            assert response.status_code == 200, response.text
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    printed = out.read_text() + err.read_text()
    assert f":{backend_port}" not in printed  # the backend's port is nobody's business
    assert "/props" not in printed
    assert " 404" not in printed
    lines = err.read_text().splitlines()
    banner = next(i for i, line in enumerate(lines) if line.startswith("conformant serve: http://"))
    assert lines[banner] == f"conformant serve: http://127.0.0.1:{port}/v1 -> the bundled backend"
    start_up = lines[:banner]
    assert any("base model" in line and "--model" in line for line in start_up)
    assert not any("http://" in line for line in start_up)  # the proxy's is the only address
    access = [json.loads(line) for line in lines[banner + 1 :] if line.startswith("{")]
    assert [line["path"] for line in access if line["path"] != "/health"] == ["/v1/chat/completions"]
    others = [line for line in lines[banner + 1 :] if not line.startswith("{")]
    assert not [line for line in others if "127.0.0.1" in line or "HTTP/1.1" in line], others
    assert out.read_text() == ""  # (the backend's access log went to stdout)
