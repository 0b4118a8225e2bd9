"""openai-python's Responses client through ``conformant serve`` in front of llama-cpp-python's server
(which has no ``/v1/responses`` of its own) and in front of the bundled backend: every answer translated
from their chat completions and judged by the suite with no error.

llama-cpp-python's server runs the Gemma 3 270M base model with ``--chat_format chatml-function-calling``
(the bundled backend has its own tool support, judged by its own tests): that format
answers a named ``tool_choice`` with a call whose arguments a grammar holds to the tool's parameters
(the only way to get a call out of a model this small), and its template takes ``tool`` messages (the
model's own Gemma template refuses any role but user and assistant).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.support.responses_checks import check_events, check_response, judged, sse_events

pytestmark = pytest.mark.backend

TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"],
    },
    "strict": True,
}


@pytest.fixture(params=["llama-cpp-python", "backend"])
def proxy_url(request: pytest.FixtureRequest) -> str:
    name = "llama_cpp_python_proxy" if request.param == "llama-cpp-python" else "backend_proxy"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture
def client(proxy_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy_url + "/v1", api_key="none", max_retries=0)


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    """``body`` posted to the proxy's /v1/responses, the answer judged with no error.

    Asked once more when llama-cpp-python broke the stream off before its first event (the proxy's
    502 says so: it does that when it takes another request for its one model, and in a full run of
    this module it did so to a request that waited for no other), which is the upstream's, not the
    translation's."""
    response = httpx.post(url + "/v1/responses", json=body, timeout=120)
    if response.status_code == 502 and "interrupted the stream" in response.text:
        response = httpx.post(url + "/v1/responses", json=body, timeout=120)
    judged(response.content, body, response.status_code, response.headers)
    return response


def test_create_whole(client: openai.OpenAI, proxy_url: str) -> None:
    body = {"model": "gemma", "input": "The capital of France is", "max_output_tokens": 16}
    raw = _post(proxy_url, body)
    assert raw.status_code == 200
    response = client.responses.create(**body)
    check_response(response.model_dump(mode="json", exclude_unset=True))
    assert response.status in ("completed", "incomplete")
    assert response.model == "gemma"
    assert response.usage is not None
    assert response.usage.input_tokens > 0


def test_create_streamed(client: openai.OpenAI, proxy_url: str) -> None:
    body = {"model": "gemma", "input": "The capital of France is", "max_output_tokens": 16, "stream": True}
    check_events(sse_events(_post(proxy_url, body).content))
    stream = client.responses.create(**body)
    events = [event.model_dump(mode="json", exclude_unset=True) for event in stream]
    check_events(events)
    assert events[-1]["type"] in ("response.completed", "response.incomplete")


def test_max_output_tokens_reached_is_incomplete(proxy_url: str) -> None:
    """A JSON object (``text.format``) keeps a small model writing; an answer that used all 16 tokens is
    ``incomplete`` (the judge's responses-limit-completed rule holds it to that too)."""
    body = {
        "model": "gemma",
        "input": "Describe Paris as a JSON object.",
        "max_output_tokens": 16,
        "text": {"format": {"type": "json_object"}},
        "stream": True,
    }
    events = sse_events(_post(proxy_url, body).content)
    check_events(events)
    last = events[-1]["response"]
    if events[-1]["type"] == "response.failed":
        # llama-cpp-python breaks a stream off (``[DONE]``, no final chunk) when another request waits
        # for its model; on this loaded machine that happened once in a full run. The stream still
        # ends as it must (judged above); the limit is not what it shows.
        assert "interrupted" in last["error"]["message"], last["error"]
        return
    if last["usage"]["output_tokens"] >= 16:
        assert events[-1]["type"] == "response.incomplete"
        assert last["incomplete_details"] == {"reason": "max_output_tokens"}
    else:
        assert events[-1]["type"] == "response.completed"


def test_the_stream_helper_with_a_json_schema(backend_proxy: str) -> None:
    """The helper's ``get_final_response`` wants ``response.completed``, which a base model reaches only
    when something ends its text: a JSON schema's grammar (``text.format``) does. (llama-cpp-python's
    server refuses OpenAI's ``json_schema`` format: the proxy's structured-output repair, issue 20.)"""
    client = openai.OpenAI(base_url=backend_proxy + "/v1", api_key="none", max_retries=0)
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    text: Any = {"format": {"type": "json_schema", "name": "capital", "schema": schema, "strict": True}}
    with client.responses.stream(
        model="gemma", input="The capital of France is", text=text, max_output_tokens=64
    ) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed"
    assert "".join(deltas) == final.output_text
    assert json.loads(final.output_text)["answer"] in ("Paris", "Rome")


def test_the_stream_helper_with_a_forced_call(llama_cpp_python_proxy: str) -> None:
    """A named ``tool_choice``: llama-cpp-python holds the call's arguments to the tool's parameters
    with a grammar, which also ends the answer (``response.completed``)."""
    client = openai.OpenAI(base_url=llama_cpp_python_proxy + "/v1", api_key="none", max_retries=0)
    tools: Any = [TOOL]
    for _ in range(2):  # once more if llama-cpp-python broke the stream off (see _post)
        with client.responses.stream(
            model="gemma",
            input="What is the weather in Paris?",
            tools=tools,
            tool_choice={"type": "function", "name": "get_weather"},
            max_output_tokens=64,
        ) as stream:
            events = list(stream)
            deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
            last = events[-1]
            interrupted = last.type == "response.failed" and "interrupted" in str(last.response.error)
            if not interrupted:
                final = stream.get_final_response()
                break
    assert final.status == "completed"
    calls = [item for item in final.output if item.type == "function_call"]
    assert len(calls) == 1
    assert "".join(deltas) == calls[0].arguments
    assert json.loads(calls[0].arguments)["city"] in ("Paris", "Rome")


def test_a_function_tool_round_trip(llama_cpp_python_proxy: str) -> None:
    proxy_url = llama_cpp_python_proxy
    client = openai.OpenAI(base_url=proxy_url + "/v1", api_key="none", max_retries=0)
    asked: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    choice = {"type": "function", "name": "get_weather"}
    body = {"model": "gemma", "input": asked, "tools": [TOOL], "tool_choice": choice, "max_output_tokens": 64}
    check_events(sse_events(_post(proxy_url, {**body, "stream": True}).content))
    first = client.responses.create(**body)
    check_response(first.model_dump(mode="json", exclude_unset=True))
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1, first.output
    call = calls[0]
    assert call.name == "get_weather"
    assert json.loads(call.arguments)["city"] in ("Paris", "Rome")
    assert call.call_id
    follow_up = [
        *asked,
        call.model_dump(exclude_unset=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 24 C"},
    ]
    # A JSON object, which its grammar makes the model start at once: left free after a tool's output,
    # this base model's greedy answer is empty (6 tokens that decode to nothing: a 502, Q14).
    text = {"format": {"type": "json_object"}}
    second = {"model": "gemma", "input": follow_up, "max_output_tokens": 32, "text": text}
    assert _post(proxy_url, second).status_code == 200
    answer = client.responses.create(**second)
    check_response(answer.model_dump(mode="json", exclude_unset=True))
    assert answer.output_text
