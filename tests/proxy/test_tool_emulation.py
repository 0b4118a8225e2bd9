"""Tool calls through JSON output (proxy/adapters/tool_emulation.py): the request as the server is sent
it, and its answers, whole and streamed, as tool calls or text (tests/proxy/test_llama_server_real.py
runs it against llama-server itself)."""

from __future__ import annotations

import json
from typing import Any

from conformance.probe import TIME, WEATHER
from proxy.adapters.tool_emulation import INSTRUCTION, REQUIRED_INSTRUCTION, EmulatedCalls, emulated_request

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


def test_a_forced_call_lists_the_functions_and_asks_for_one_call_object() -> None:
    body = {"model": "m", "messages": ROUND_TRIP, "tools": [WEATHER, TIME], "tool_choice": "required"}
    sent = emulated_request(body, [WEATHER, TIME], required=True)
    assert not {"tools", "tool_choice"} & set(sent)
    system, user, assistant, answer = sent["messages"]
    assert system["content"].startswith(f"Be brief.\n\n{REQUIRED_INSTRUCTION}.")
    assert json.dumps(WEATHER["function"]) in system["content"]
    assert user == ROUND_TRIP[1]
    assert json.loads(assistant["content"]) == {
        "tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}
    }
    assert answer == {"role": "user", "content": "The result of get_weather: 21C"}
    schema = sent["response_format"]["json_schema"]["schema"]
    branches = schema["properties"]["tool_call"]["anyOf"]
    assert [branch["properties"]["name"]["const"] for branch in branches] == ["get_weather", "get_time"]
    assert branches[0]["properties"]["arguments"] == WEATHER["function"]["parameters"]


def test_parameters_with_definitions_keep_their_refs_and_stop_is_left_to_the_proxy() -> None:
    city = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    parameters = {"type": "object", "$defs": {"City": city}, "properties": {"city": {"$ref": "#/$defs/City"}}}
    tool = {"type": "function", "function": {"name": "get_time", "parameters": parameters}}
    body = {"messages": ROUND_TRIP[1:2], "tools": [tool], "tool_choice": "required", "stop": ["Paris"]}
    sent = emulated_request(body, [tool], required=True)
    assert "stop" not in sent  # it would cut the JSON; the proxy cuts the response's text (Q76)
    schema = sent["response_format"]["json_schema"]["schema"]
    (name,) = schema["$defs"]
    ref = schema["properties"]["tool_call"]["properties"]["arguments"]["properties"]["city"]["$ref"]
    assert ref == f"#/$defs/{name}"
    assert schema["$defs"][name] == city


def test_auto_asks_for_a_call_or_a_response_and_adds_a_system_turn_where_there_is_none() -> None:
    body = {"messages": ROUND_TRIP[1:2], "tools": [TIME]}
    sent = emulated_request(body, [TIME], required=False)
    assert sent["messages"][0]["content"].startswith(f"{INSTRUCTION}.")
    call, response = sent["response_format"]["json_schema"]["schema"]["anyOf"]
    assert call["properties"]["tool_call"]["properties"]["name"] == {"const": "get_time"}
    assert response["properties"]["response"] == {"type": "string", "minLength": 1}


def _body(content: str, finish: str = "stop") -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
    return {"object": "chat.completion", "choices": [choice]}


def test_a_whole_answer_is_a_call_or_a_response_or_the_text_it_was() -> None:
    called = '{"tool_call": {"name": "get_time", "arguments": {"city": "Oslo"}}}'
    answer = EmulatedCalls()(_body(called))["choices"][0]
    call = answer["message"]["tool_calls"][0]
    assert (answer["finish_reason"], answer["message"]["content"]) == ("tool_calls", None)
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == (
        "get_time",
        {"city": "Oslo"},
    )
    assert EmulatedCalls()(_body('{"response": "Sunny."}')) == _body("Sunny.")
    for text, finish in (('{"tool_call": {"name": "get_ti', "length"), ("Sunny.", "stop"), ("[1]", "stop")):
        assert EmulatedCalls()(_body(text, finish)) == _body(text, finish)  # cut off, or neither shape


def test_an_answer_nested_past_what_json_reads_is_the_text_it_was() -> None:
    """A call's arguments 1,000 deep: json.loads raised RecursionError, a 500 "internal error in the
    proxy" (issue 32). It is neither shape the format knows, so it is the text it was."""
    deep = '{"tool_call": {"name": "get_time", "arguments": {"a": ' + "[" * 1000 + "]" * 1000 + "}}}"
    assert EmulatedCalls()(_body(deep)) == _body(deep)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def test_a_streamed_answer_is_held_and_goes_out_at_its_end() -> None:
    emulation = EmulatedCalls()
    pieces = ['{"tool_call": {"name": "get_', 'time", "arguments": {"ci', 'ty": "Oslo"}}}']
    out = [emulation(_chunk({"role": "assistant", "content": None}))]
    out += [emulation(_chunk({"content": piece})) for piece in pieces]
    out.append(emulation(_chunk({}, "stop")))
    assert [c["choices"][0]["delta"] for c in out[:-1]] == [{"role": "assistant"}, {}, {}, {}]
    last = out[-1]["choices"][0]
    assert last["finish_reason"] == "tool_calls"
    (call,) = last["delta"]["tool_calls"]
    assert (call["index"], call["function"]["name"]) == (0, "get_time")
    replied = EmulatedCalls()
    replied(_chunk({"content": '{"response": "Sun'}))
    assert replied(_chunk({"content": 'ny."}'}, "stop"))["choices"][0] == {
        "index": 0,
        "delta": {"content": "Sunny."},
        "finish_reason": "stop",
    }
    cut = EmulatedCalls()
    cut(_chunk({"content": '{"response": "Sun'}))
    assert cut(_chunk({"content": "ny \\u00e9\\u00"}, "length"))["choices"][0]["delta"] == {
        "content": "Sunny é"
    }


def test_an_answer_cut_off_by_its_limit_gives_what_it_holds_never_the_envelope() -> None:
    cut_call = EmulatedCalls()(
        _body('{"tool_call": {"name": "get_time", "arguments": {"city": "Os', "length")
    )
    answer = cut_call["choices"][0]
    assert answer["finish_reason"] == "length"  # OpenAI's cut-off call
    assert answer["message"]["tool_calls"][0]["function"] == {"name": "get_time", "arguments": '{"city": "Os'}
    # A whole object, the limit falling on the whitespace the grammar allows after it: a whole call.
    whole = EmulatedCalls()(_body('{"tool_call": {"name": "get_time", "arguments": {}}}\n  ', "length"))
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert EmulatedCalls()(_body('{"response": "It is', "length")) == _body("It is", "length")


def test_an_envelope_that_does_not_parse_was_cut_whatever_the_finish_says() -> None:
    # ik_llama.cpp finishes 'stop' at its limit: its cut envelope went out as the answer's text. The
    # schema's grammar ends only a whole envelope, so one that does not parse was cut by the limit.
    assert EmulatedCalls()(_body('{\n  "response": "The weather is 10', "stop")) == _body(
        "The weather is 10", "length"
    )
    cut_call = EmulatedCalls()(_body('{"tool_call": {"name": "get_time", "arguments": {"city": "Os', "stop"))
    answer = cut_call["choices"][0]
    assert answer["finish_reason"] == "length"
    assert answer["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": "Os'
    assert EmulatedCalls()(_body("[1, 2", "stop")) == _body("[1, 2", "stop")  # not the envelope: as it came


def test_a_forced_call_cut_before_its_name_is_the_call_its_choice_names_never_text() -> None:
    """Black-box testing found a forced call cut at 3 tokens answered as ``{"tool_call": {"`` in the
    content, on chat, Responses and Messages: the proxy's own envelope shown as the model's text."""
    cut = '{"tool_call": {"'
    answer = EmulatedCalls(["get_time"], required=True)(_body(cut, "length"))["choices"][0]
    assert answer["finish_reason"] == "length"
    assert answer["message"]["content"] is None
    assert answer["message"]["tool_calls"][0]["function"] == {"name": "get_time", "arguments": ""}
    # Several functions: the part of the name written tells which, else there is no call to show.
    two = ["get_time", "get_weather"]
    begun = EmulatedCalls(two, required=True)(_body('{"tool_call": {"name": "get_w', "length"))
    assert begun["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    for text in ('{"tool_call": {"name": "get_', "{\n  "):
        unknown = EmulatedCalls(two, required=True)(_body(text, "length"))["choices"][0]
        assert (unknown["message"]["content"], unknown["finish_reason"]) == ("", "length")
        assert "tool_calls" not in unknown["message"]


def test_under_auto_a_cut_answer_is_a_call_once_its_key_says_so() -> None:
    called = EmulatedCalls(["get_time"])(_body('{\n  "tool_c', "length"))["choices"][0]
    assert called["message"]["tool_calls"][0]["function"] == {"name": "get_time", "arguments": ""}
    # A response's or a call's: not told yet, so the text it was (empty would read as lost text, Q14).
    assert EmulatedCalls(["get_time"])(_body('{"', "length")) == _body('{"', "length")
    # A whole name that is no function's is no call of these.
    stray = '{"tool_call": {"name": "get_timer", "'
    assert EmulatedCalls(["get_time"])(_body(stray, "length")) == _body(stray, "length")


def test_an_empty_answer_is_no_call_and_prose_cut_under_a_forced_choice_stays_as_it_was() -> None:
    """Found by review: an empty answer finished ``stop`` under a forced choice of one function was read
    as a cut call of it (finished ``length``, a call the model never made); and text that is no
    envelope (a server that ignored the schema) was dropped where cut under a forced choice."""
    forced = EmulatedCalls(["get_time"], required=True)
    assert forced(_body("", "stop")) == _body("", "stop")
    assert forced(_body("It is noon and", "length")) == _body("It is noon and", "length")
    # The call's arguments begun before it was cut (a tool_calls array's first call too): as far as they
    # came, not a call without them.
    array = forced(_body('{"tool_calls": [{"name": "get_time", "arguments": {"zone": "U', "length"))
    assert array["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"zone": "U'
