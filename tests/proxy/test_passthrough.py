"""Pass-through routes (every /v1/* path but the completions) against raw upstreams: the upstream key cut
out of what the upstream repeats, the idle timeout, error pages, and faults after the response head.
The connect and first-byte timeouts are in test_faults.py, with the completion routes'."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from proxy.relay import Redactor
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


@pytest.mark.parametrize("status", ["401 Unauthorized", "200 OK"])
def test_the_upstream_key_repeated_in_an_answer_is_cut_out_of_body_and_headers(status: str) -> None:
    # OpenAI's answer to a wrong key: "Incorrect API key provided: sk-...".
    error = {"error": {"message": f"Incorrect API key provided: {KEY}.", "type": "invalid_request_error"}}
    body = json.dumps(error).encode()
    handler = _page(status, "application/json", body, f"x-seen-key: Bearer {KEY}")
    with _proxy(handler, upstream_api_key=KEY) as (url, app, _):
        response = httpx.post(url + "/v1/embeddings", json=EMBEDDINGS, timeout=10)
        assert response.status_code == int(status[:3])
        assert response.json()["error"]["message"] == "Incorrect API key provided: <redacted>."
        if status == "200 OK":  # relayed; an error is the proxy's own OpenAI error, with none of them
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
        response = httpx.get(url + "/v1/threads/thread_1/runs/run_1/stream", timeout=10)
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
    ("body", "message"),
    [
        (
            b'{"error": {"message": "no such file", "type": "invalid_request_error", "code": "nf"}}',
            "no such file",
        ),
        # vLLM's error shape (Q46), with a traceback in its message.
        (
            b'{"object": "error", "message": "Traceback (most recent call last):\\n  File '
            b'\\"/home/u/vllm/serving.py\\"", "type": "NotFoundError", "code": 404}',
            "",
        ),
        (b'{"detail": "Not Found"}', "Not Found"),  # FastAPI's
    ],
)
def test_json_errors_become_openai_errors_without_tracebacks_or_paths(body: bytes, message: str) -> None:
    with _proxy(_page("404 Not Found", "application/json", body)) as (url, app, _):
        response = httpx.get(url + "/v1/files/file-1/content", timeout=10)
        error = assert_error(response, 404)
        assert error["message"] == (message or "the upstream server reported an error (HTTP 404)")
        assert_idle(app)


def test_an_error_keeps_the_upstreams_advice_on_when_to_retry() -> None:
    handler = _page("429 Too Many Requests", "text/plain", b"slow down", "Retry-After: 7", "x-other: 1")
    with _proxy(handler) as (url, app, _):
        response = httpx.post(url + "/v1/embeddings", json=EMBEDDINGS, timeout=10)
        assert_error(response, 429)
        assert response.headers["retry-after"] == "7"
        assert "x-other" not in response.headers
        assert_idle(app)


@pytest.mark.parametrize(
    ("status", "content_type", "body"),
    [
        ("200 OK", "text/plain", b"plain text, kept as it is: <b>/srv/x/y</b>"),
        ("200 OK", "application/octet-stream", bytes(range(256))),
    ],
)
def test_successful_bodies_pass_unchanged(status: str, content_type: str, body: bytes) -> None:
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
    writer.write(http_chunk(b'data: {"object": "thread.message.delta"}\n\n') + b"0\r\n\r\n")
    await writer.drain()


def test_a_streamed_pass_through_gets_the_first_byte_timeout_for_its_prefill() -> None:
    with _proxy(_head_then_prefill, idle_timeout=0.3, first_byte_timeout=5) as (url, app, record):
        # (An Assistants run: /v1/responses, which this test once used, is the proxy's own route now.)
        response = httpx.post(
            url + "/v1/threads/runs", json={"assistant_id": "a", "stream": True}, timeout=10
        )
        assert response.status_code == 200
        assert response.text == 'data: {"object": "thread.message.delta"}\n\n'
        assert record.requests == 1
        assert_idle(app)


def test_a_compressed_error_page_is_read_as_text() -> None:
    # An upstream that compresses though the proxy asked for identity.
    body = gzip.compress(b"<html><title>model /srv/m.gguf is loading</title></html>")
    handler = _page("503 Service Unavailable", "text/html", body, "content-encoding: gzip")
    with _proxy(handler) as (url, app, _):
        error = assert_error(httpx.post(url + "/v1/embeddings", json=EMBEDDINGS, timeout=10), 503)
        assert error["message"] == "upstream error (HTTP 503): model <path> is loading"
        assert_idle(app)


def test_an_upstreams_404_keeps_the_path_it_names() -> None:
    # The bundled backend's own words for a path it has no route for: the path is the client's, no
    # place on the host, and was scrubbed to "<path>" (found by black-box testing).
    body = b'{"error": {"message": "no route for GET /v1/nothing", "type": "invalid_request_error"}}'
    with _proxy(_page("404 Not Found", "application/json", body)) as (url, app, _):
        error = assert_error(httpx.get(url + "/v1/nothing", timeout=10), 404)
        assert error["message"] == "no route for GET /v1/nothing"
        assert_idle(app)


def test_a_redirect_into_the_upstream_becomes_a_path_on_the_proxy() -> None:
    upstream_url: list[str] = []

    async def redirect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        await read_request(reader)
        writer.write(
            _head(
                "307 Temporary Redirect", "text/plain", f"location: {upstream_url[0]}/v1/files?x=1", length=0
            )
        )
        await writer.drain()

    with raw_server(redirect) as (upstream, _), serve_proxy(upstream, upstream_kind="openai") as (url, app):
        upstream_url.append(upstream)
        response = httpx.get(url + "/v1/files/", timeout=10)
        assert response.status_code == 307
        assert response.headers["location"] == "/v1/files?x=1"  # followed, it stays on the proxy
        assert_idle(app)


def test_headers_named_by_the_upstreams_connection_header_are_not_relayed() -> None:
    extra = ("connection: keep-alive, x-hop", "x-hop: 1", "proxy-authenticate: Basic", "x-kept: 1")
    with _proxy(_page("200 OK", "application/json", b"{}", *extra)) as (url, app, _):
        response = httpx.get(url + "/v1/files", timeout=10)
        assert response.headers["x-kept"] == "1"
        assert "x-hop" not in response.headers
        assert "proxy-authenticate" not in response.headers
        assert_idle(app)


def _listing(*entries: dict[str, Any]) -> bytes:
    return json.dumps({"object": "list", "data": list(entries)}).encode()


@pytest.mark.parametrize(
    ("handler", "status", "message", "upstream_status"),
    [
        (
            _page("500 Internal Server Error", "text/plain", b"loading /srv/m.gguf"),
            500,
            "loading <path>",
            500,
        ),
        (_page("401 Unauthorized", "application/json", b'{"detail": "bad key"}'), 401, "bad key", 401),
        (_page("200 OK", "text/html", b"<html>a web page</html>"), 502, "did not list its models", 200),
        (_replying(b"", then="stall"), 504, "did not list its models in time", None),
        # A head, then a body that never ends: the whole listing is bounded, not each read.
        (_replying(_head("200 OK", "application/json", length=100), then="stall"), 504, "in time", 200),
    ],
)
def test_a_failed_model_listing_says_why_with_the_upstreams_status(
    handler: Handler,
    status: int,
    message: str,
    upstream_status: int | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="conformant.access")
    # The listing's whole bound: long enough that a loaded host reads the head before it (0.5 s once
    # was not, and the head's status went unlogged), short enough for the stalled cases.
    with _proxy(handler, first_byte_timeout=1.5) as (url, app, _):
        error = assert_error(httpx.get(url + "/v1/models", timeout=10), status)
        assert message in error["message"]
        assert_idle(app)
    line = next(json.loads(r.getMessage()) for r in caplog.records if r.name == "conformant.access")
    assert message in line["error"]
    assert line["upstream_status"] == upstream_status


def test_the_upstream_key_is_cut_out_of_the_model_listing() -> None:
    listing = _listing({"id": "m", "owned_by": f"key {KEY}"})
    with _proxy(_page("200 OK", "application/json", listing), upstream_api_key=KEY) as (url, app, _):
        response = httpx.get(url + "/v1/models", timeout=10)
        assert response.json()["data"][0]["owned_by"] == "key <redacted>"
        assert_idle(app)


def test_a_failed_model_listing_keeps_the_upstreams_advice_on_when_to_retry() -> None:
    handler = _page("429 Too Many Requests", "text/plain", b"busy", "Retry-After: 7")
    with _proxy(handler) as (url, app, _):
        response = httpx.get(url + "/v1/models", timeout=10)
        assert_error(response, 429)
        assert response.headers["retry-after"] == "7"
        assert_idle(app)
