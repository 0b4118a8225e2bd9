"""A forced tool call through JSON output (proxy/adapters/tool_emulation.py): the request as the server
is sent it, and its answers, whole and streamed, as tool calls (tests/proxy/test_llama_server_real.py
runs it against llama-server itself)."""

from __future__ import annotations

import json
from typing import Any

from conformance.live.probes import TIME, WEATHER
from proxy.adapters.tool_emulation import INSTRUCTION, EmulatedCalls, emulated_request

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
ROUND_TRIP = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "21C"}]},
]


def test_the_request_lists_the_functions_and_asks_for_one_call_object() -> None:
    body = {"model": "m", "messages": ROUND_TRIP, "tools": [WEATHER, TIME], "tool_choice": "required"}
    sent = emulated_request(body, [WEATHER, TIME])
    assert not {"tools", "tool_choice"} & set(sent)
    system, user, assistant, answer = sent["messages"]
    assert system["content"].startswith("Be brief.\n\n" + INSTRUCTION)
    assert json.dumps(WEATHER["function"]) in system["content"]
    assert user == ROUND_TRIP[1]
    assert json.loads(assistant["content"]) == {"name": "get_weather", "arguments": {"city": "Paris"}}
    assert answer == {"role": "user", "content": "The result of get_weather: 21C"}
    schema = sent["response_format"]["json_schema"]["schema"]
    names = [branch["properties"]["name"]["const"] for branch in schema["anyOf"]]
    assert names == ["get_weather", "get_time"]
    assert schema["anyOf"][0]["properties"]["arguments"] == WEATHER["function"]["parameters"]


def test_without_a_system_turn_one_is_added() -> None:
    body = {"messages": ROUND_TRIP[1:2], "tools": [TIME], "tool_choice": "required"}
    sent = emulated_request(body, [TIME])
    assert sent["messages"][0]["role"] == "system"
    assert sent["response_format"]["json_schema"]["schema"]["properties"]["name"] == {"const": "get_time"}


def _body(content: str, finish: str = "stop") -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
    return {"object": "chat.completion", "choices": [choice]}


def test_a_whole_answer_is_a_call_unless_it_is_not_one() -> None:
    answer = EmulatedCalls()(_body('{"name": "get_time", "arguments": {"city": "Oslo"}}'))["choices"][0]
    call = answer["message"]["tool_calls"][0]
    assert (answer["finish_reason"], answer["message"]["content"]) == ("tool_calls", None)
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == (
        "get_time",
        {"city": "Oslo"},
    )
    for text, finish in (('{"name": "get_time", "argu', "length"), ("Sunny.", "stop"), ("[1]", "stop")):
        assert EmulatedCalls()(_body(text, finish)) == _body(text, finish)  # cut off, or no call


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def test_a_streamed_answer_is_held_and_goes_out_as_one_call_at_its_end() -> None:
    emulation = EmulatedCalls()
    pieces = ['{"name": "get_', 'time", "arguments": {"ci', 'ty": "Oslo"}}']
    out = [emulation(_chunk({"role": "assistant", "content": None}))]
    out += [emulation(_chunk({"content": piece})) for piece in pieces]
    out.append(emulation(_chunk({}, "stop")))
    assert [c["choices"][0]["delta"] for c in out[:-1]] == [{"role": "assistant"}, {}, {}, {}]
    last = out[-1]["choices"][0]
    assert last["finish_reason"] == "tool_calls"
    (call,) = last["delta"]["tool_calls"]
    assert (call["index"], call["function"]["name"]) == (0, "get_time")
    cut = EmulatedCalls()
    cut(_chunk({"content": '{"name": "get_'}))
    assert cut(_chunk({"content": "ti"}, "length"))["choices"][0]["delta"] == {"content": '{"name": "get_ti'}
