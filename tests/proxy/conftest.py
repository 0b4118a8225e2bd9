"""Fixtures: the replay upstream serving the shipped quirk corpus, and a proxy in front of any upstream."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from conformance.judge import Verdict, judge_response
from conformance.replay import create_replay_app, load_corpus
from conformance.transcript import Transcript
from proxy.app import create_app
from proxy.client_limits import LimitedClientProtocol
from proxy.config import ProxyConfig
from proxy.upstream import Upstream
from tests.live import llama_cpp_server
from tests.support.postgres import PostgresServer, postgres_binaries, running_postgres
from tests.support.servers import free_port, run_asgi, run_process


@contextlib.contextmanager
def serve_proxy(upstream: str, **config: Any) -> Iterator[tuple[str, Starlette]]:
    """The proxy on a free loopback port in front of ``upstream``, served as ``conformant serve``
    serves it; yields its base URL and the app. Its stored Responses go to a temporary file unless
    ``responses_store`` names one: never into the user's own store."""
    with tempfile.TemporaryDirectory(prefix="conformant-test-store-") as directory:
        config.setdefault("responses_store", os.path.join(directory, "responses.sqlite3"))
        app = create_app(ProxyConfig(upstream=upstream, **config))
        with run_asgi(app, http=LimitedClientProtocol, proxy_headers=False) as url:
            yield url, app


def only_upstream(app: Starlette) -> Upstream:
    """The upstream of a proxy served in front of one ``--upstream`` (its pool of one)."""
    (replica,) = app.state.serving.pool.replicas.values()
    upstream: Upstream = replica.upstream
    return upstream


@contextlib.contextmanager
def run_proxy(upstream: str, **config: Any) -> Iterator[str]:
    """The proxy on a free loopback port in front of ``upstream``; yields its base URL."""
    with serve_proxy(upstream, **config) as (url, _):
        yield url


def completed(t: Transcript) -> Transcript:
    """The transcript with ``[DONE]`` appended: the corpus holds excerpts cut off mid-stream."""
    body = t.read_body().rstrip(b"\r\n") + b"\n\ndata: [DONE]\n\n"
    return Transcript(
        name=t.name + "-completed",
        body_path=None,
        request=t.request,
        status=t.status,
        headers=t.headers,
        body=body,
    )


@pytest.fixture(scope="session")
def corpus() -> list[Transcript]:
    return load_corpus()


@pytest.fixture(scope="session")
def replay_url(corpus: list[Transcript]) -> Iterator[str]:
    transcripts = corpus + [completed(t) for t in corpus if t.stream]
    with run_asgi(create_replay_app(transcripts, pace=None)) as url:
        yield url


@pytest.fixture(scope="session")
def proxy_url(replay_url: str) -> Iterator[str]:
    with run_proxy(replay_url) as url:
        yield url


def judge(response: httpx.Response, path: str, body: dict[str, Any]) -> Verdict:
    return judge_response(
        response.content,
        request={"method": "POST", "path": path, "body": body},
        status=response.status_code,
        headers=dict(response.headers),
    )


def post_judged(
    url: str,
    path: str,
    body: dict[str, Any],
    status: int = 200,
    *,
    timeout: float = 30.0,
    known_fields: bool = False,
) -> httpx.Response:
    """``body`` posted to ``url + path``, answered with ``status`` and judged without errors (and, with
    ``known_fields``, without a field OpenAI does not send)."""
    response = httpx.post(url + path, json=body, timeout=timeout)
    assert response.status_code == status, response.text[:500]
    verdict = judge(response, path, body)
    assert verdict.errors == [], ([f.message for f in verdict.errors], response.text[:1500])
    if known_fields:
        assert "unknown-field" not in [f.rule for f in verdict.findings], response.text[:1500]
    return response


def upstream_answer(chat: bool, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """An upstream's answer (a JSON body, or with ``.chunk`` objects a stream event) of ``choices``."""
    kind = "chat.completion" if chat else "text_completion"
    return {"id": "cmpl-1", "object": kind, "created": 1, "model": "m", "choices": choices, **extra}


def metric(text: str, name: str, **labels: str) -> float:
    """The value of the sample ``name`` with ``labels`` in a /metrics page."""
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in /metrics")


@pytest.fixture(scope="module")
def llama_cpp_python() -> Iterator[str]:
    """llama-cpp-python's own server on the Gemma model, started for this module."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    port = free_port()
    command = llama_cpp_server.command(port)
    with run_process(command, health_path="/v1/models", port=port, timeout=180) as (url, _):
        yield url


# --- a PostgreSQL server for the response store's tests ---------------------------------------------------


def psycopg_or_skip() -> Any:
    """The psycopg module, or the test skipped: the postgres extra is not installed."""
    return pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not installed")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for the session (tests/support/postgres.py), or the test skipped
    where none can run here."""
    psycopg_or_skip()
    binaries = postgres_binaries()
    if binaries is None:
        pytest.skip(
            "no PostgreSQL server programs (initdb, pg_ctl, postgres) on PATH or in /usr/lib/postgresql"
        )
    with running_postgres(binaries) as server:
        yield server


@pytest.fixture
def database(postgres: PostgresServer) -> Iterator[str]:
    """The URL (password included) of a new, empty database, dropped after the test."""
    psycopg = psycopg_or_skip()
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres.url("postgres"), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield postgres.url(name)
    with psycopg.connect(postgres.url("postgres"), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
