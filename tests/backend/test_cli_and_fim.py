"""The `conformant backend` command as users run it, and what only the synthetic model has: a GGUF chat
template (rendered with Jinja) and fill-in-the-middle tokens for `suffix`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.app import create_app
from backend.context import ContextOptions
from backend.service import Backend
from backend.synthetic import SyntheticSpec, write_synthetic
from tests.backend.conftest import Exchange
from tests.support.servers import free_port, run_asgi, run_process, wait_for, wait_http

pytestmark = pytest.mark.backend


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Backend]]:
    path = write_synthetic(tmp_path_factory.mktemp("models") / "dense.gguf", SyntheticSpec())
    backend = Backend.open(str(path), context=ContextOptions(ctx_size=512, parallel=2, threads=2))
    with run_asgi(create_app(backend)) as url:
        yield url, backend
    backend.close()


def _post(url: str, path: str, body: dict[str, Any]) -> Exchange:
    response = httpx.post(url + path, json=body, timeout=60)
    exchange = Exchange("POST", path, body, response.status_code, dict(response.headers))
    exchange.raw += response.content
    return exchange


def test_suffix_uses_the_models_fim_tokens(synthetic: tuple[str, Backend]) -> None:
    url, backend = synthetic
    assert backend.vocab.fim is not None
    exchange = _post(url, "/v1/completions", {"prompt": "hello", "suffix": "world", "max_tokens": 4})
    assert exchange.status == 200
    assert exchange.judge_errors() == []
    prompt = backend.prompts(_parse({"prompt": "hello", "suffix": "world"}))[0].tokens
    pre, suf, mid = backend.vocab.fim
    assert prompt[-1] == mid
    assert pre in prompt
    assert suf in prompt


def test_gguf_chat_template_is_used(synthetic: tuple[str, Backend]) -> None:
    url, backend = synthetic
    assert backend.template.origin == "gguf"
    text = backend.template.render(_parse_chat([{"role": "user", "content": "hi"}]).messages)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    exchange = _post(
        url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    )
    assert exchange.status == 200
    assert exchange.judge_errors() == []


def _parse(body: dict[str, Any]) -> Any:
    from backend.requests import parse_completion_request

    return parse_completion_request(body)


def _parse_chat(messages: list[dict[str, str]]) -> Any:
    from backend.requests import parse_chat_request

    return parse_chat_request({"messages": messages})


def test_command_serves_gemma_by_default() -> None:
    port = free_port()
    args = [
        "python",
        "-m",
        "backend",
        "--port",
        str(port),
        "--ctx-size",
        "1024",
        "--parallel",
        "1",
        "-t",
        "2",
    ]
    with run_process(args, health_path="/health", port=port) as (url, _):
        exchange = _post(
            url,
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True},
        )
        assert exchange.status == 200
        assert exchange.judge_errors() == []
        assert httpx.get(url + "/v1/models").json()["data"][0]["id"] == "gemma-3-270m-q4_k_m"


def test_quantized_v_cache_without_flash_attention_is_refused_up_front(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "backend",
            "--model",
            str(tmp_path / "none.gguf"),
            "--cache-type-v",
            "q8_0",
            "--flash-attn",
            "off",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--cache-type-v q8_0 needs flash attention" in result.stderr
    assert "Traceback" not in result.stderr


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (reaped, or a zombie waiting for its new parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_the_bundled_backend_stops_when_serve_is_killed(tmp_path: Path) -> None:
    """Out of serve's group, the backend outlived a serve that was killed (SIGKILL, the OOM killer, a
    harness's deadline): its memory and port held for ever. It now gets SIGTERM when serve is gone."""
    model = write_synthetic(tmp_path / "small.gguf", SyntheticSpec())
    port = free_port()
    args = [sys.executable, "-m", "conformance", "serve", "--port", str(port), "--model", str(model)]
    quiet = subprocess.DEVNULL
    proc = subprocess.Popen(args, stdout=quiet, stderr=quiet, start_new_session=True)
    backend = 0
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 120, proc)
        backend = int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0])
        proc.kill()
        proc.wait()
        wait_for(lambda: _gone(backend), timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if backend and not _gone(backend):
            os.kill(backend, signal.SIGKILL)


def test_serve_on_the_bundled_backend_stops_on_a_terminals_second_ctrl_c_without_a_traceback(
    tmp_path: Path,
) -> None:
    """A terminal's Ctrl-C goes to its whole foreground process group. The backend serve started was in
    that group, so a second Ctrl-C reached the backend's uvicorn too, which force-exited printing four
    tracebacks (issue 32, item 9); in a group of its own it is stopped by serve, once the open
    responses have their ends."""
    model = write_synthetic(tmp_path / "long.gguf", SyntheticSpec(n_ctx_train=65536))
    port = free_port()
    log_path = tmp_path / "stderr"
    args = [sys.executable, "-m", "conformance", "serve", "--port", str(port), "--model", str(model)]
    with log_path.open("w+b") as log:
        env = {**os.environ, "CONFORMANT_CTX_SIZE": "65536", "CONFORMANT_PARALLEL": "1"}
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True, env=env)
        try:
            wait_http(f"http://127.0.0.1:{port}/health", 120, proc)
            # The backend is out of serve's group: a Ctrl-C reaches serve alone (with the backend in
            # the group, the tracebacks below came in about one run of four: a race of the two stops).
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            assert children
            assert all(os.getpgid(int(child)) != os.getpgid(proc.pid) for child in children)
            # A reply that outlasts the test: the random model is kept from ending it.
            body = {"messages": [{"role": "user", "content": "Go on."}], "stream": True}
            body |= {"max_tokens": 60000, "ignore_eos": True}
            with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as stream:
                lines = stream.iter_lines()
                assert any(line.startswith("data: {") for line in lines)
                os.killpg(proc.pid, signal.SIGINT)  # the group, as a terminal sends it
                wait_for(lambda: b"stopping; 1 open response" in log_path.read_bytes(), timeout=10)
                os.killpg(proc.pid, signal.SIGINT)
                rest = list(lines)
            assert json.loads(rest[-2][6:])["error"]["code"] == "server_shutting_down"
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.seek(0)
        stderr = log.read().decode(errors="replace")
    assert "Traceback" not in stderr
    assert "CancelledError" not in stderr
