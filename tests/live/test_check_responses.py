"""``conformant check``'s Responses probes against real servers: the proxy's ``/v1/responses`` in front of a
chat-completions upstream gives no error (issue 21, acceptance 4), and a server without that route is
``unsupported``, not a failure.

The first test needs no model: its upstream is a scripted chat server that answers as OpenAI's chat API
does (the text, a forced tool call, JSON for a ``json_schema`` format, ``finish_reason: "length"`` at the
token limit, the text's logprobs when asked), so the proxy's translation is what is judged. The others run
llama-cpp-python's server (``backend``)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from conformance.cli import main
from conformance.live.probes import PROBES
from tests.proxy.conftest import run_proxy
from tests.support.servers import free_port, run_asgi, run_process

RESPONSES_PROBES = [p.name for p in PROBES if p.name.startswith("responses")]


def _answer(body: dict[str, Any]) -> tuple[dict[str, Any], str, int]:
    """The message a chat model gives ``body``, its finish_reason and its completion tokens."""
    limit = body.get("max_completion_tokens") or body.get("max_tokens") or 64
    fmt = body.get("response_format") or {}
    if body.get("tools") and body.get("tool_choice") not in (None, "auto", "none"):
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls", 9
    if fmt.get("type") == "json_schema":
        return {"role": "assistant", "content": '{"answer": "red"}'}, "stop", 6
    text = "7, 8, 9, 10, 11, 12, 13, 14, 15, 16"
    if "Continue" in json.dumps(body.get("messages")):
        return {"role": "assistant", "content": text}, "length", int(limit)
    return {"role": "assistant", "content": "Hello!"}, "stop", 3


def _logprobs(body: dict[str, Any], text: Any) -> dict[str, Any] | None:
    """Chat logprobs of ``text`` (one entry a piece), with ``top_logprobs`` alternatives, when asked."""
    if not body.get("logprobs") or not isinstance(text, str) or not text:
        return None
    top = [{"token": "x", "logprob": -3.0, "bytes": [120]}] * int(body.get("top_logprobs") or 0)
    entry = {"token": text, "logprob": -0.5, "bytes": list(text.encode()), "top_logprobs": top}
    return {"content": [entry], "refusal": None}


def _chunk(
    delta: dict[str, Any], finish: str | None = None, logprobs: dict[str, Any] | None = None, **extra: Any
) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    payload = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", **extra}
    payload["choices"] = [choice] if delta or finish else []
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


async def _chat(request: Request) -> Response:
    body = await request.json()
    message, finish, tokens = _answer(body)
    usage = {"prompt_tokens": 20, "completion_tokens": tokens, "total_tokens": 20 + tokens}
    if not body.get("stream"):
        logprobs = _logprobs(body, message.get("content"))
        choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}
        return JSONResponse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": "m",
                "choices": [choice],
                "usage": usage,
            }
        )

    async def events() -> AsyncIterator[bytes]:
        yield _chunk({"role": "assistant", "content": ""})
        if message.get("tool_calls"):
            call = message["tool_calls"][0]
            head = {**call, "index": 0, "function": {"name": call["function"]["name"], "arguments": ""}}
            yield _chunk({"tool_calls": [head]})
            for piece in ('{"city": ', '"Paris"}'):
                yield _chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        else:
            for word in str(message["content"]).split(" "):
                piece = word + " " if word != message["content"].split(" ")[-1] else word
                yield _chunk({"content": piece}, logprobs=_logprobs(body, piece))
        yield _chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            yield _chunk({}, usage=usage)
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def _models(_: Request) -> Response:
    return JSONResponse(
        {"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "x"}]}
    )


def _errors(url: str, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "report.json"
    only = [arg for name in RESPONSES_PROBES for arg in ("--only", name)]
    status = main(
        ["check", url, "--format", "json", "-o", str(report), "--record", str(tmp_path / "rec"), *only]
    )
    return status, json.loads(report.read_text())


def _outcomes(report: dict[str, Any]) -> dict[str, list[str]]:
    return {r["source"]: [f"{e['rule']}: {e['message']}" for e in r["errors"]] for r in report["results"]}


@pytest.fixture(scope="module")
def chat_upstream() -> Iterator[str]:
    app = Starlette(
        routes=[Route("/v1/chat/completions", _chat, methods=["POST"]), Route("/v1/models", _models)]
    )
    with run_asgi(app) as url:
        yield url


def test_proxy_responses_probes_have_no_errors(chat_upstream: str, tmp_path: Path) -> None:
    with run_proxy(chat_upstream) as proxy:
        status, report = _errors(proxy, tmp_path)
    assert _outcomes(report) == {name: [] for name in RESPONSES_PROBES}
    assert status == 0
    # Every probe was answered by the route, none declined as unsupported; validate of the recording agrees.
    assert not any(w["rule"] == "feature-unsupported" for r in report["results"] for w in r["warnings"])
    assert main(["validate", str(tmp_path / "rec")]) == 0


@pytest.mark.backend
def test_llama_cpp_python_has_no_responses_route(llama_cpp_python_url: str, tmp_path: Path) -> None:
    status, report = _errors(llama_cpp_python_url, tmp_path)
    assert status == 0
    assert {r["source"]: [w["rule"] for w in r["warnings"]] for r in report["results"]} == {
        name: ["feature-unsupported"] for name in RESPONSES_PROBES
    }


@pytest.fixture(scope="module")
def proxy_before_llama_cpp_python(llama_cpp_python_url: str) -> Iterator[str]:
    port = free_port()
    args = ["python", "-m", "conformance", "serve", "--upstream", llama_cpp_python_url]
    args += ["--host", "127.0.0.1", "--port", str(port)]
    with run_process(args, health_path="/health", port=port, timeout=120) as (url, _):
        yield url


@pytest.mark.backend
def test_proxy_before_llama_cpp_python_responses_probes_have_no_errors(
    proxy_before_llama_cpp_python: str, tmp_path: Path
) -> None:
    status, report = _errors(proxy_before_llama_cpp_python, tmp_path)
    assert _outcomes(report) == {name: [] for name in RESPONSES_PROBES}
    assert status == 0


@pytest.mark.backend
def test_bundled_backend_responses_probes_have_no_errors(backend_url: str, tmp_path: Path) -> None:
    status, report = _errors(backend_url, tmp_path)
    assert _outcomes(report) == {name: [] for name in RESPONSES_PROBES}
    assert status == 0
    # Its own /v1/responses answered every probe; it declines only the image and the file, with a 400
    # (its model reads text only).
    declined = {
        r["source"] for r in report["results"] for w in r["warnings"] if w["rule"] == "feature-unsupported"
    }
    assert declined == {"responses-image-input", "responses-file-input"}
