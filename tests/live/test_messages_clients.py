"""anthropic-python's Messages client (``messages.create`` streamed and not, the ``messages.stream``
helper, ``count_tokens``, a tool round trip) through ``conformant serve`` in front of llama-cpp-python's
server (no ``/v1/messages`` of its own) and in front of the bundled backend, and on the bundled backend
itself: every answer judged by the suite with no error.

llama-cpp-python's server runs the Gemma 3 270M base model with ``--chat_format
chatml-function-calling``: it answers a named ``tool_choice`` with a call whose arguments a grammar
holds to the tool's schema (the only way to get a call out of a model this small), and its template
takes ``tool`` messages.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest

from tests.support.messages_checks import check_message, judged, message_events

pytestmark = pytest.mark.backend

TOOL: Any = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"],
    },
}
GREEDY: dict[str, Any] = {"temperature": 0}
"""Greedy, so that every server's answer has text: under llama-cpp-python's chatml-function-calling
format the model answers "The capital of France is" with 6 tokens that decode to nothing (a 502, Q14),
and sampled, now and then other prompts too. (anthropic-python 2 has no ``temperature`` argument any
more: the SDK calls send it as ``extra_body``.)"""
HELLO: dict[str, Any] = {
    "model": "gemma",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "Write a short poem about the sea."}],
}


@pytest.fixture(params=["llama-cpp-python", "backend", "backend itself"])
def server_url(request: pytest.FixtureRequest) -> str:
    if request.param == "backend itself":
        url: str = request.getfixturevalue("backend_url")
        return url.removesuffix("/v1")
    name = "llama_cpp_python_proxy" if request.param == "llama-cpp-python" else "backend_proxy"
    url = request.getfixturevalue(name)
    return url.removesuffix("/v1")


def _client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="none", max_retries=0)


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    """``body`` posted to ``/v1/messages``, the answer judged with no error; asked once more when
    llama-cpp-python broke its stream off before the first event (the proxy's 502 says so), which is
    the upstream's doing, not the translation's (tests/live/test_responses_clients.py)."""
    response = httpx.post(url + "/v1/messages", json=body, timeout=120)
    if response.status_code == 502 and "interrupted the stream" in response.text:
        response = httpx.post(url + "/v1/messages", json=body, timeout=120)
    judged(response.content, body, response.status_code, response.headers)
    return response


def test_create_whole_and_streamed(server_url: str) -> None:
    raw = _post(server_url, {**HELLO, **GREEDY})
    assert raw.status_code == 200
    check_message(raw.json())
    events = message_events(_post(server_url, {**HELLO, **GREEDY, "stream": True}).content)
    assert events[-1]["type"] == "message_stop"
    message = _client(server_url).messages.create(**HELLO, extra_body=GREEDY)
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens <= 16


def test_the_stream_helper_and_count_tokens(server_url: str, request: pytest.FixtureRequest) -> None:
    client = _client(server_url)
    with client.messages.stream(**HELLO, extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "".join(block.text for block in final.content if block.type == "text")
    assert final.usage.output_tokens > 0
    counted = client.messages.count_tokens(model="gemma", messages=HELLO["messages"])
    with_tool = client.messages.count_tokens(model="gemma", messages=HELLO["messages"], tools=[TOOL])
    if request.node.callspec.params["server_url"] == "llama-cpp-python":
        # Counted as that server reads the prompt: Gemma 3's template under llama-cpp-python writes no
        # tools (it reported 24 prompt tokens with a tool and without, docs/proxy.md, usage agreement).
        assert 0 < counted.input_tokens <= with_tool.input_tokens
    else:
        assert 0 < counted.input_tokens < with_tool.input_tokens
    response = httpx.post(
        server_url + "/v1/messages/count_tokens", json={"model": "gemma", "messages": HELLO["messages"]}
    )
    judged(
        response.content,
        {"model": "gemma", "messages": HELLO["messages"]},
        200,
        response.headers,
        path="/v1/messages/count_tokens",
    )


@pytest.mark.parametrize("upstream", ["llama-cpp-python", "backend"])
def test_a_tool_round_trip(request: pytest.FixtureRequest, upstream: str) -> None:
    url = request.getfixturevalue(
        "llama_cpp_python_proxy" if upstream == "llama-cpp-python" else "backend_proxy"
    )
    asked: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    choice = {"type": "tool", "name": "get_weather"}
    body = {"model": "gemma", "max_tokens": 64, "messages": asked, "tools": [TOOL], "tool_choice": choice}
    events = message_events(_post(url, {**body, "stream": True}).content)
    assert any(
        e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use" for e in events
    )
    first = _client(url).messages.create(**body)
    check_message(first.model_dump(mode="json"))
    assert first.stop_reason == "tool_use"
    (call,) = [block for block in first.content if block.type == "tool_use"]
    assert call.name == "get_weather"
    assert call.input["city"] in ("Paris", "Rome")  # type: ignore[index]
    follow_up = [
        *asked,
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 24 C"}],
        },
    ]
    # A JSON object, which its grammar makes the model start at once: left free after a tool's result,
    # this base model's answer under llama-cpp-python is empty (6 tokens that decode to nothing: a 502,
    # Q14), as on the Responses route (tests/live/test_responses_clients.py).
    answer_format = {
        "type": "json_schema",
        "schema": {"type": "object", "properties": {"weather": {"type": "string"}}},
    }
    second = {
        "model": "gemma",
        "max_tokens": 32,
        "messages": follow_up,
        "tools": [TOOL],
        "output_config": {"format": answer_format},
    }
    assert _post(url, {**second, **GREEDY}).status_code == 200
    answer = _client(url).messages.create(**second, extra_body=GREEDY)
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")


@pytest.mark.parametrize("stream", [False, True])
def test_the_stop_sequence_met_is_named(
    server_url: str, stream: bool, request: pytest.FixtureRequest
) -> None:
    """``stop_reason: "stop_sequence"`` with the sequence, where the server that generates names it:
    the bundled backend (asked by the proxy as llama-server is, ``verbose``). llama-cpp-python's server
    says nothing of which ended its text: the Message says ``end_turn`` there (docs/messages.md)."""
    body = {**HELLO, **GREEDY, "max_tokens": 30, "stop_sequences": ["e"]}
    if stream:
        events = message_events(_post(server_url, {**body, "stream": True}).content)
        ended = events[-2]["delta"]
    else:
        ended = _post(server_url, body).json()
    unnamed = request.node.callspec.params["server_url"] == "llama-cpp-python"
    assert (ended["stop_reason"], ended["stop_sequence"]) == (
        ("end_turn", None) if unnamed else ("stop_sequence", "e")
    )
