"""``conformant serve`` as users run it: a subprocess, configured by flags or ``CONFORMANT_*`` variables,
in front of the replayed corpus, or (without ``--upstream``) in front of the bundled backend it starts.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.servers import free_port, run_process

from .conftest import judge

pytestmark = pytest.mark.slow

SERVE = ["python", "-m", "conformance", "serve"]
CHAT = {"model": "gemma", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4}


def _replayed(url: str, name: str, stream: bool) -> httpx.Response:
    from conformance.replay import load_corpus, transcript_stem

    t = next(t for t in load_corpus() if transcript_stem(t) == name.removesuffix("-completed"))
    assert t.request is not None
    body = {**t.request_body, "stream": stream}
    response = httpx.post(
        url + t.request["path"], json=body, headers={"x-conformant-transcript": name}, timeout=30
    )
    verdict = judge(response, t.request["path"], body)
    assert verdict.errors == [], ([f.message for f in verdict.errors], response.text[:1000])
    return response


def test_serve_with_upstream_flag(replay_url: str) -> None:
    port = free_port()
    args = [*SERVE, "--upstream", replay_url, "--port", str(port), "--upstream-kind", "openai"]
    with run_process(args, health_path="/health", port=port, timeout=60) as (url, _):
        for stream in (True, False):
            response = _replayed(url, "ollama-4357-completed", stream)
            assert response.status_code == 200
        assert "conformant_requests_total" in httpx.get(url + "/metrics", timeout=10).text


def test_serve_configured_by_environment_variables(replay_url: str) -> None:
    port = free_port()
    env = {
        "CONFORMANT_UPSTREAM": replay_url,
        "CONFORMANT_PORT": str(port),
        "CONFORMANT_API_KEY": "sk-from-env",
        "CONFORMANT_MODEL_ALIAS": "aliased",
    }
    with run_process(SERVE, health_path="/health", port=port, timeout=60, env=env) as (url, _):
        refused = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
        assert refused.status_code == 401
        response = httpx.post(
            url + "/v1/chat/completions",
            json={**CHAT, "stream": False},
            headers={
                "authorization": "Bearer sk-from-env",
                "x-conformant-transcript": "ollama-4357-completed",
            },
            timeout=30,
        )
        assert response.status_code == 200, response.text
        assert response.json()["model"] == "aliased"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--upstream", "ftp://example"], "--upstream must be an http(s) URL"),
        (["--upstream-kind", "vllm"], "invalid choice"),
        (["--workers", "0"], "--workers must be at least 1"),
    ],
)
def test_bad_configuration_exits_2_with_one_line(flags: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "conformance", "serve", *flags, "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CONFORMANT_UPSTREAM": "http://127.0.0.1:1"},
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def _metric_total(text: str, prefix: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def test_serve_with_workers_shares_the_load_and_sums_metrics_over_them(
    replay_url: str, tmp_path: Path
) -> None:
    """Two worker processes answer on one port; /metrics on either counts what both served."""
    port = free_port()
    args = [*SERVE, "--upstream", replay_url, "--port", str(port), "--upstream-kind", "openai"]
    env = {"CONFORMANT_WORKERS": "2", "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    with run_process(args, health_path="/health", port=port, timeout=60, env=env) as (url, proc):
        workers = [pid for pid in _children(proc.pid) if _is_worker(pid)]
        assert len(workers) == 2, workers
        sent = 0
        # Connections go to whichever worker accepts first: send batches of concurrent requests, each
        # on its own connection, until both workers have served some (each then has a counter file).
        for _ in range(20):
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda _: _replayed(url, "ollama-4357-completed", True), range(8)))
            sent += 8
            if all((tmp_path / f"counter_{pid}.db").exists() for pid in workers):
                break
        assert all((tmp_path / f"counter_{pid}.db").exists() for pid in workers), "one worker served all"
        text = httpx.get(url + "/metrics", timeout=10).text
        assert _metric_total(text, 'conformant_requests_total{endpoint="chat",status="200"}') == sent
        assert _metric_total(text, "conformant_in_flight_requests") == 1  # the /metrics request itself
        proc.terminate()
        proc.wait(timeout=30)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)


def _is_worker(pid: int) -> bool:
    """A process uvicorn spawned to serve (its other child is multiprocessing's resource tracker)."""
    return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()


@pytest.mark.backend
def test_serve_without_upstream_starts_the_bundled_backend_and_stops_it() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    port = free_port()
    with run_process([*SERVE, "--port", str(port)], health_path="/health", port=port, timeout=300) as (
        url,
        proc,
    ):
        backends = _children(proc.pid)
        assert len(backends) == 1
        for stream in (True, False):
            body = {**CHAT, "stream": stream}
            response = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
            assert response.status_code == 200, response.text
            assert judge(response, "/v1/chat/completions", body).errors == []
        proc.terminate()
        proc.wait(timeout=30)
    assert not Path(f"/proc/{backends[0]}").exists()  # the backend went with it
