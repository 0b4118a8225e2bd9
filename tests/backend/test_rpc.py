"""The backend past one machine: two ``conformant rpc-worker`` processes on loopback, ``conformant backend
--rpc`` on them. The load log shows the layers on the RPC devices, and greedy output equals the same model
run locally (issue 22).

Needs llama-cpp-python built with ``-DGGML_RPC=on``, as the backend tox env builds it; elsewhere the RPC
tests skip, unless ``CONFORMANT_REQUIRE_RPC`` is set (the tox env sets it, so a build that lost the flag
fails there instead of skipping).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import IO

import httpx
import pytest

from backend.rpc import is_loopback, parse_servers
from tests.support.servers import free_port, wait_http

pytestmark = pytest.mark.backend

llama_cpp = pytest.importorskip("llama_cpp")
if not llama_cpp.llama_supports_rpc():
    if os.environ.get("CONFORMANT_REQUIRE_RPC"):
        raise RuntimeError("CONFORMANT_REQUIRE_RPC is set but this llama-cpp-python has no RPC backend")
    pytest.skip("llama-cpp-python built without -DGGML_RPC=on", allow_module_level=True)

PROMPT = "The capital of France is"
N_TOKENS = 12


def _conformant(*args: str) -> list[str]:
    return [sys.executable, "-m", "conformance", *args]


def _log_tail(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-3000:]


@contextlib.contextmanager
def _process(args: list[str]) -> Iterator[tuple[subprocess.Popen[bytes], IO[bytes]]]:
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed below, after the process
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        log.close()


@contextlib.contextmanager
def rpc_worker() -> Iterator[str]:
    port = free_port()
    with _process(_conformant("rpc-worker", "--port", str(port), "--threads", "1")) as (proc, log):
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rpc-worker did not listen on {port}:\n{_log_tail(log)}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"


@contextlib.contextmanager
def backend(*flags: str) -> Iterator[tuple[str, IO[bytes]]]:
    port = free_port()
    args = _conformant("backend", "--port", str(port), "--ctx-size", "512", "--parallel", "1", *flags)
    with _process(args) as (proc, log):
        try:
            wait_http(f"http://127.0.0.1:{port}/health", 300, proc)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{_log_tail(log)}") from None
        yield f"http://127.0.0.1:{port}", log


def greedy(url: str) -> str:
    body = {"model": "m", "prompt": PROMPT, "max_tokens": N_TOKENS, "temperature": 0, "seed": 1}
    response = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    text = response.json()["choices"][0]["text"]
    assert isinstance(text, str)
    return text


def test_layers_on_two_rpc_workers_and_the_same_greedy_output() -> None:
    with backend() as (url, _):
        local = greedy(url)
    assert local.strip()
    with rpc_worker() as first, rpc_worker() as second, backend("--rpc", f"{first},{second}") as (url, log):
        remote = greedy(url)
        load_log = _log_tail(log)
    # The backend's load summary, read from llama.cpp's load log: a model buffer on each server's device
    # (named by its endpoint) and the layers split between the two RPC devices.
    buffers = next(line for line in load_log.splitlines() if "model buffers:" in line)
    assert f"[{first}]" in buffers, buffers
    assert f"[{second}]" in buffers, buffers
    layers = next(line for line in load_log.splitlines() if "layers by device:" in line)
    assert "RPC0 " in layers, layers
    assert "RPC1 " in layers, layers
    assert remote == local


def test_an_unreachable_rpc_server_is_one_line_not_an_abort() -> None:
    port = free_port()  # nothing listens there
    result = subprocess.run(
        _conformant("backend", "--port", str(free_port()), "--rpc", f"127.0.0.1:{port}"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"RPC server 127.0.0.1:{port} cannot be reached" in last
    assert "Traceback" not in result.stderr


def test_rpc_flag_parsing_and_loopback() -> None:
    assert parse_servers("127.0.0.1:50052, host:1") == ("127.0.0.1:50052", "host:1")
    for bad in ("", "host", "host:0", "host:x", ":50052"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_servers(bad)
    assert [is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "192.168.1.2")] == [
        True,
        True,
        True,
        False,
        False,
    ]


def test_a_worker_off_loopback_says_so() -> None:
    port = free_port()
    args = _conformant("rpc-worker", "--host", "0.0.0.0", "--port", str(port), "--threads", "1")
    with _process(args) as (proc, log):
        deadline = time.monotonic() + 60
        while "not loopback" not in _log_tail(log):
            assert proc.poll() is None, _log_tail(log)
            assert time.monotonic() < deadline, _log_tail(log)
            time.sleep(0.2)


def test_a_build_without_rpc_is_one_line_before_any_serving_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a llama-cpp-python built without RPC, rpc-worker said "serving on 127.0.0.1:8000" and then that
    it could not (issue 32). The build is asked first: the one line is why it cannot serve."""
    import backend.rpc
    from conformance.cli import main

    def no_rpc() -> None:
        raise backend.rpc.RpcError("this llama-cpp-python was built without the RPC backend")

    monkeypatch.setattr(backend.rpc, "rpc_library", no_rpc)
    assert main(["rpc-worker", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert "built without the RPC backend" in err
    assert "serving on" not in err
