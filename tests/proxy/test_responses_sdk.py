"""openai-python's Responses client through the proxy (``client.responses.create`` streamed and not, the
``client.responses.stream`` helper, a function-tool round trip) against a raw chat upstream that calls
a tool when given tools and answers the tool's output otherwise."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.responses_checks import check_events, check_response

from .conftest import run_proxy
from .rawserver import Record, http_chunk, raw_server, read_request, sse_head

TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": False,
}


def _event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    payload = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "/models/gemma.gguf",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _answer(request: dict[str, Any]) -> list[bytes]:
    last = request["messages"][-1]
    if last["role"] == "tool":
        return [
            _event({"role": "assistant", "content": "It is "}),
            _event({"content": last["content"]}, "stop"),
        ]
    if request.get("tools"):
        first = {
            "index": 0,
            "id": "call_abc",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        }
        return [
            _event({"role": "assistant", "tool_calls": [first]}),
            _event({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
            _event({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}, "tool_calls"),
        ]
    return [_event({"role": "assistant", "content": "Hello"}), _event({"content": " there"}, "stop")]


async def _handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    while (raw := await read_request(reader)) is not None:
        head, body = raw.split(b"\r\n\r\n", 1)
        if not head.startswith(b"POST"):
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            continue
        request = json.loads(body)
        record.requests += 1
        events = b"".join(_answer(request))
        if request.get("stream"):
            writer.write(sse_head() + http_chunk(events + b"data: [DONE]\n\n") + b"0\r\n\r\n")
        else:  # the proxy aggregates a stream for a client that did not ask for one; here answer whole
            chunks = [json.loads(line[6:]) for line in events.split(b"\n\n") if line]
            text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
            calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls") or []]
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                arguments = "".join(tc["function"]["arguments"] for tc in calls)
                message["tool_calls"] = [
                    {**calls[0], "function": {"name": "get_weather", "arguments": arguments}}
                ]
            body_out = json.dumps(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": "/models/gemma.gguf",
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": chunks[-1]["choices"][0]["finish_reason"],
                        }
                    ],
                    "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
                }
            ).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body_out)}\r\n\r\n".encode()
                + body_out
            )
        await writer.drain()


@pytest.fixture(scope="module")
def client() -> Iterator[openai.OpenAI]:
    with raw_server(_handler) as (upstream, _), run_proxy(upstream) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


def test_create_whole(client: openai.OpenAI) -> None:
    response = client.responses.create(model="gemma", input="Say hello")
    check_response(response.model_dump(mode="json", exclude_unset=True))
    assert response.status == "completed"
    assert response.output_text == "Hello there"
    assert response.model == "gemma"  # as asked, not the upstream's file path
    assert response.usage is not None
    assert response.usage.total_tokens == 13


def test_create_streamed(client: openai.OpenAI) -> None:
    events = [
        e.model_dump(mode="json", exclude_unset=True)
        for e in client.responses.create(model="gemma", input="Say hello", stream=True)
    ]
    check_events(events)
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hello there"
    assert events[-1]["response"]["model"] == "gemma"


def test_the_stream_helper(client: openai.OpenAI) -> None:
    with client.responses.stream(model="gemma", input="Say hello") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Hello there"
    assert final.output_text == "Hello there"
    assert final.status == "completed"


@pytest.mark.parametrize("stream", [False, True])
def test_a_function_tool_round_trip(client: openai.OpenAI, stream: bool) -> None:
    asked: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    if stream:
        with client.responses.stream(
            model="gemma", input=asked, tools=[TOOL], tool_choice="required"
        ) as events:
            first = events.get_final_response()
    else:
        first = client.responses.create(model="gemma", input=asked, tools=[TOOL], tool_choice="required")
    check_response(first.model_dump(mode="json", exclude_unset=True))
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id == "call_abc"
    follow_up = [
        *asked,
        call.model_dump(exclude_unset=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ]
    answer = client.responses.create(model="gemma", input=follow_up, stream=False)
    check_response(answer.model_dump(mode="json", exclude_unset=True))
    assert answer.output_text == "It is sunny"
