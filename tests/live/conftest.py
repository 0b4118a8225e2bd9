"""Servers the live tests share: the replay server over recorded llama-cpp-python exchanges."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.replay import corpus_dir, create_replay_app
from conformance.transcript import Transcript, discover
from tests.live import llama_cpp_server
from tests.support.servers import free_port, run_asgi, run_process

LLAMA_CPP_PYTHON = Path(corpus_dir()) / "llama-cpp-python"


@pytest.fixture(scope="session")
def recorded_llama_cpp_python() -> list[Transcript]:
    return discover([LLAMA_CPP_PYTHON])


@pytest.fixture(scope="session")
def recorded_model(recorded_llama_cpp_python: list[Transcript]) -> str:
    """The model the recording asked for (the one its server listed first)."""
    chat = next(t for t in recorded_llama_cpp_python if t.name.endswith("-chat"))
    model = chat.request_body["model"]
    assert isinstance(model, str)
    return model


@pytest.fixture(scope="session")
def replayed_llama_cpp_python(recorded_llama_cpp_python: list[Transcript]) -> Iterator[str]:
    """llama-cpp-python's server as recorded by ``conformant check --record``, replayed without pacing."""
    with run_asgi(create_replay_app(recorded_llama_cpp_python, pace=None)) as url:
        yield url


OVERFLOW_WORDS = str(llama_cpp_server.OVERFLOW_WORDS)


@pytest.fixture(scope="session")
def llama_cpp_python_url() -> Iterator[str]:
    """llama-cpp-python's own OpenAI server on the Gemma 3 270M model (needs the backend extra)."""
    port = free_port()
    with run_process(llama_cpp_server.command(port), health_path="/v1/models", port=port, timeout=180) as (
        url,
        _,
    ):
        yield url


@pytest.fixture(scope="session")
def backend_url() -> Iterator[str]:
    """The bundled backend (``conformant backend``) on its default model (needs the backend extra)."""
    port = free_port()
    args = ["python", "-m", "conformance", "backend", "--host", "127.0.0.1", "--port", str(port)]
    with run_process(args, health_path="/health", port=port, timeout=180) as (url, _):
        yield url


@contextlib.contextmanager
def translating_proxy(upstream: str) -> Iterator[str]:
    """``conformant serve`` in front of ``upstream``, its model named ``gemma``: the translated
    protocols' client tests (the Responses API, the Messages API) go through it."""
    port = free_port()
    serve = ["python", "-m", "conformance", "serve", "--upstream", upstream]
    serve += ["--host", "127.0.0.1", "--port", str(port), "--model-alias", "gemma"]
    with run_process(serve, health_path="/health", port=port, timeout=120) as (url, _):
        yield url


@pytest.fixture(scope="module")
def llama_cpp_python_proxy() -> Iterator[str]:
    """The proxy in front of llama-cpp-python's server on Gemma 3 270M with ``--chat_format
    chatml-function-calling``: a named ``tool_choice`` gets a call whose arguments a grammar holds to the
    tool's schema, and its template takes ``tool`` messages."""
    port = free_port()
    command = [*llama_cpp_server.command(port), "--chat_format", "chatml-function-calling"]
    with (
        run_process(command, health_path="/v1/models", port=port, timeout=180) as (upstream, _),
        translating_proxy(upstream) as url,
    ):
        yield url


@pytest.fixture(scope="module")
def backend_proxy(backend_url: str) -> Iterator[str]:
    with translating_proxy(backend_url) as url:
        yield url
