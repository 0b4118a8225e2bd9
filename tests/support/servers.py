"""Real servers for tests: an ASGI app on a free loopback port in a thread, or a subprocess server.

Every helper is a context manager that stops what it started, so no test leaks a server.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette

from proxy.cli import free_port

__all__ = ["RecordingUpstream", "free_port", "run_asgi", "run_process", "wait_for", "wait_http"]


class RecordingUpstream:
    """A fake upstream: a Starlette app of ``routes`` (serve it with ``run_asgi``), and the request bodies
    its handlers saw, by path (``seen``)."""

    def __init__(self, routes: Sequence[Any]) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.app = Starlette(routes=list(routes))

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [body for seen_path, body in self.seen if seen_path == path]


@contextlib.contextmanager
def run_asgi(app: Any, *, port: int | None = None, **config: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a background thread; yields its base URL (no trailing slash)."""
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="auto", **config)
    )
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"test server on port {port} did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def wait_for(condition: Any, timeout: float = 3) -> None:
    """Poll ``condition()`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


def wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``url`` until it answers 200, the process dies, or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before {url} answered")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer 200 within {timeout:.0f}s")


@contextlib.contextmanager
def run_process(
    args: Sequence[str],
    *,
    health_path: str,
    port: int,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    grace: float = 15,
    log_path: Path | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start a server process (``python -m ...`` is ``sys.executable``); yields (base URL, process).

    Stopped with SIGTERM, then SIGKILL after ``grace`` seconds: ik_llama.cpp's server once ignored
    SIGTERM while its HTTP threads were busy. Its stderr is kept in ``log_path`` when given (for a
    caller that reads what the server reported), else in a temporary file.
    """
    full_env = {**os.environ, **(env or {})}
    args = [sys.executable if a == "python" else a for a in args]
    # stderr goes to a file, not a pipe: llama.cpp logs a lot, and a full pipe would stall the server.
    # (closed in the finally below, after the process)
    log = open(log_path, "w+b") if log_path else tempfile.TemporaryFile()  # noqa: SIM115
    proc = subprocess.Popen(args, env=full_env, stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_http(base + health_path, timeout, proc)
        except RuntimeError as exc:
            proc.kill()
            proc.wait(timeout=10)
            log.seek(0)
            tail = log.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}\n--- server stderr ---\n{tail}") from None
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        log.close()
