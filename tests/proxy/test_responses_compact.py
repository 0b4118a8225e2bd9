"""``POST /v1/responses/compact`` on the proxy (Open Responses 2026-04-24, issue 38), in front of a
scripted chat upstream: the model's summary as the spec's ``CompactResource`` (the user messages kept,
then one ``compaction`` item), ``model`` required, and the compaction item sent back as input to
``/v1/responses``, over HTTP and over a WebSocket, as the summary it holds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from conformance.protocols.responses.compact import SUMMARY_REQUEST
from tests.support.responses_checks import check_events

from .conftest import run_proxy
from .rawserver import Record, chunk, http_chunk, json_answer, raw_server, read_request, sse_head
from .test_responses_websocket import socket_url, turn

SUMMARY = "The user asked for a code word to remember: slate."
CONVERSATION: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Remember: slate."}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "OK."}]},
    {"type": "function_call", "call_id": "call_1", "name": "note", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "noted"},
    {"type": "message", "role": "user", "content": "Compress this conversation."},
]


def answering_all(text: str, seen: list[dict[str, Any]]) -> Any:
    """An upstream that answers every chat request with ``text``: whole, or streamed where asked."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        raw = await read_request(reader)
        assert raw is not None
        if not raw.startswith(b"POST /v1/chat/completions"):  # the proxy's probes of its upstream
            writer.write(json_answer({"error": {"message": "no such route"}}, "404 Not Found"))
            return
        body = json.loads(raw.split(b"\r\n\r\n", 1)[1])
        seen.append(body)
        if body.get("stream"):
            writer.write(sse_head() + http_chunk(chunk(text, "stop")) + http_chunk(b"data: [DONE]\n\n"))
            writer.write(b"0\r\n\r\n")
        else:
            message = {"role": "assistant", "content": text}
            usage = {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}
            answer = {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": usage,
            }
            writer.write(json_answer(answer))
        await writer.drain()

    return handler


@pytest.fixture
def proxy() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    with raw_server(answering_all(SUMMARY, seen)) as (upstream, _), run_proxy(upstream) as url:
        yield url, seen


def compact(url: str, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    response = httpx.post(url + "/v1/responses/compact", json=body, timeout=10)
    assert response.status_code == status, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_a_conversation_is_compacted_to_its_user_messages_and_a_summary(
    proxy: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = proxy
    body = compact(url, {"model": "m", "input": CONVERSATION, "prompt_cache_key": "k1"})
    assert body["object"] == "response.compaction"
    assert body["id"].startswith("resp_")
    assert isinstance(body["created_at"], int)
    *kept, item = body["output"]
    assert [part["text"] for message in kept for part in message["content"]] == [
        "Remember: slate.",
        "Compress this conversation.",
    ]
    for message in kept:
        assert message["type"] == "message"
        assert message["role"] == "user"
        assert message["status"] == "completed"
        assert message["id"].startswith("msg_")
    assert item["type"] == "compaction"
    assert item["id"].startswith("cmp_")
    assert isinstance(item["encrypted_content"], str)
    assert SUMMARY not in item["encrypted_content"]  # opaque to the client, as the spec has it
    assert body["usage"]["input_tokens"] == 40
    assert body["usage"]["output_tokens"] == 12
    assert body["usage"]["total_tokens"] == 52
    # What the model was asked: the conversation, then the request for a summary; no tools, whole.
    (asked,) = seen
    assert asked["stream"] is False
    assert "tools" not in asked
    last = {"role": "user", "content": f"Compress this conversation.\n\n{SUMMARY_REQUEST}"}
    assert asked["messages"][-1] == last
    assert asked["messages"][1]["tool_calls"][0]["id"] == "call_1"


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"input": "hi"}, "model", "missing_required_parameter"),
        ({"model": None, "input": "hi"}, "model", "missing_required_parameter"),
        ({"model": "", "input": "hi"}, "model", "missing_required_parameter"),
        ({"model": "m", "input": "hi", "stream": True}, "stream", "unsupported_value"),
        ({"model": "m", "input": "hi", "background": True}, "background", "unsupported_value"),
        ({"model": 7, "input": "hi"}, "model", "invalid_type"),
        ({"model": "m"}, "input", "missing_required_parameter"),
        ({"model": "m", "input": {"role": "user"}}, "input", "invalid_type"),
        ({"model": "m", "input": "hi", "prompt_cache_key": "k" * 65}, "prompt_cache_key", "invalid_value"),
        ({"model": "m", "input": [{"type": "message", "role": "nobody", "content": "hi"}]}, None, None),
        ({"model": "m", "input": "hi", "previous_response_id": "resp_nowhere"}, "previous_response_id", None),
    ],
)
def test_a_bad_compaction_request_is_a_400_naming_its_parameter(
    proxy: tuple[str, list[dict[str, Any]]], body: dict[str, Any], param: str | None, code: str | None
) -> None:
    url, seen = proxy
    error = compact(url, body, 400)["error"]
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param
    else:
        assert error["param"].startswith("input[0]")
    if code is not None:
        assert error["code"] == code
    assert seen == []  # no upstream was asked


def test_the_compaction_item_comes_back_as_input(proxy: tuple[str, list[dict[str, Any]]]) -> None:
    url, seen = proxy
    window = compact(url, {"model": "m", "input": CONVERSATION})["output"]
    request = {"model": "m", "input": [*window, {"type": "message", "role": "user", "content": "The word?"}]}
    response = httpx.post(url + "/v1/responses", json=request, timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "completed"
    # One user turn: the kept messages, the summary introduced as such, the new message.
    (message,) = seen[-1]["messages"]
    assert message["role"] == "user"
    texts = message["content"].split("\n\n")
    assert texts[:2] == ["Remember: slate.", "Compress this conversation."]
    assert SUMMARY in texts
    assert texts[-1] == "The word?"
    # And as the base of a new chain on a WebSocket (the spec's compact-then-new-chain).
    with connect(socket_url(url)) as ws:
        events = turn(ws, store=False, input=request["input"])
    check_events(events)
    assert events[-1]["type"] == "response.completed"
    assert seen[-1]["messages"] == seen[-2]["messages"]


def test_a_compaction_continues_a_stored_response_and_is_compacted_again(
    proxy: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = proxy
    first = httpx.post(url + "/v1/responses", json={"model": "m", "input": "Remember: slate."}, timeout=10)
    window = compact(url, {"model": "m", "previous_response_id": first.json()["id"], "input": "Compress."})
    assert [m["content"][0]["text"] for m in window["output"][:-1]] == ["Remember: slate.", "Compress."]
    assert [m["content"] for m in seen[-1]["messages"]][:2] == ["Remember: slate.", SUMMARY]
    # A window compacted again: the earlier summary is the model's to summarize, not kept as it was.
    again = compact(url, {"model": "m", "input": [*window["output"], {"role": "user", "content": "More."}]})
    assert [item["type"] for item in again["output"]] == ["message", "message", "message", "compaction"]


@pytest.mark.parametrize(
    "content",
    ["gAAAAABpM0Yj-opaque=", "conformant.compaction.v1:!!!***"],  # another's; this one's prefix, not base64
)
def test_a_compaction_item_of_another_provider_is_refused(
    proxy: tuple[str, list[dict[str, Any]]], content: str
) -> None:
    url, seen = proxy
    foreign = {"type": "compaction", "id": "cmp_1", "encrypted_content": content}
    request = {"model": "m", "input": [{"role": "user", "content": "hi"}, foreign]}
    response = httpx.post(url + "/v1/responses", json=request, timeout=10)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "input[1].encrypted_content"
    assert error["code"] == "invalid_encrypted_content"
    assert seen == []
