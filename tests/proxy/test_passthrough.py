"""Pass-through routes (every /v1/* path but the completions) against raw upstreams: the upstream key cut
out of what the upstream repeats, the idle timeout, error pages, and faults after the response head.
The connect and first-byte timeouts are in test_faults.py, with the completion routes'."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from proxy.passthrough import Redactor
from tests.support.servers import wait_for

from .conftest import serve_proxy
from .rawserver import Handler, Record, http_chunk, raw_server, read_request, wait_peer_close
from .test_faults import assert_error, assert_idle, reset

pytestmark = pytest.mark.slow

KEY = "sk-upstream-secret-0123456789abcdef"
EMBEDDINGS = {"model": "m", "input": "hi"}


def _replying(head: bytes, *parts: bytes, then: str = "end") -> Handler:
    """An upstream that answers ``head``, then ``parts`` in separate writes, then ends the body
    (``end``), stalls until the proxy closes the connection (``stall``) or resets it (``reset``)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        await read_request(reader)
        record.requests += 1
        writer.write(head)
        for part in parts:
            await writer.drain()
            await asyncio.sleep(0.05)  # so that the proxy reads each part on its own
            writer.write(part)
        await writer.drain()
        if then == "stall":
            await wait_peer_close(reader, record)
        elif then == "reset":
            await asyncio.sleep(0.05)
            reset(writer)

    return handler


def _head(status: str, content_type: str, *extra: str, length: int | None = None) -> bytes:
    framing = f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    lines = [f"HTTP/1.1 {status}", f"content-type: {content_type}", framing, *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _page(status: str, content_type: str, body: bytes, *extra: str) -> Handler:
    return _replying(_head(status, content_type, *extra, length=len(body)) + body)


@contextlib.contextmanager
def _proxy(handler: Handler, **config: Any) -> Iterator[tuple[str, Starlette, Record]]:
    """The raw upstream and the proxy in front of it: ``(proxy url, app, upstream record)``."""
    with (
        raw_server(handler) as (upstream, record),
        serve_proxy(upstream, upstream_kind="openai", **config) as (url, app),
    ):
        yield url, app, record


def test_the_upstream_key_repeated_in_an_error_is_cut_out_of_body_and_headers() -> None:
    # OpenAI's answer to a wrong key: "Incorrect API key provided: sk-...".
    error = {"error": {"message": f"Incorrect API key provided: {KEY}.", "type": "invalid_request_error"}}
    body = json.dumps(error).encode()
    handler = _page("401 Unauthorized", "application/json", body, f"x-seen-key: Bearer {KEY}")
    with _proxy(handler, upstream_api_key=KEY) as (url, app, _):
        response = httpx.post(url + "/v1/embeddings", json=EMBEDDINGS, timeout=10)
        assert response.status_code == 401
        assert response.json()["error"]["message"] == "Incorrect API key provided: <redacted>."
        assert response.headers["x-seen-key"] == "Bearer <redacted>"
        assert KEY not in response.text + json.dumps(dict(response.headers))
        assert_idle(app)


def test_the_upstream_key_split_across_reads_is_cut_out_of_a_streamed_body() -> None:
    parts = [
        b'data: {"a": "key ' + KEY[:7].encode(),
        KEY[7:20].encode(),
        KEY[20:].encode() + b" and again " + KEY[:3].encode(),
        KEY[3:].encode() + b'"}\n\n',
        b'data: {"b": "' + KEY[:9].encode(),  # the start of the key, not the key: sent as it came
        b'-not-it"}\n\n',
    ]
    head = _head("200 OK", "text/event-stream")
    handler = _replying(head, *(http_chunk(part) for part in parts), b"0\r\n\r\n")
    with _proxy(handler, upstream_api_key=KEY) as (url, app, _):
        response = httpx.get(url + "/v1/responses/stream", timeout=10)
        assert response.status_code == 200
        assert response.text == b"".join(parts).decode().replace(KEY, "<redacted>")
        assert response.text.count("<redacted>") == 2
        assert_idle(app)


def test_the_redactor_finds_the_key_at_every_split_and_holds_back_only_a_possible_start() -> None:
    text = f"x{KEY}y {KEY[:5]}z {KEY}".encode()
    expected = text.replace(KEY.encode(), b"<redacted>")
    for cut in range(len(text) + 1):
        for second in range(cut, len(text) + 1):
            redactor = Redactor(KEY)
            out = [redactor.feed(text[:cut]), redactor.feed(text[cut:second]), redactor.feed(text[second:])]
            assert b"".join(out) + redactor.end() == expected
    redactor = Redactor(KEY)
    assert redactor.feed(b"no key here, s") == b"no key here, "  # "s" may start the key
    assert redactor.feed(b"o it was not") == b"so it was not"
    assert Redactor(None).feed(b"sk-") == b"sk-"


@pytest.mark.parametrize(
    ("status", "content_type", "body", "expected"),
    [
        (
            "500 Internal Server Error",
            "text/html",
            b"<!DOCTYPE html><html><head><title>500 Internal Server Error</title></head><body><pre>"
            b'Traceback (most recent call last):\n  File "/srv/app/embed.py", line 9\n'
            b"KeyError: " + KEY.encode() + b"</pre></body></html>",
            500,
        ),
        (
            "502 Bad Gateway",
            "text/html",
            b"<html><body><h1>Bad Gateway</h1><p>upstream /srv/models/e5.gguf failed</p></body></html>",
            502,
        ),
        (
            "500 Internal Server Error",
            "text/plain",
            b'Traceback (most recent call last):\n  File "/opt/x.py"',
            500,
        ),
        ("422 Unprocessable Entity", "text/plain", b"bad input at /home/u/app/x.py", 400),
        ("404 Not Found", "text/plain", b"", 404),
    ],
)
def test_error_pages_that_are_not_json_become_openai_errors(
    status: str, content_type: str, body: bytes, expected: int
) -> None:
    with _proxy(_page(status, content_type, body), upstream_api_key=KEY) as (url, app, _):
        response = httpx.post(url + "/v1/embeddings", json=EMBEDDINGS, timeout=10)
        error = assert_error(response, expected)
        for leak in ("<", "/srv/", "/home/", "/opt/", "Traceback", KEY):
            assert leak not in error["message"].replace("<path>", "")
        assert_idle(app)


@pytest.mark.parametrize(
    ("status", "content_type", "body"),
    [
        ("404 Not Found", "application/json", b'{"error": {"message": "no such file", "code": 7}}'),
        ("200 OK", "text/plain", b"plain text, kept as it is: <b>/srv/x/y</b>"),
        ("200 OK", "application/octet-stream", bytes(range(256))),
    ],
)
def test_json_errors_and_successful_bodies_pass_unchanged(
    status: str, content_type: str, body: bytes
) -> None:
    with _proxy(_page(status, content_type, body)) as (url, app, _):
        response = httpx.get(url + "/v1/files/file-1/content", timeout=10)
        assert response.status_code == int(status[:3])
        assert response.headers["content-type"] == content_type
        assert response.content == body
        assert_idle(app)


@pytest.fixture
def server_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """``caplog`` with the access log. uvicorn's error logger does not reach it (no propagation): a test
    adds ``caplog.handler`` to it once the server started (uvicorn's logging setup drops handlers)."""
    caplog.set_level(logging.INFO, logger="conformant.access")
    logger = logging.getLogger("uvicorn.error")
    yield caplog
    logger.removeHandler(caplog.handler)


def _read_cut_short(url: str) -> bytes:
    """The body of a passthrough response that the proxy must end early, as far as it came."""
    received = bytearray()

    def read() -> None:
        with httpx.Client(timeout=5) as client, client.stream("GET", url + "/v1/files/file-1/content") as r:
            assert r.status_code == 200
            for part in r.iter_raw():
                received.extend(part)

    with pytest.raises(httpx.RemoteProtocolError):  # the body cut short, not a complete-looking one
        read()
    return bytes(received)


@pytest.mark.parametrize("fault", ["reset", "stall"])
def test_a_fault_after_the_head_ends_the_response_with_one_line_and_no_traceback(
    fault: str, server_log: pytest.LogCaptureFixture
) -> None:
    handler = _replying(_head("200 OK", "application/json", length=1000), b'{"partial":', then=fault)
    with _proxy(handler, idle_timeout=0.3) as (url, app, record):
        logging.getLogger("uvicorn.error").addHandler(server_log.handler)  # uvicorn reset its handlers
        started = time.monotonic()
        assert _read_cut_short(url) == b'{"partial":'
        assert time.monotonic() - started < 3
        if fault == "stall":
            wait_for(lambda: record.peer_closed_at)  # the upstream request was closed too
        assert_idle(app)
    problems = [r for r in server_log.records if r.levelno >= logging.WARNING]
    assert len(problems) <= 1, [r.getMessage() for r in problems]
    assert not any(r.exc_info or "Exception in ASGI" in r.getMessage() for r in problems)
    access = [json.loads(r.getMessage()) for r in server_log.records if r.name == "conformant.access"]
    reason = "ReadError" if fault == "reset" else "idle timeout"
    assert reason in next(line for line in access if line["path"].endswith("/content"))["error"]


@pytest.mark.parametrize("status", ["200 OK", "404 Not Found"])
def test_a_head_request_is_answered_without_waiting_for_a_body(status: str) -> None:
    # A HEAD answer: no body, whatever its length says; the upstream keeps the connection open.
    handler = _replying(_head(status, "application/json", length=100), then="stall")
    with _proxy(handler, idle_timeout=5) as (url, app, _), httpx.Client(timeout=10) as client:
        started = time.monotonic()
        assert client.head(url + "/v1/files/file-1").status_code == int(status[:3])
        assert time.monotonic() - started < 2  # not the idle timeout, waiting for a body
        # The next request on the same connection waits until the proxy is done with the first.
        assert client.get(url + "/health").status_code == 200
        assert_idle(app)


def test_a_json_error_too_large_to_hold_is_relayed_not_refused() -> None:
    # FastAPI and vLLM answer 422 echoing the input: for a large input, more than the proxy holds.
    detail = [{"type": "missing", "loc": ["body", "model"], "msg": "Field required", "input": "x" * 100_000}]
    body = json.dumps({"detail": detail}).encode()
    with _proxy(_page("422 Unprocessable Entity", "application/json", body)) as (url, app, _):
        response = httpx.post(url + "/v1/embeddings", json=EMBEDDINGS, timeout=10)
        assert response.status_code == 422
        assert response.content == body
        assert_idle(app)


async def _head_then_prefill(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record
) -> None:
    # Starlette and FastAPI upstreams send a stream's head before the model runs.
    await read_request(reader)
    record.requests += 1
    writer.write(_head("200 OK", "text/event-stream"))
    await writer.drain()
    await asyncio.sleep(0.8)
    writer.write(http_chunk(b'data: {"type": "response.output_text.delta"}\n\n') + b"0\r\n\r\n")
    await writer.drain()


def test_a_streamed_pass_through_gets_the_first_byte_timeout_for_its_prefill() -> None:
    with _proxy(_head_then_prefill, idle_timeout=0.3, first_byte_timeout=5) as (url, app, record):
        response = httpx.post(
            url + "/v1/responses", json={"model": "m", "input": "hi", "stream": True}, timeout=10
        )
        assert response.status_code == 200
        assert response.text == 'data: {"type": "response.output_text.delta"}\n\n'
        assert record.requests == 1
        assert_idle(app)
