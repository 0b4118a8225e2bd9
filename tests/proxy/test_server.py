"""The proxy's server surface against a real upstream: auth, keys, body limit, models, pass-through,
metrics, the access log, request ids and CORS.

The upstream is a small Starlette app that records what reached it, so each test can assert what the
proxy forwarded (the upstream key, never the client's) as well as what the client got back.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from conformance.api_errors import redact_text
from proxy.errors import scrub_message
from tests.support.servers import run_asgi, wait_for

from .conftest import judge, metric, run_proxy

pytestmark = pytest.mark.slow

CLIENT_KEY = "sk-client-secret-1"
UPSTREAM_KEY = "sk-upstream-secret-2"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
# OpenAI's ListModelsResponse and Model (openai-spec.md 2.12).
MODELS_SCHEMA = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "object", "created", "owned_by"],
                "additionalProperties": False,
                "properties": {
                    "id": {"type": "string", "minLength": 1},
                    "object": {"const": "model"},
                    "created": {"type": "integer"},
                    "owned_by": {"type": "string"},
                },
            },
        },
    },
}


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class Upstream:
    """Records the requests it gets; streams a reply that needs a repair (finish_reason "eos", Q18)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        routes = [
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/{rest:path}", self.echo, methods=["GET", "POST", "DELETE"]),
        ]
        self.app = Starlette(routes=routes)

    async def _record(self, request: Request) -> dict[str, Any]:
        seen = {
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "headers": dict(request.headers),
            "body": (await request.body()).decode(),
        }
        self.requests.append(seen)
        return seen

    async def chat(self, request: Request) -> Response:
        seen = await self._record(request)
        body = json.loads(seen["body"])
        key = str(seen["headers"].get("authorization")).removeprefix("Bearer ")
        if body.get("model") == "echo-key":
            # Like OpenAI's "Incorrect API key provided: sk-...": the upstream repeats the key it got.
            message = f"key Bearer {key} is not allowed for this model"
            return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, 403)
        if body.get("model") == "echo-key-fields":
            # The key in other fields, and where the proxy's bound on a message's length cuts it short.
            message = "x" * 490 + key
            error = {"message": message, "type": "invalid_request_error", "param": key, "code": key}
            return JSONResponse({"error": error}, 400)
        if body.get("model") == "echo-key-text":
            text = _event({**_chunk({"role": "assistant", "content": f"the key is {key}"}), "id": key})
            return Response(
                text + _event(_chunk({}, "stop")) + b"data: [DONE]\n\n", media_type="text/event-stream"
            )

        async def events() -> AsyncIterator[bytes]:
            yield _event(_chunk({"role": "assistant", "content": ""}))
            yield _event(_chunk({"content": "Hello"}))
            usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
            yield _event({**_chunk({}, "eos"), "usage": usage})
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def models(self, request: Request) -> Response:
        await self._record(request)
        # llama.cpp's shape: a local path as the id, extra keys, no created/owned_by on one entry.
        return JSONResponse(
            {
                "object": "list",
                "models": [{"name": "gemma"}],
                "data": [
                    {"id": "/srv/models/gemma-3-270m.gguf", "object": "model", "meta": {"n_ctx": 2048}},
                    {"id": "other", "object": "model", "created": 7, "owned_by": "someone"},
                ],
            }
        )

    async def echo(self, request: Request) -> Response:
        seen = await self._record(request)
        return JSONResponse(
            {"path": seen["path"], "query": seen["query"], "body": seen["body"]},
            status_code=201,
            # llama-server allows every origin, and names its own request.
            headers={
                "x-upstream-header": "kept",
                "access-control-allow-origin": "*",
                "x-request-id": "up-1",
                "request-id": "up-1",  # (vLLM's and Anthropic's name: the same id both ways)
            },
        )


@pytest.fixture
def upstream() -> Iterator[tuple[str, Upstream]]:
    server = Upstream()
    with run_asgi(server.app) as url:
        yield url, server


def _auth(key: str = CLIENT_KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _assert_openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return dict(error)


def test_api_key_is_required_on_every_route(upstream: tuple[str, Upstream]) -> None:
    url, server = upstream
    with run_proxy(url, api_key=CLIENT_KEY, upstream_kind="openai") as proxy:
        for headers in ({}, _auth("sk-wrong"), {"authorization": CLIENT_KEY}):
            for method, path in (
                ("POST", "/v1/chat/completions"),
                ("POST", "/v1/completions"),
                ("GET", "/v1/models"),
                ("POST", "/v1/embeddings"),
            ):
                response = httpx.request(method, proxy + path, json=CHAT, headers=headers, timeout=10)
                error = _assert_openai_error(response, 401)
                assert error["code"] == "invalid_api_key"
                assert error["type"] == "invalid_request_error"
        assert server.requests == []  # nothing unauthorized reached the upstream
        response = httpx.post(proxy + "/v1/chat/completions", json=CHAT, headers=_auth(), timeout=10)
        assert response.status_code == 200
        assert judge(response, "/v1/chat/completions", CHAT).errors == []
        assert httpx.get(proxy + "/health", timeout=10).status_code == 200  # health needs no key


def test_upstream_key_is_injected_and_never_shown(
    upstream: tuple[str, Upstream], caplog: pytest.LogCaptureFixture
) -> None:
    url, server = upstream
    caplog.set_level(logging.INFO, logger="conformant.access")
    seen_by_client: list[str] = []
    with run_proxy(url, api_key=CLIENT_KEY, upstream_api_key=UPSTREAM_KEY, upstream_kind="openai") as proxy:
        for method, path, body in (
            ("POST", "/v1/chat/completions", CHAT),
            ("POST", "/v1/chat/completions", {**CHAT, "stream": False}),
            ("POST", "/v1/chat/completions", {**CHAT, "model": "echo-key"}),
            ("POST", "/v1/chat/completions", {**CHAT, "model": "echo-key", "stream": False}),
            ("POST", "/v1/chat/completions", {**CHAT, "model": "echo-key-fields"}),
            ("POST", "/v1/chat/completions", {**CHAT, "model": "echo-key-text"}),
            ("POST", "/v1/chat/completions", {**CHAT, "model": "echo-key-text", "stream": False}),
            ("GET", "/v1/models", None),
            ("POST", "/v1/embeddings", {"input": "x"}),
        ):
            response = httpx.request(method, proxy + path, json=body, headers=_auth(), timeout=10)
            assert response.status_code < 500, response.text
            seen_by_client += [response.text, json.dumps(dict(response.headers))]
        error = httpx.post(
            proxy + "/v1/chat/completions", json={**CHAT, "model": "echo-key"}, headers=_auth(), timeout=10
        )
        assert error.status_code == 403
        assert "<redacted>" in error.json()["error"]["message"]
        seen_by_client.append(httpx.get(proxy + "/metrics", timeout=10).text)
    assert all(r["headers"]["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in server.requests)
    assert len(server.requests) == 10
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert logged.count('"request_id"') >= 10
    for text in [*seen_by_client, logged]:
        assert UPSTREAM_KEY[:8] not in text  # not even a part of it
        assert CLIENT_KEY not in text


def test_a_placeholder_upstream_key_is_not_cut_out_of_answers(upstream: tuple[str, Upstream]) -> None:
    # vLLM's usual "EMPTY": a key this short is no secret, and cutting it would change the model's text.
    url, _ = upstream
    with run_proxy(url, upstream_api_key="EMPTY", upstream_kind="openai") as proxy:
        response = httpx.post(
            proxy + "/v1/chat/completions", json={**CHAT, "model": "echo-key-text"}, timeout=10
        )
        assert "the key is EMPTY" in response.text
        error = httpx.post(proxy + "/v1/chat/completions", json={**CHAT, "model": "echo-key"}, timeout=10)
        assert error.json()["error"]["message"] == "key Bearer EMPTY is not allowed for this model"


def test_a_message_is_cut_where_the_key_begins_only_when_it_was_cut_short() -> None:
    key = "sk-upstream-secret-2"
    cut = scrub_message("x" * 490 + key)
    assert cut.endswith("sk-upstrea...")
    assert redact_text(cut, key) == "x" * 490 + "<redacted>..."
    assert redact_text("still loading the model...", "model-7f3a9c") == "still loading the model..."


def test_a_body_in_a_content_coding_is_a_415_the_upstream_never_sees(upstream: tuple[str, Upstream]) -> None:
    # The header went to the upstream with the proxy's own JSON (refused there), and a gzipped body was
    # "not valid JSON" (found by black-box testing); Anthropic's clients get their own error shape.
    url, server = upstream
    asked_before = len(server.requests)
    zipped = gzip.compress(json.dumps(CHAT).encode())
    with run_proxy(url, upstream_kind="openai") as proxy:
        for path, body in (("/v1/chat/completions", zipped), ("/v1/messages", json.dumps(CHAT).encode())):
            headers = {"content-type": "application/json", "content-encoding": "gzip"}
            refused = httpx.post(proxy + path, content=body, headers=headers, timeout=10)
            assert refused.status_code == 415
            assert refused.headers["accept-encoding"] == "identity"
            message = refused.json()["error"]["message"]
            assert message == "Content-Encoding 'gzip' is not supported: send the request body uncompressed"
        assert refused.json()["type"] == "error"  # the Messages API's shape
        plain = httpx.post(
            proxy + "/v1/chat/completions", json=CHAT, headers={"content-encoding": "identity"}
        )
        assert plain.status_code == 200
    assert len(server.requests) == asked_before + 1
    assert "content-encoding" not in server.requests[-1]["headers"]


def test_max_body_is_413(upstream: tuple[str, Upstream]) -> None:
    url, server = upstream
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 2000}]}
    with run_proxy(url, max_body=1000, upstream_kind="openai") as proxy:
        declared = httpx.post(proxy + "/v1/chat/completions", json=big, timeout=10)
        assert _assert_openai_error(declared, 413)["code"] == "request_too_large"

        def chunked() -> Iterator[bytes]:  # no content-length: counted while read
            data = json.dumps(big).encode()
            for start in range(0, len(data), 256):
                yield data[start : start + 256]

        streamed = httpx.post(
            proxy + "/v1/chat/completions",
            content=chunked(),
            headers={"content-type": "application/json"},
            timeout=10,
        )
        _assert_openai_error(streamed, 413)
        passthrough = httpx.post(proxy + "/v1/embeddings", json={"input": "x" * 2000}, timeout=10)
        _assert_openai_error(passthrough, 413)
        assert server.requests == []
        assert httpx.post(proxy + "/v1/chat/completions", json=CHAT, timeout=10).status_code == 200


def test_more_messages_than_max_items_is_a_400_in_each_protocols_words(
    upstream: tuple[str, Upstream], caplog: pytest.LogCaptureFixture
) -> None:
    """Each message costs the event loop a few microseconds per pass: 400,000 held it 1.7 s (issue 32).
    Above --max-items the request is refused before any of that work and before the upstream hears of
    it; at the limit it is served. A Responses conversation counts as the chat it becomes: consecutive
    user items are one message, alternating roles are one each."""
    caplog.set_level(logging.INFO, logger="conformant.access")
    url, server = upstream
    turns = [{"role": role, "content": "hi"} for role in ("user", "assistant", "user")]
    with run_proxy(url, max_items=2, upstream_kind="openai") as proxy:
        chat = httpx.post(proxy + "/v1/chat/completions", json={**CHAT, "messages": turns}, timeout=10)
        assert _assert_openai_error(chat, 400)["code"] == "array_above_max_length"
        assert "--max-items" in chat.json()["error"]["message"]
        # The proxy's own refusal is on the request's log line too (it said "error": null, issue 32).
        logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "conformant.access"]
        refused = [line for line in logged if line["path"] == "/v1/chat/completions"]
        assert refused[-1]["status"] == 400
        assert refused[-1]["error_code"] == "array_above_max_length"
        assert "--max-items" in refused[-1]["error"]
        answer = httpx.post(
            proxy + "/v1/messages", json={"model": "m", "max_tokens": 8, "messages": turns}, timeout=10
        )
        assert answer.status_code == 400
        assert answer.json()["type"] == "error"
        assert answer.json()["error"]["type"] == "invalid_request_error"
        items = [{"type": "message", **turn} for turn in turns]
        responses = httpx.post(proxy + "/v1/responses", json={"model": "m", "input": items}, timeout=10)
        assert responses.status_code == 400
        assert responses.json()["error"]["code"] == "array_above_max_length"
        assert server.requests == []
        two = httpx.post(proxy + "/v1/chat/completions", json={**CHAT, "messages": turns[:2]}, timeout=10)
        assert two.status_code == 200
        # A message of more content parts than --max-items counts as that many (issue 32).
        parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}] * 3}]
        sent = len(server.requests)
        many = httpx.post(proxy + "/v1/chat/completions", json={**CHAT, "messages": parts}, timeout=10)
        assert _assert_openai_error(many, 400)["code"] == "array_above_max_length"
        assert len(server.requests) == sent
        joined = [{"type": "message", "role": "user", "content": "hi"}] * 5
        assert (
            httpx.post(proxy + "/v1/responses", json={"model": "m", "input": joined}, timeout=10).status_code
            == 200
        )


def test_a_defect_of_the_proxy_mid_stream_ends_the_stream_with_an_error_event(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A repair that raises once text went out (issue 32: a 1,000-deep tool call did) cut the connection
    with no error event. The stream now ends as for an upstream's failure, with OpenAI's error event
    last and the body whole; the traceback is in the server log, not in what the client reads."""
    from proxy.normalizer.stream import StreamNormalizer

    feed = StreamNormalizer.feed_payload

    def failing(self: StreamNormalizer, obj: Any) -> list[dict[str, Any]]:
        if "eos" in json.dumps(obj):
            raise RuntimeError("a repair's defect at /srv/conformant/proxy/x.py")
        return feed(self, obj)

    async def paced(request: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            yield _event(_chunk({"role": "assistant", "content": "Hello"}))
            await asyncio.sleep(0.3)  # the next event in a read of its own, once "Hello" went out
            yield _event(_chunk({}, "eos"))
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    monkeypatch.setattr(StreamNormalizer, "feed_payload", failing)
    app = Starlette(routes=[Route("/v1/chat/completions", paced, methods=["POST"])])
    with run_asgi(app) as url, run_proxy(url, upstream_kind="openai") as proxy:
        response = httpx.post(proxy + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=10)
    assert response.status_code == 200
    events = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    error = json.loads(events[-1])["error"]  # the stream's last event, as for an upstream's failure
    assert error["message"] == "internal error in the proxy"
    assert "Hello" in response.text  # what went out before stays
    assert "/srv/conformant" not in response.text
    assert "a repair's defect" in caplog.text


def test_a_continuation_past_max_body_with_its_conversation_is_a_413(
    upstream: tuple[str, Upstream], tmp_path: Path
) -> None:
    """A conversation grew past --max-body by continuation, 120 bytes at a time (issue 32)."""
    url, _ = upstream
    store = str(tmp_path / "responses.sqlite3")
    with run_proxy(url, max_body=3000, upstream_kind="openai", responses_store=store) as proxy:
        first = httpx.post(proxy + "/v1/responses", json={"model": "m", "input": "x" * 2000}, timeout=10)
        assert first.status_code == 200, first.text
        again = {"model": "m", "input": "And?", "previous_response_id": first.json()["id"]}
        refused = httpx.post(proxy + "/v1/responses", json=again, timeout=10)
        assert refused.status_code == 413
        assert refused.json()["error"]["code"] == "request_too_large"


def test_a_response_stored_under_one_key_is_a_404_under_another(
    upstream: tuple[str, Upstream], tmp_path: Path
) -> None:
    """Two proxies, two keys, one store file: B could read, continue and delete A's responses (issue 32)."""
    url, _ = upstream
    store = str(tmp_path / "responses.sqlite3")
    with (
        run_proxy(url, api_key="sk-key-a", upstream_kind="openai", responses_store=store) as a,
        run_proxy(url, api_key="sk-key-b", upstream_kind="openai", responses_store=store) as b,
    ):
        made = httpx.post(a + "/v1/responses", json={"model": "m", "input": "hi"}, headers=_auth("sk-key-a"))
        assert made.status_code == 200, made.text
        path = "/v1/responses/" + made.json()["id"]
        assert httpx.get(b + path, headers=_auth("sk-key-b")).status_code == 404
        assert httpx.delete(b + path, headers=_auth("sk-key-b")).status_code == 404
        again = {"model": "m", "input": "and?", "previous_response_id": made.json()["id"]}
        assert httpx.post(b + "/v1/responses", json=again, headers=_auth("sk-key-b")).status_code == 400
        assert httpx.get(a + path, headers=_auth("sk-key-a")).status_code == 200


def test_models_list_is_normalized(upstream: tuple[str, Upstream]) -> None:
    url, _ = upstream
    with run_proxy(url, upstream_kind="openai") as proxy:
        listing = httpx.get(proxy + "/v1/models", timeout=10)
        assert listing.status_code == 200
        jsonschema.validate(listing.json(), MODELS_SCHEMA)
        entries = listing.json()["data"]
        assert [m["id"] for m in entries] == ["gemma-3-270m", "other"]  # no local path (Q09)
        assert entries[1]["created"] == 7
        assert entries[1]["owned_by"] == "someone"
        text = httpx.get(proxy + "/metrics", timeout=10).text
        assert metric(text, "conformant_repairs_total", rule="Q09") == 1
    with run_proxy(url, model_alias="my-model", upstream_kind="openai") as proxy:
        listing = httpx.get(proxy + "/v1/models", timeout=10)
        jsonschema.validate(listing.json(), MODELS_SCHEMA)
        assert [m["id"] for m in listing.json()["data"]] == ["my-model"]


def test_a_model_listed_without_its_path_reaches_the_upstream_by_its_served_name(
    upstream: tuple[str, Upstream],
) -> None:
    url, server = upstream
    with run_proxy(url, upstream_kind="openai") as proxy:
        shown = httpx.get(proxy + "/v1/models", timeout=10).json()["data"][0]["id"]
        assert shown == "gemma-3-270m"
        body = {**CHAT, "model": shown}
        response = httpx.post(proxy + "/v1/chat/completions", json=body, timeout=10)
        assert response.status_code == 200
        assert judge(response, "/v1/chat/completions", body).errors == []
        assert json.loads(server.requests[-1]["body"])["model"] == "/srv/models/gemma-3-270m.gguf"
        assert {json.loads(line[6:])["model"] for line in response.text.split("\n\n")[:-2]} == {shown}
        other = httpx.post(proxy + "/v1/chat/completions", json={**CHAT, "model": "other"}, timeout=10)
        assert other.status_code == 200
        assert json.loads(server.requests[-1]["body"])["model"] == "other"  # listed as it is served


def test_a_shown_name_that_is_served_itself_or_stands_for_two_models_is_not_mapped() -> None:
    asked: list[str] = []

    async def models(_: Request) -> Response:
        served = ["qwen", "/models/qwen.gguf", "/a/model.gguf", "/b/model.gguf", "/srv/solo.gguf"]
        return JSONResponse({"object": "list", "data": [{"id": name} for name in served]})

    async def chat(request: Request) -> Response:
        asked.append((await request.json())["model"])
        return JSONResponse({"error": {"message": "no", "type": "invalid_request_error"}}, 400)

    routes = [Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])]
    with run_asgi(Starlette(routes=routes)) as url, run_proxy(url, upstream_kind="openai") as proxy:
        shown = [m["id"] for m in httpx.get(proxy + "/v1/models", timeout=10).json()["data"]]
        assert shown == ["qwen", "qwen", "model", "model", "solo"]
        for name in ("qwen", "model", "solo"):
            httpx.post(proxy + "/v1/chat/completions", json={**CHAT, "model": name}, timeout=10)
    # "qwen" is served as it is; "model" could be either path; only "solo" stands for one path.
    assert asked == ["qwen", "model", "/srv/solo.gguf"]


def test_a_shown_name_reaches_the_upstream_through_passed_through_routes_too(
    upstream: tuple[str, Upstream],
) -> None:
    url, _ = upstream
    with run_proxy(url, upstream_kind="openai") as proxy:
        httpx.get(proxy + "/v1/models", timeout=10)
        body = {"input": "x", "model": "gemma-3-270m", "dimensions": 8}
        response = httpx.post(proxy + "/v1/embeddings", json=body, timeout=10)
        assert response.status_code == 201
        assert json.loads(response.json()["body"]) == {**body, "model": "/srv/models/gemma-3-270m.gguf"}
        unmapped = '{"input": "x",  "model": "other"}'  # a served name: the body goes byte for byte
        response = httpx.post(
            proxy + "/v1/embeddings",
            content=unmapped,
            headers={"content-type": "application/json"},
            timeout=10,
        )
        assert response.json()["body"] == unmapped


def _one_model_upstream(listed: list[str]) -> tuple[Starlette, list[tuple[str, str]]]:
    """An upstream that checks model names, as vLLM and Ollama do: 404 for a name it does not list.
    Records (path, model asked) of each request."""
    seen: list[tuple[str, str]] = []

    async def models(request: Request) -> Response:
        seen.append((request.url.path, ""))
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model"} for name in listed]})

    async def answer(request: Request) -> Response:
        model = (await request.json())["model"]
        seen.append((request.url.path, model))
        if model not in listed:
            error = {"message": f"The model `{model}` does not exist.", "type": "NotFoundError", "code": 404}
            return JSONResponse({"error": error}, 404)
        if request.url.path == "/v1/embeddings":
            return JSONResponse({"object": "list", "data": [], "model": model})
        chunks = [_chunk({"role": "assistant", "content": "Hi"}), _chunk({}, "stop")]
        events = b"".join(_event({**c, "model": model}) for c in chunks) + b"data: [DONE]\n\n"
        return Response(events, media_type="text/event-stream")

    routes = [
        Route("/v1/models", models),
        Route("/v1/chat/completions", answer, methods=["POST"]),
        Route("/v1/embeddings", answer, methods=["POST"]),
    ]
    return Starlette(routes=routes), seen


def test_the_alias_reaches_the_one_model_the_upstream_serves_without_a_listing_first() -> None:
    app, seen = _one_model_upstream(["meta-llama/Llama-3.1-8B-Instruct"])
    with run_asgi(app) as url, run_proxy(url, model_alias="gpt-4o", upstream_kind="openai") as proxy:
        body = {**CHAT, "model": "gpt-4o"}
        with httpx.Client(timeout=10) as client:
            responses = [client.post(proxy + "/v1/chat/completions", json=body) for _ in range(3)]
            embedding = client.post(proxy + "/v1/embeddings", json={"input": "x", "model": "gpt-4o"})
        for response in responses:
            assert response.status_code == 200
            assert judge(response, "/v1/chat/completions", body).errors == []
            assert {json.loads(e[6:])["model"] for e in response.text.split("\n\n")[:-2]} == {"gpt-4o"}
        assert embedding.status_code == 200
        assert embedding.json()["model"] == "gpt-4o"  # named back as asked, not as the upstream serves it
    served = "meta-llama/Llama-3.1-8B-Instruct"
    # The listing read once, by the first request, which waited for it; the rest knew the name.
    assert seen == [("/v1/models", "")] + [("/v1/chat/completions", served)] * 3 + [
        ("/v1/embeddings", served)
    ]


def test_concurrent_first_requests_for_the_alias_share_one_listing() -> None:
    app, seen = _one_model_upstream(["qwen3:8b"])

    async def ask(proxy: str) -> list[int]:
        async with httpx.AsyncClient(timeout=10) as client:
            body = {**CHAT, "model": "local"}
            tasks = [client.post(proxy + "/v1/chat/completions", json=body) for _ in range(8)]
            return [response.status_code for response in await asyncio.gather(*tasks)]

    with run_asgi(app) as url, run_proxy(url, model_alias="local", upstream_kind="openai") as proxy:
        assert asyncio.run(ask(proxy)) == [200] * 8
    assert seen.count(("/v1/models", "")) == 1
    assert sorted(seen)[:-1] == [("/v1/chat/completions", "qwen3:8b")] * 8


def test_one_model_is_retrieved_by_the_name_the_listing_shows(upstream: tuple[str, Upstream]) -> None:
    url, server = upstream
    with run_proxy(url, upstream_kind="openai") as proxy:
        entry = httpx.get(proxy + "/v1/models/gemma-3-270m", timeout=10)
        assert entry.status_code == 200
        assert entry.json()["id"] == "gemma-3-270m"
        jsonschema.validate({"object": "list", "data": [entry.json()]}, MODELS_SCHEMA)
        assert httpx.get(proxy + "/v1/models/other", timeout=10).json()["created"] == 7
        assert httpx.get(proxy + "/v1/models/other/", timeout=10).json()["id"] == "other"  # as listed
        missing = httpx.get(proxy + "/v1/models/srv/models/gemma-3-270m.gguf", timeout=10)
        assert _assert_openai_error(missing, 404)["code"] == "model_not_found"
    with run_proxy(url, model_alias="my-model", upstream_kind="openai") as proxy:
        server.requests.clear()
        assert httpx.get(proxy + "/v1/models/my-model", timeout=10).json()["id"] == "my-model"
        missing = httpx.get(proxy + "/v1/models/gemma-3-270m", timeout=10)
        assert _assert_openai_error(missing, 404)["code"] == "model_not_found"
        assert server.requests == []  # the alias is the listing: the upstream is not asked


def test_the_alias_of_an_upstream_with_two_models_is_sent_as_asked() -> None:
    app, seen = _one_model_upstream(["a", "b"])
    with run_asgi(app) as url, run_proxy(url, model_alias="gpt-4o", upstream_kind="openai") as proxy:
        response = httpx.post(proxy + "/v1/chat/completions", json={**CHAT, "model": "gpt-4o"}, timeout=10)
        assert response.status_code == 404  # the upstream's answer: the alias stands for no one model
        assert response.json()["error"]["message"] == "The model `gpt-4o` does not exist."
        other = httpx.post(proxy + "/v1/chat/completions", json={**CHAT, "model": "a"}, timeout=10)
        assert other.status_code == 200
    assert seen == [("/v1/models", ""), ("/v1/chat/completions", "gpt-4o"), ("/v1/chat/completions", "a")]


def test_other_v1_paths_pass_through_unchanged(upstream: tuple[str, Upstream]) -> None:
    url, server = upstream
    with run_proxy(url, upstream_kind="openai") as proxy:
        body = '{"input": ["a", "b"], "model": "m"}'
        response = httpx.post(
            proxy + "/v1/embeddings?x=1&y=two",
            content=body,
            headers={"content-type": "application/json", "x-custom": "yes"},
            timeout=10,
        )
        assert response.status_code == 201
        assert response.headers["x-upstream-header"] == "kept"
        assert response.json() == {"path": "/v1/embeddings", "query": "x=1&y=two", "body": body}
        assert server.requests[-1]["headers"]["x-custom"] == "yes"
        # One date and one server line (the proxy's), and its own request id: the upstream's is kept
        # under another name.
        assert len(response.headers.get_list("date")) == len(response.headers.get_list("server")) == 1
        assert response.headers["x-request-id"].startswith("req_")
        assert response.headers["request-id"] == response.headers["x-request-id"]  # (Anthropic's name)
        assert response.headers.get_list("x-upstream-request-id") == ["up-1"]  # (kept once)
        # Headers named by Connection are hop-by-hop, in both directions (RFC 9110 7.6.1).
        httpx.get(proxy + "/v1/files", headers={"connection": "x-hop", "x-hop": "1"}, timeout=10)
        assert "x-hop" not in server.requests[-1]["headers"]
        deleted = httpx.delete(proxy + "/v1/files/file-1", timeout=10)
        assert deleted.status_code == 201
        assert server.requests[-1]["method"] == "DELETE"
        assert server.requests[-1]["path"] == "/v1/files/file-1"


@pytest.mark.parametrize(
    "path",
    [
        "/v1/../props",
        "/v1/%2e%2e/props",
        "/v1/./models/../../health",
        "/v1/..\\props",  # a server that takes a backslash for a slash resolves these too
        "/v1/..%5cprops",
        "/v1/models%5C..%5C..%5Chealth",
    ],
)
def test_a_path_that_would_leave_v1_at_the_upstream_is_not_forwarded(
    upstream: tuple[str, Upstream], path: str
) -> None:
    url, server = upstream
    with run_proxy(url, upstream_kind="openai") as proxy:
        # Raw, as written: an HTTP client would resolve the dot segments before sending.
        host, port = proxy.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 404"), head
        assert json.loads(body)["error"]["code"] == "unknown_url"
        assert server.requests == []


def test_metrics_count_requests_latency_and_repairs_by_rule(upstream: tuple[str, Upstream]) -> None:
    url, _ = upstream
    with run_proxy(url, upstream_kind="openai") as proxy:
        for _ in range(2):
            response = httpx.post(proxy + "/v1/chat/completions", json=CHAT, timeout=10)
            assert '"finish_reason":"stop"' in response.text
        httpx.post(proxy + "/v1/chat/completions", json=[1], timeout=10)  # a 400
        text = httpx.get(proxy + "/metrics", timeout=10).text
    assert metric(text, "conformant_requests_total", endpoint="chat", status="200") == 2
    assert metric(text, "conformant_requests_total", endpoint="chat", status="400") == 1
    assert metric(text, "conformant_request_seconds_count", endpoint="chat") == 3
    assert metric(text, "conformant_time_to_first_token_seconds_count", endpoint="chat") == 2
    assert metric(text, "conformant_repairs_total", rule="Q18") == 2  # finish_reason "eos"
    assert metric(text, "conformant_repairs_total", rule="Q26") == 2  # usage nobody asked for
    assert metric(text, "conformant_in_flight_requests") == 1  # the /metrics request itself


def test_access_log_line_has_status_upstream_status_ttft_tokens_and_repairs(
    upstream: tuple[str, Upstream], caplog: pytest.LogCaptureFixture
) -> None:
    url, _ = upstream
    caplog.set_level(logging.INFO, logger="conformant.access")
    with run_proxy(url, upstream_kind="openai") as proxy:
        body = {**CHAT, "stream_options": {"include_usage": True}}
        response = httpx.post(
            proxy + "/v1/chat/completions", json=body, headers={"x-request-id": "req-abc"}, timeout=10
        )
        assert response.headers["x-request-id"] == "req-abc"
        generated = httpx.post(proxy + "/v1/chat/completions", json=CHAT, timeout=10)
        assert generated.headers["x-request-id"].startswith("req_")
        assert len(generated.headers["x-request-id"]) > 12
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "conformant.access"]
    line = next(entry for entry in lines if entry["request_id"] == "req-abc")
    assert line["method"] == "POST"
    assert line["path"] == "/v1/chat/completions"
    assert line["status"] == 200
    assert line["upstream_status"] == 200
    assert isinstance(line["ttft_ms"], float)
    assert 0 < line["ttft_ms"] <= line["duration_ms"]
    assert (line["prompt_tokens"], line["completion_tokens"]) == (3, 1)
    assert "Q18" in line["repairs"].split(",")
    assert line["client_disconnected"] is False
    assert line["error"] is None
    assert any(entry["request_id"] == generated.headers["x-request-id"] for entry in lines)


def test_cors_preflight_and_response_headers(upstream: tuple[str, Upstream]) -> None:
    url, server = upstream
    origin = "https://app.example"
    with run_proxy(url, cors_origins=(origin,), api_key=CLIENT_KEY, upstream_kind="openai") as proxy:
        preflight = httpx.options(
            proxy + "/v1/chat/completions",
            headers={
                "origin": origin,
                "access-control-request-method": "POST",
                "access-control-request-headers": "authorization, content-type",
            },
            timeout=10,
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == origin
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
        response = httpx.post(
            proxy + "/v1/chat/completions", json=CHAT, headers={**_auth(), "origin": origin}, timeout=10
        )
        assert response.headers["access-control-allow-origin"] == origin
        assert "x-request-id" in response.headers["access-control-expose-headers"]  # readable by the page
        other = httpx.options(
            proxy + "/v1/chat/completions",
            headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
            timeout=10,
        )
        assert _assert_openai_error(other, 400)["code"] == "cors_refused"
        assert "access-control-allow-origin" not in other.headers
        # A passed-through answer follows the proxy's policy, not the upstream's (which allows any
        # origin), and the upstream never sees the origin.
        for asking, allowed in ((origin, origin), ("https://evil.example", None)):
            passed = httpx.get(proxy + "/v1/files", headers={**_auth(), "origin": asking}, timeout=10)
            assert passed.status_code == 201
            assert passed.headers.get_list("access-control-allow-origin") == ([allowed] if allowed else [])
            assert "origin" not in server.requests[-1]["headers"]


def test_a_page_of_another_origin_cannot_make_the_proxy_act(upstream: tuple[str, Upstream]) -> None:
    """A browser sends a "simple" POST (``content-type: text/plain``) from any page without a preflight,
    and the proxy read its body as JSON all the same: any site a user had open could make a keyless
    local server generate, store Responses or post through to the upstream (issue 38's review). A
    request whose ``Origin`` ``--cors-origin`` does not name is a 403 in its protocol's words before it
    is read, and the upstream never sees it; clients that are no browser send no ``Origin``."""
    url, server = upstream
    page = {"origin": "https://evil.example", "content-type": "text/plain"}
    messages = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    asked = [
        ("/v1/chat/completions", CHAT),
        ("/v1/completions", {"model": "m", "prompt": "hi"}),
        ("/v1/responses", {"model": "m", "input": "hi", "store": True}),
        ("/v1/messages", messages),
        ("/v1/messages/count_tokens", messages),
        ("/v1/files", {"purpose": "x"}),  # (passed through)
    ]
    with run_proxy(url, upstream_kind="openai") as proxy:  # no key: a local server as README starts it
        for path, body in asked:
            refused = httpx.post(proxy + path, content=json.dumps(body), headers=page, timeout=10)
            assert refused.status_code == 403, (path, refused.text)
            if path.startswith("/v1/messages"):  # (Anthropic's error shape)
                assert refused.json()["error"]["type"] == "permission_error", refused.text
            else:
                assert _assert_openai_error(refused, 403)["code"] == "origin_not_allowed"
        deleted = httpx.delete(proxy + "/v1/responses/resp_1", headers=page, timeout=10)
        assert _assert_openai_error(deleted, 403)["code"] == "origin_not_allowed"
        assert server.requests == []
        # Without an Origin, the same body is served; a page's GET does nothing, and reads nothing
        # without CORS.
        plain = httpx.post(
            proxy + "/v1/chat/completions", content=json.dumps(CHAT), headers={"content-type": "text/plain"}
        )
        assert plain.status_code == 200, plain.text
        assert httpx.get(proxy + "/v1/models", headers=page, timeout=10).status_code == 200
    with run_proxy(url, cors_origins=("https://app.example",), upstream_kind="openai") as proxy:
        allowed = {**page, "origin": "https://app.example"}
        served = httpx.post(proxy + "/v1/chat/completions", content=json.dumps(CHAT), headers=allowed)
        assert served.status_code == 200, served.text
        assert served.headers["access-control-allow-origin"] == "https://app.example"
        other = httpx.post(proxy + "/v1/chat/completions", content=json.dumps(CHAT), headers=page)
        assert _assert_openai_error(other, 403)["code"] == "origin_not_allowed"
    with run_proxy(url, cors_origins=("*",), upstream_kind="openai") as proxy:
        anyone = httpx.post(proxy + "/v1/chat/completions", content=json.dumps(CHAT), headers=page)
        assert anyone.status_code == 200, anyone.text


def test_a_proxy_bug_is_an_openai_500_without_the_traceback(
    upstream: tuple[str, Upstream], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No real upstream can make the proxy itself fail; a patched-in exception stands for a bug."""

    def broken(*_: object) -> None:
        raise RuntimeError("bug seen at /srv/conformant/secret.py")

    url, _ = upstream
    monkeypatch.setattr("proxy.generation.RequestInfo.from_body", broken)  # the generating routes
    monkeypatch.setattr("proxy.listing.clean_model_name", broken)  # /v1/models, through Starlette's router
    with run_proxy(url, upstream_kind="openai") as proxy:
        completion = httpx.post(proxy + "/v1/chat/completions", json=CHAT, timeout=10)
        models = httpx.get(proxy + "/v1/models", timeout=10)
        text = httpx.get(proxy + "/metrics", timeout=10).text
    for response in (completion, models):
        error = _assert_openai_error(response, 500)
        assert error["type"] == "server_error"
        assert "secret" not in response.text
        assert "Traceback" not in response.text
        assert response.headers["x-request-id"].startswith("req_")
    assert metric(text, "conformant_requests_total", endpoint="chat", status="500") == 1


def test_the_proxys_own_paths_are_served_with_a_trailing_slash(upstream: tuple[str, Upstream]) -> None:
    url, _ = upstream
    with run_proxy(url, upstream_kind="openai") as proxy:
        body = {**CHAT, "stream": True}
        response = httpx.post(proxy + "/v1/chat/completions/", json=body, timeout=10)
        assert judge(response, "/v1/chat/completions", body).errors == []  # repaired, not relayed
        listing = httpx.get(proxy + "/v1/models/", timeout=10).json()
        assert [m["id"] for m in listing["data"]] == ["gemma-3-270m", "other"]


def test_a_client_that_leaves_while_sending_its_body_is_a_499_not_a_500(
    upstream: tuple[str, Upstream], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="conformant.access")
    url, server = upstream
    with run_proxy(url, upstream_kind="openai") as proxy:
        logging.getLogger("uvicorn.error").addHandler(caplog.handler)  # uvicorn reset its handlers
        try:
            host, port = proxy.removeprefix("http://").split(":")
            for sent, path in enumerate(("/v1/chat/completions", "/v1/embeddings"), start=1):
                with socket.create_connection((host, int(port)), timeout=10) as sock:
                    head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n"
                    sock.sendall(head.encode() + b'{"model":')
                wait_for(lambda sent=sent: len(_access_lines(caplog)) == sent)
            text = httpx.get(proxy + "/metrics", timeout=10).text
        finally:
            logging.getLogger("uvicorn.error").removeHandler(caplog.handler)
    lines = [line for line in _access_lines(caplog) if line["method"] == "POST"]
    assert [(line["status"], line["client_disconnected"]) for line in lines] == [(499, True)] * 2
    assert metric(text, "conformant_client_disconnects_total") == 2
    assert metric(text, "conformant_requests_total", endpoint="chat", status="499") == 1
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert server.requests == []


def _access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "conformant.access"]


def test_unknown_paths_and_methods_are_openai_errors(upstream: tuple[str, Upstream]) -> None:
    url, server = upstream
    with run_proxy(url, upstream_kind="openai") as proxy:
        for path in ("/foo", "/v2/chat/completions", "/"):
            error = _assert_openai_error(httpx.post(proxy + path, json=CHAT, timeout=10), 404)
            assert error["code"] == "unknown_url"
            assert path in error["message"]
        # A control character in the path is named by its code, not echoed.
        error = _assert_openai_error(httpx.post(proxy + "/x%00y/z", json=CHAT, timeout=10), 404)
        assert error["message"] == "unknown request URL: POST /x\\x00y/z"
        for method, path, allowed in (
            ("POST", "/health", "GET"),
            ("POST", "/metrics", "GET"),
            ("TRACE", "/v1/models", "GET"),
            ("TRACE", "/v1/embeddings", "POST"),
            # The proxy's own paths, which the pass-through would otherwise take to the upstream raw.
            ("GET", "/v1/chat/completions", "POST"),
            ("PUT", "/v1/completions/", "POST"),
            ("POST", "/v1/models", "GET"),
            ("DELETE", "/v1/models/other", "GET"),
        ):
            response = httpx.request(method, proxy + path, timeout=10)
            error = _assert_openai_error(response, 405)
            assert error["type"] == "invalid_request_error"
            assert f"{method} {path}" in error["message"]
            assert allowed in response.headers["allow"].split(", ")
            assert response.headers["x-request-id"].startswith("req_")  # logged and counted like the rest
    assert server.requests == []
