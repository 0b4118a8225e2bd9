"""``truncation: "auto"`` through the proxy: an upstream that refuses a conversation past its context
(in llama-server's words) gets it again without its oldest exchanges, and the client its Response; with
``disabled`` (the default) the client gets the overflow, as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.servers import run_asgi

from .conftest import run_proxy

CONTEXT_CHARS = 4000
"""What the upstream holds: a request whose messages are longer is refused, as 1 token per 4 characters."""


def _refused(chars: int) -> Response:
    message = (
        f"request ({chars // 4} tokens) exceeds the available context size ({CONTEXT_CHARS // 4} tokens), "
        "try increasing it"
    )
    error = {"code": 400, "message": message, "type": "exceed_context_size_error"}
    return JSONResponse({"error": error}, status_code=400)


def _answer(body: dict[str, Any]) -> Response:
    text = f"{len(body['messages'])} messages"
    if body.get("stream"):
        chunks = [
            {
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}
                ]
            },
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}},
        ]
        common = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        data = "".join(f"data: {json.dumps({**common, **c})}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return Response(data, media_type="text/event-stream")
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    usage = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    completion = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m"}
    return JSONResponse({**completion, "choices": [choice], "usage": usage})


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, list[list[dict[str, Any]]]]]:
    seen: list[list[dict[str, Any]]] = []

    async def chat(request: Request) -> Response:
        body = await request.json()
        seen.append(body["messages"])
        chars = len(json.dumps(body["messages"]))
        return _refused(chars) if chars > CONTEXT_CHARS else _answer(body)

    with run_asgi(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])) as url:
        yield url, seen


@pytest.fixture(scope="module")
def proxy(upstream: tuple[str, list[Any]]) -> Iterator[str]:
    with run_proxy(upstream[0], upstream_kind="openai") as url:
        yield url


def _conversation(exchanges: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for n in range(exchanges):
        items.append({"role": "user", "content": f"question {n} " + "q" * 300})
        items.append({"role": "assistant", "content": f"answer {n} " + "a" * 300})
    return [*items, {"role": "user", "content": "And now?"}]


@pytest.mark.parametrize("stream", [False, True])
def test_the_oldest_exchanges_go_and_the_response_is_served(
    proxy: str, upstream: tuple[str, list[list[dict[str, Any]]]], stream: bool
) -> None:
    seen = upstream[1]
    seen.clear()
    client = openai.OpenAI(base_url=proxy + "/v1", api_key="x", max_retries=0)
    asked = {"model": "m", "instructions": "Be brief.", "input": _conversation(12), "truncation": "auto"}
    if stream:
        events = list(client.responses.create(**asked, stream=True))
        response = events[-1].response
    else:
        response = client.responses.create(**asked)
    assert response.status == "completed"
    assert response.truncation == "auto"
    assert 2 <= len(seen) <= 4  # the whole conversation refused, then shorter ones
    sent = seen[-1]
    assert len(json.dumps(sent)) <= CONTEXT_CHARS
    assert response.output_text == f"{len(sent)} messages"
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert sent[1]["role"] == "user"  # (whole exchanges went: the roles still alternate)
    assert sent[-1] == {"role": "user", "content": "And now?"}
    assert [m["content"] for m in sent[1:-1]] == [m["content"] for m in seen[0][-len(sent) + 1 : -1]]


def test_without_auto_the_overflow_is_the_answer(proxy: str, upstream: tuple[str, list[Any]]) -> None:
    seen = upstream[1]
    seen.clear()
    for truncation in ({}, {"truncation": "disabled"}):
        asked = {"model": "m", "input": _conversation(12), **truncation}
        response = httpx.post(proxy + "/v1/responses", json=asked, timeout=30)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "context_length_exceeded"
    assert len(seen) == 2  # asked once each


def test_with_nothing_that_may_go_the_overflow_is_the_answer(
    proxy: str, upstream: tuple[str, list[Any]]
) -> None:
    seen = upstream[1]
    seen.clear()
    asked = {"model": "m", "input": "x" * (2 * CONTEXT_CHARS), "truncation": "auto"}
    response = httpx.post(proxy + "/v1/responses", json=asked, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert len(seen) == 1
