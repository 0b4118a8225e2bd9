"""openai-python's Responses client through the proxy (``client.responses.create`` streamed and not, the
``client.responses.stream`` helper, a function-tool round trip) against a raw chat upstream that calls
a tool when given tools and answers the tool's output otherwise (tests/proxy/chat_upstream.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.responses_checks import check_events, check_response

from .chat_upstream import handle_chat
from .conftest import run_proxy
from .rawserver import raw_server

TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": False,
}


@pytest.fixture(scope="module")
def client() -> Iterator[openai.OpenAI]:
    with raw_server(handle_chat) as (upstream, _), run_proxy(upstream) as url:
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
