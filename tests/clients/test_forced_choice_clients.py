"""openai-node (chat's stream helper, ``responses.create``) and the Vercel AI SDK, through the proxy, get a
forced call whole or an honest error from an upstream that ignores ``tool_choice`` (issue 37, point 3;
Q86).

The upstream is scripted (tests/proxy/forced_upstream.py): it answers ``required`` with text and
``finish_reason: "stop"``, as llama-cpp-python does (Q80), and honours a named function, or nothing at
all. Before, openai-node's stream helper returned that text as a finished answer and only the AI SDK
noticed, raising its own ``ToolChoiceViolationError``; now the proxy asks again with the function named
and both get the call, or, where nothing gives one, the proxy's 502 (then its 400) and no text.
"""

from __future__ import annotations

import json
from typing import Any

from tests.clients import weather_tool
from tests.clients.node import NodeClients
from tests.proxy.forced_upstream import ARGUMENTS, TEXT, proxied, way


def test_openai_node_and_the_ai_sdk_get_the_call_an_ignored_required_was_asked_again_for(
    node_clients: NodeClients,
) -> None:
    with proxied({"named"}) as (url, asked):
        spec = weather_tool.spec(url, "m", "required")
        helper = node_clients.run("openai_stream_tool.mjs", spec)
        ai_sdk = node_clients.run("ai_sdk_stream_tool.mjs", spec)
    assert [way(body) for body in asked] == ["required", "named", "named"]  # learned after the first
    assert "error" not in helper, helper
    choice = helper["final"]["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    assert not choice["message"].get("content"), choice
    [call] = choice["message"]["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == (
        weather_tool.NAME,
        json.loads(ARGUMENTS),
    )
    assert "error" not in ai_sdk, ai_sdk
    assert ai_sdk["errors"] == [], ai_sdk
    assert ai_sdk["finishReason"] == "tool-calls", ai_sdk
    [sdk_call] = ai_sdk["toolCalls"]
    assert not sdk_call["invalid"], sdk_call
    weather_tool.check_arguments(sdk_call["input"])


def test_openai_node_and_the_ai_sdk_get_an_honest_error_where_no_way_gives_a_call(
    node_clients: NodeClients,
) -> None:
    with proxied(set()) as (url, _):
        spec = weather_tool.spec(url, "m", "named")
        helper = node_clients.run("openai_stream_tool.mjs", spec)
        ai_sdk = node_clients.run("ai_sdk_stream_tool.mjs", spec)
    assert helper.get("name") == "InternalServerError", helper
    assert "did not honour tool_choice" in helper["error"], helper
    # The AI SDK reports the failed request as an error part (then throws that no output came): no
    # text, no call. Asked after the 502, it is the 400 of an upstream known to honour no way.
    failure = " ".join(ai_sdk.get("errors", []))
    assert "tool_choice naming a function is not supported by this server" in failure, ai_sdk
    assert not ai_sdk.get("toolCalls"), ai_sdk
    assert "text-delta" not in ai_sdk.get("parts", []), ai_sdk
    assert TEXT[1] not in json.dumps(ai_sdk)


def _responses_spec(url: str, choice: Any) -> dict[str, Any]:
    """What openai_responses_tool.mjs sends: the weather tool, ``choice`` in the Responses API's form."""
    tool, prompt = weather_tool.TOOL, weather_tool.PROMPT
    return {"baseURL": url + "/v1", "model": "m", "prompt": prompt, "tool": tool, "toolChoice": choice}


def test_openai_node_on_responses_gets_the_call_an_ignored_required_was_asked_again_for(
    node_clients: NodeClients,
) -> None:
    with proxied({"named"}) as (url, asked):
        got = node_clients.run("openai_responses_tool.mjs", _responses_spec(url, "required"))
    assert [way(body) for body in asked] == ["required", "named"]
    assert "error" not in got, got
    assert got["types"][-1] == "response.completed", got["types"]
    assert "response.output_text.delta" not in got["types"]
    response = got["response"]
    assert response["status"] == "completed", response
    [item] = response["output"]
    assert (item["type"], item["name"]) == ("function_call", weather_tool.NAME), item
    assert json.loads(item["arguments"]) == json.loads(ARGUMENTS)


def test_openai_node_on_responses_gets_an_honest_error_where_no_way_gives_a_call(
    node_clients: NodeClients,
) -> None:
    named = {"type": "function", "name": weather_tool.NAME}
    with proxied(set()) as (url, _):
        got = node_clients.run("openai_responses_tool.mjs", _responses_spec(url, named))
    assert got.get("status") == 502, got
    assert "did not honour tool_choice naming a function" in got["error"], got
