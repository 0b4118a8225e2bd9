"""``POST /v1/responses`` through the chat route's pipeline, against raw upstreams: the event sequence,
the Response object, refusals, and an upstream fault mid-stream as ``response.failed``.

Events and bodies are checked with openai-python's own pydantic types (``ResponseStreamEvent``,
``Response``) and the stream rules of the Responses API (``check_events``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.responses_checks import check_events, check_response, judged, sse_events

from .conftest import run_proxy
from .rawserver import answering, chunk, json_answer, raw_server, streaming

REQUEST = {"model": "m", "input": "Say hello", "stream": True}


def _usage_chunk(prompt: int = 3, completion: int = 2) -> bytes:
    payload = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


@pytest.fixture
def hello() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    handler = streaming(chunk("Hel"), chunk("lo", "stop"), _usage_chunk(), seen=seen)
    with raw_server(handler) as (upstream, _), run_proxy(upstream) as url:
        yield url, seen


def test_a_streamed_answer_is_the_full_event_sequence(hello: tuple[str, list[dict[str, Any]]]) -> None:
    url, seen = hello
    response = httpx.post(url + "/v1/responses", json=REQUEST, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    judged(response.content, REQUEST, response.status_code, response.headers)
    events = sse_events(response.content)
    check_events(events)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = events[-1]["response"]
    assert final["output"][0]["content"][0]["text"] == "Hello"
    assert final["usage"]["input_tokens"] == 3
    assert final["usage"]["output_tokens"] == 2
    # What the upstream was asked: the chat translation.
    assert seen[0]["messages"] == [{"role": "user", "content": "Say hello"}]
    assert seen[0]["stream"] is True


def test_a_whole_answer_is_a_response_object(hello: tuple[str, list[dict[str, Any]]]) -> None:
    url, _ = hello
    response = httpx.post(
        url + "/v1/responses", json={**REQUEST, "stream": False, "metadata": {"k": "v"}}, timeout=10
    )
    assert response.status_code == 200, response.text
    judged(response.content, {**REQUEST, "stream": False}, response.status_code, response.headers)
    body = response.json()
    check_response(body)
    assert body["status"] == "completed"
    assert body["id"].startswith("resp_")
    assert body["metadata"] == {"k": "v"}
    assert body["output"][0]["content"][0]["text"] == "Hello"


def test_an_answer_cut_by_max_output_tokens_is_incomplete() -> None:
    handler = streaming(chunk("Hel"), chunk("lo", "length"), _usage_chunk())
    with raw_server(handler) as (upstream, _), run_proxy(upstream) as url:
        request = {**REQUEST, "max_output_tokens": 16}
        response = httpx.post(url + "/v1/responses", json=request, timeout=10)
        judged(response.content, request, response.status_code, response.headers)
        events = sse_events(response.content)
        check_events(events)
        assert events[-1]["type"] == "response.incomplete"
        assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
        body = httpx.post(url + "/v1/responses", json={**REQUEST, "stream": False}, timeout=10).json()
        check_response(body)
        assert body["status"] == "incomplete"
        assert body["incomplete_details"] == {"reason": "max_output_tokens"}


def test_an_upstream_cut_mid_stream_ends_with_response_failed() -> None:
    handler = streaming(chunk("Hel"), end=False)
    with raw_server(handler) as (upstream, _), run_proxy(upstream) as url:
        response = httpx.post(url + "/v1/responses", json=REQUEST, timeout=10)
        assert response.status_code == 200
        judged(response.content, REQUEST, response.status_code, response.headers)
        events = sse_events(response.content)
        check_events(events)
        assert events[-1]["type"] == "response.failed"
        failed = events[-1]["response"]
        assert failed["status"] == "failed"
        assert failed["error"]["code"] == "server_error"
        assert failed["error"]["message"].startswith("the upstream connection failed")
        assert failed["output"][0]["content"][0]["text"] == "Hel"  # what came before the fault


def test_non_json_mid_stream_ends_with_response_failed() -> None:
    handler = streaming(chunk("Hel"), b"data: {not json\n\n")
    with raw_server(handler) as (upstream, _), run_proxy(upstream) as url:
        events = sse_events(httpx.post(url + "/v1/responses", json=REQUEST, timeout=10).content)
        check_events(events)
        assert events[-1]["type"] == "response.failed"
        assert "not valid JSON" in events[-1]["response"]["error"]["message"]


def test_an_error_inside_the_stream_ends_with_response_failed() -> None:
    """An upstream that reports an error inside its 200 stream after some text (llama.cpp #14566, N2)."""
    error = b'data: {"error": {"message": "the KV cache is full", "type": "server_error", "code": 500}}\n\n'
    handler = streaming(chunk("Hel"), error)
    with raw_server(handler) as (upstream, _), run_proxy(upstream) as url:
        response = httpx.post(url + "/v1/responses", json=REQUEST, timeout=10)
        judged(response.content, REQUEST, response.status_code, response.headers)
        events = sse_events(response.content)
        check_events(events)
        assert events[-1]["type"] == "response.failed"
        assert "KV cache" in events[-1]["response"]["error"]["message"]


def test_an_error_before_the_first_event_is_an_http_error() -> None:
    loading = {"error": {"message": "the model is loading", "type": "server_error", "code": 503}}
    handler = answering(json_answer(loading, "503 Service Unavailable"))
    with raw_server(handler) as (upstream, _), run_proxy(upstream) as url:
        response = httpx.post(url + "/v1/responses", json=REQUEST, timeout=10)
        assert response.status_code == 503
        judged(response.content, REQUEST, response.status_code, response.headers)
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "input": "x", "tools": [{"type": "file_search"}]}, "tools[0].type"),
        ({"model": "m", "input": "x", "tools": [{"type": "local_shell"}]}, "tools[0].type"),
        ({"model": "m", "input": [{"type": "image_generation_call", "id": "x"}]}, "input[0].type"),
        ({"model": "m", "input": 5}, "input"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": "x", "temperature": 9}, "temperature"),
        ({"model": "m", "input": "x", "max_output_tokens": 4}, "max_output_tokens"),
        ({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"model": "m", "input": "x", "background": True}, "background"),
        ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
    ],
)
def test_a_request_the_translation_refuses_is_a_400_naming_the_parameter(
    hello: tuple[str, list[dict[str, Any]]], body: dict[str, Any], param: str
) -> None:
    url, seen = hello
    response = httpx.post(url + "/v1/responses", json=body, timeout=10)
    assert response.status_code == 400, response.text
    judged(response.content, body, response.status_code, response.headers)
    error = response.json()["error"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert seen == []  # refused before the upstream


def test_not_json_is_a_400(hello: tuple[str, list[dict[str, Any]]]) -> None:
    url, _ = hello
    response = httpx.post(url + "/v1/responses", content=b"{nope", timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"
