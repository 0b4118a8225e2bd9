"""The Responses <-> chat translation (conformance/protocols/responses/), without sockets."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from openai.types.responses import ResponseErrorEvent

from conformance.protocols.front_end import named_events
from conformance.protocols.responses.events import ResponseEvents
from conformance.protocols.responses.output import ResponsesOutput
from conformance.protocols.responses.response import response_from_chat
from conformance.protocols.responses.translation import TranslationError, responses_error, translate_request
from tests.support.responses_checks import check_events, check_response, judged, sse_events


def _chat(body: dict[str, Any]) -> dict[str, Any]:
    return translate_request({"model": "m", **body}).chat


def test_a_string_input_with_instructions() -> None:
    chat = _chat({"input": "hi", "instructions": "Be brief."})
    assert chat["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert chat["stream"] is False
    assert "stream_options" not in chat


def test_items_become_messages() -> None:
    items = [
        {"role": "developer", "content": "rules"},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
        },
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me look."}],
        },
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x":1}'},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
        {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
    ]
    messages = _chat({"input": items})["messages"]
    assert messages == [
        {"role": "system", "content": "rules"},  # developer: no chat template knows it
        {"role": "user", "content": "ab"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}],
        },
    ]


def test_a_call_alone_is_an_assistant_message_with_empty_content() -> None:
    """Empty, not null: llama-cpp-python's server refuses a null content with a 500."""
    items = [
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    ]
    assistant = _chat({"input": items})["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }


def test_an_output_without_a_call_that_names_its_tool_is_a_call_of_that_tool_and_its_answer() -> None:
    """As Codex CLI 0.171 sends its goal after a ``create_goal`` call: a ``function_call_output`` with
    ``name`` and ``namespace`` and no ``call_id`` (optional in the spec). Chat has no tool message without
    its call, so one is made, with an id from the item's that the next request repeats."""
    items = [
        {"role": "user", "content": "Say hello."},
        {"type": "function_call", "call_id": "c1", "name": "create_goal", "arguments": '{"objective":"hi"}'},
        {"type": "function_call_output", "call_id": "c1", "output": '{"goal":{}}'},
        {
            "type": "function_call_output",
            "id": "fco_01a2-1e1a",
            "name": "goal_objective",
            "namespace": "agent",
            "output": "say hello",
        },
        {"type": "function_call_output", "name": "note", "output": [{"type": "input_text", "text": "n"}]},
    ]
    messages = _chat({"input": items})["messages"]
    assert [m["role"] for m in messages[2:]] == ["tool", "assistant", "tool", "assistant", "tool"]
    goal, note = messages[3]["tool_calls"], messages[5]["tool_calls"]
    assert [c["function"] for c in goal + note] == [
        {"name": "agent__goal_objective", "arguments": "{}"},
        {"name": "note", "arguments": "{}"},
    ]
    assert (messages[4], messages[6]) == (
        {"role": "tool", "tool_call_id": goal[0]["id"], "content": "say hello"},
        {"role": "tool", "tool_call_id": note[0]["id"], "content": "n"},
    )
    assert len({"c1", goal[0]["id"], note[0]["id"]}) == 3
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", c["id"]) for c in goal + note)
    assert _chat({"input": items})["messages"] == messages  # the same ids in the next request
    # The same item twice, or an item whose id digests to a call's: each made call has an id of its own.
    twice = _chat({"input": [*items, items[3]]})["messages"]
    made = [c["id"] for m in twice for c in m.get("tool_calls", ())]
    assert len(made) == len(set(made)) == 4


def test_an_output_with_neither_call_id_nor_name_is_refused() -> None:
    for output in ({"call_id": None}, {"name": ""}, {"name": None, "call_id": None}):
        with pytest.raises(TranslationError) as refused:
            _chat({"input": [{"type": "function_call_output", "output": "x", **output}]})
        assert refused.value.param == "input[0].call_id"


def test_consecutive_messages_of_one_role_are_joined() -> None:
    """As Codex CLI sends a turn: instructions, then developer and user messages of its own before the
    prompt; a template that wants roles to alternate gets one system and one user message."""
    items = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "sandbox rules"}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "<environment_context>"}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]},
    ]
    messages = _chat({"instructions": "You are Codex.", "input": items})["messages"]
    assert messages == [
        {"role": "system", "content": "You are Codex.\n\nsandbox rules"},
        {"role": "user", "content": "<environment_context>\n\nlist the files"},
    ]


def test_a_run_of_joined_messages_is_joined_once_not_recopied_per_item() -> None:
    """Joining each item onto the text so far re-copied the whole run per item: 400,000 one-word user
    items (10.8 MB, under --max-body) held the event loop 18.7 s (issue 32). The parts are collected and
    joined once, when the run ends: until then the first message keeps its own text, and the result is
    the same joined text in order, around messages of other roles."""
    from conformance.protocols.responses.translation import _Messages

    out = _Messages()
    for word in ("a", "b", "c"):
        out.add({"role": "user", "content": word})
    assert out.messages == [{"role": "user", "content": "a"}]  # nothing re-copied while the run grows
    out.add({"role": "assistant", "content": "ok"})
    out.add({"role": "user", "content": "d"})
    out.add({"role": "user", "content": "e"})
    assert out.done() == [
        {"role": "user", "content": "a\n\nb\n\nc"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "d\n\ne"},
    ]
    items = [{"role": "user", "content": "hi"}] * 100_000
    assert _chat({"input": items})["messages"] == [{"role": "user", "content": "\n\n".join(["hi"] * 100_000)}]


def test_an_allowed_tools_choice_is_chats() -> None:
    tools = [{"type": "function", "name": name, "parameters": {"type": "object"}} for name in ("f", "g")]
    choice = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "g"}]}
    chat = _chat({"input": "hi", "tools": tools, "tool_choice": choice})
    allowed = {"mode": "required", "tools": [{"type": "function", "function": {"name": "g"}}]}
    assert chat["tool_choice"] == {"type": "allowed_tools", "allowed_tools": allowed}
    search = {**choice, "tools": [{"type": "web_search"}, {"type": "custom", "name": "apply_patch"}]}
    chat = _chat({"input": "hi", "tools": [*tools, {"type": "web_search"}], "tool_choice": search})
    names = [t["function"]["name"] for t in chat["tool_choice"]["allowed_tools"]["tools"]]
    assert names == ["web_search", "apply_patch"]
    for odd in (
        {**choice, "mode": None},
        {**choice, "tools": []},
        {**choice, "tools": [{"type": "file_search"}]},
    ):
        with pytest.raises(TranslationError) as refused:
            _chat({"input": "hi", "tools": tools, "tool_choice": odd})
        assert refused.value.param == "tool_choice"


def test_a_call_without_its_output_is_openais_400() -> None:
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "call_1", "output": "18C"}
    for given in ([call], [call, {"role": "user", "content": "Thanks."}]):
        with pytest.raises(TranslationError) as refused:
            _chat({"input": [{"role": "user", "content": "Weather?"}, *given]})
        assert refused.value.message == "No tool output found for function call call_1."
        assert refused.value.param == "input"
    with pytest.raises(TranslationError):  # a stored call, and no output in the input that goes on
        translate_request({"model": "m", "input": "Thanks."}, [call])
    assert _chat({"input": [call, output]})["messages"][-1]["role"] == "tool"
    assert translate_request({"model": "m", "input": [output]}, [call]).chat["messages"][-1]["role"] == "tool"


@pytest.mark.parametrize(
    "choice",
    [
        "required",
        {"type": "function", "name": "f"},
        {"type": "allowed_tools", "mode": "required", "tools": []},
    ],
)
def test_a_forced_choice_without_tools_is_openais_400(choice: Any) -> None:
    """Dropped with the tools it had none of, the choice left the model to answer text under a forced call
    (found by black-box testing); ``auto`` and ``none`` still go without tools."""
    with pytest.raises(TranslationError) as refused:
        _chat({"input": "hi", "tool_choice": choice})
    assert refused.value.param == "tool_choice"
    assert "only allowed when 'tools' are specified" in refused.value.message
    for unforced in ("auto", "none"):
        assert "tool_choice" not in _chat({"input": "hi", "tool_choice": unforced})


def test_settings_become_chat_parameters() -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}
    chat = _chat(
        {
            "input": "hi",
            "tools": [tool, {"type": "custom", "name": "apply_patch"}, {"type": "web_search"}],
            "tool_choice": {"type": "function", "name": "f"},
            "parallel_tool_calls": False,
            "text": {
                "format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}
            },
            "reasoning": {"effort": "low"},
            "max_output_tokens": 64,
            "temperature": 0.5,
            "top_p": 0.9,
            "metadata": {"k": "v"},
            "store": False,
            "stream": True,
        }
    )
    names = [t["function"]["name"] for t in chat["tools"]]
    assert names == ["f", "apply_patch", "web_search"]
    assert chat["tools"][0]["function"]["strict"] is True
    assert chat["tools"][1]["function"]["parameters"]["properties"] == {"input": {"type": "string"}}
    assert chat["tools"][2]["function"]["parameters"]["required"] == ["query"]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["parallel_tool_calls"] is False
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": True},
    }
    assert chat["reasoning_effort"] == "low"
    assert chat["max_tokens"] == 64
    assert (chat["temperature"], chat["top_p"]) == (0.5, 0.9)
    assert chat["stream_options"] == {"include_usage": True}
    for key in ("metadata", "store", "text", "reasoning", "max_output_tokens"):
        assert key not in chat  # echoed on the Response, not sent upstream
    assert _chat({"input": "x", "text": {"format": {"type": "json_object"}}})["response_format"] == {
        "type": "json_object"
    }


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"input": "x", "tools": [{"type": "code_interpreter"}]}, "tools[0].type", "unsupported_value"),
        ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name", "missing_required_parameter"),
        (
            {
                "input": "x",
                "tool_choice": {"type": "file_search"},
                "tools": [{"type": "function", "name": "f"}],
            },
            "tool_choice",
            "unsupported_value",
        ),
        (
            {"input": [{"type": "function_call_output", "output": "x"}]},
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].file_id",
            "unsupported_value",
        ),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "invalid_value"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]", "unsupported_value"),
        ({"input": "x", "conversation": "conv_1"}, "conversation", "unsupported_value"),
        (  # (was "'function' is not supported by this server": found by black-box testing)
            {"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function"}},
            "tool_choice.name",
            "missing_required_parameter",
        ),
        ({"input": "x", "stream": "yes"}, "stream", "invalid_type"),
        ({"input": "x", "top_p": 2}, "top_p", "invalid_value"),
        ({"input": "x", "max_output_tokens": 1.5}, "max_output_tokens", "invalid_type"),
        ({"instructions": "only this"}, "input", "missing_required_parameter"),
        (
            {"input": "x", "tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}]},
            "tools[0].tools[0].type",
            "unsupported_value",
        ),
        (
            {"input": "x", "tools": [{"type": "namespace", "tools": []}]},
            "tools[0].name",
            "missing_required_parameter",
        ),
        (
            {
                "input": "x",
                "tools": [
                    {"type": "function", "name": "ns__f"},
                    {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f"}]},
                ],
            },
            "tools[1].tools[0].name",
            "invalid_value",
        ),
    ],
)
def test_refusals_name_the_parameter(body: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(TranslationError) as refused:
        translate_request({"model": "m", **body})
    assert (refused.value.param, refused.value.code, refused.value.status) == (param, code, 400)


def test_previous_response_id_needs_the_items_it_names() -> None:
    with pytest.raises(TranslationError) as refused:
        translate_request({"input": "more", "previous_response_id": "resp_1"})
    assert refused.value.code == "previous_response_not_found"
    before = [{"role": "user", "content": "hi"}, {"type": "message", "role": "assistant", "content": "hello"}]
    chat = translate_request({"input": "more", "previous_response_id": "resp_1"}, before).chat
    assert [m["content"] for m in chat["messages"]] == ["hi", "hello", "more"]


def _completion(message: dict[str, Any], finish: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 7,
        "model": "gemma",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": usage or {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


def test_a_completion_as_a_response() -> None:
    translation = translate_request(
        {
            "model": "m",
            "input": "hi",
            "metadata": {"a": "b"},
            "tools": [{"type": "custom", "name": "apply_patch"}],
        }
    )
    message = {
        "content": "Done.",
        "reasoning_content": "think",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "apply_patch", "arguments": '{"input": "*** Begin Patch"}'},
            },
        ],
    }
    usage = {
        "prompt_tokens": 5,
        "completion_tokens": 3,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 2},
    }
    response = response_from_chat(
        _completion(message, "tool_calls", usage), translation.echo, custom_tools=translation.custom_tools
    )
    check_response(response)
    assert response["status"] == "completed"
    assert response["created_at"] == 7
    assert response["metadata"] == {"a": "b"}
    assert [item["type"] for item in response["output"]] == [
        "reasoning",
        "message",
        "function_call",
        "custom_tool_call",
    ]
    assert response["output"][2]["call_id"] == "call_1"
    assert response["output"][3]["input"] == "*** Begin Patch"
    assert response["usage"]["input_tokens_details"]["cached_tokens"] == 2
    assert response["usage"]["total_tokens"] == 8


def test_a_completion_cut_by_its_limit_is_incomplete() -> None:
    echo = translate_request({"input": "hi", "max_output_tokens": 16}).echo
    response = response_from_chat(_completion({"content": "Once upon"}, "length"), echo)
    check_response(response)
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["completed_at"] is None


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "model": "gemma",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def test_chunks_as_events() -> None:
    translation = translate_request({"model": "m", "input": "hi", "stream": True})
    stream = ResponseEvents(translation.echo, model="gemma")
    events = stream.start()
    for chunk in [
        _chunk({"role": "assistant", "reasoning_content": "hm"}),
        _chunk({"content": "Calling."}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a":'},
                    }
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "g", "arguments": "{}"},
                    }
                ]
            }
        ),
        _chunk({}, "tool_calls"),
        {
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {"prompt_tokens": 4, "completion_tokens": 9, "total_tokens": 13},
        },
    ]:
        events += stream.feed(chunk)
    events += stream.finish()
    check_events(events)
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    assert json.loads(final["output"][2]["arguments"]) == {"a": 1}
    assert final["usage"]["output_tokens"] == 9
    assert stream.response is final


def test_reasoning_under_either_name() -> None:
    for name in ("reasoning_content", "reasoning"):
        stream = ResponseEvents(translate_request({"input": "hi"}).echo, model="gemma")
        events = (
            stream.start() + stream.feed(_chunk({name: "hm"})) + stream.feed(_chunk({"content": "A"}, "stop"))
        )
        events += stream.finish({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})
        check_events(events)
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == "hm"
        body = response_from_chat(_completion({"content": "A", name: "hm"}, "stop"), stream.echo)
        assert body["output"][0]["type"] == "reasoning"


def _token(token: str, logprob: float, tops: tuple[tuple[str, float], ...] = ()) -> dict[str, Any]:
    """A chat token logprob entry, its ``bytes`` left null as a chat server may leave them."""
    top = [{"token": t, "logprob": p, "bytes": None} for t, p in tops]
    return {"token": token, "logprob": logprob, "bytes": None, "top_logprobs": top}


def test_logprobs_are_asked_only_with_include() -> None:
    asked = _chat({"input": "hi", "include": ["message.output_text.logprobs"], "top_logprobs": 2})
    assert (asked["logprobs"], asked["top_logprobs"]) == (True, 2)
    assert _chat({"input": "hi", "include": ["message.output_text.logprobs"]})["top_logprobs"] == 0
    for body in (
        {"input": "hi", "top_logprobs": 2},
        {"input": "hi", "include": ["reasoning.encrypted_content"]},
    ):
        assert "logprobs" not in _chat(body)
        assert "top_logprobs" not in _chat(body)


ASKED = translate_request({"input": "hi", "include": ["message.output_text.logprobs"], "top_logprobs": 2})


def _entry(token: str, logprob: float) -> dict[str, Any]:
    """A Response's entry for a token ``_token`` made without alternatives."""
    return {"token": token, "logprob": logprob, "bytes": list(token.encode()), "top_logprobs": []}


def test_logprobs_of_a_whole_answer_and_of_a_stream() -> None:
    chat_logprobs = {"content": [_token("Hé", -0.5, (("Hé", -0.5), ("Ho", -1.5))), _token("!", -0.25)]}
    response_logprobs = [
        {
            "token": "Hé",
            "logprob": -0.5,
            "bytes": [72, 195, 169],
            "top_logprobs": [
                {"token": "Hé", "logprob": -0.5, "bytes": [72, 195, 169]},
                {"token": "Ho", "logprob": -1.5, "bytes": [72, 111]},
            ],
        },
        _entry("!", -0.25),
    ]
    completion = _completion({"content": "Hé!"}, "stop")
    completion["choices"][0]["logprobs"] = chat_logprobs
    body = ASKED.response(completion)
    check_response(body)
    assert body["output"][0]["content"][0]["logprobs"] == response_logprobs
    # Not asked, none is passed on, whatever the upstream sent.
    assert (
        translate_request({"input": "hi"}).response(completion)["output"][0]["content"][0]["logprobs"] == []
    )

    stream = ASKED.events("gemma")
    events = stream.start()
    first, second = _chunk({"role": "assistant", "content": "Hé"}), _chunk({"content": "!"}, "stop")
    first["choices"][0]["logprobs"] = {"content": chat_logprobs["content"][:1]}
    second["choices"][0]["logprobs"] = {"content": chat_logprobs["content"][1:]}
    held = _chunk({"content": ""})  # a token whose text is held back: its logprob goes with the next text
    held["choices"][0]["logprobs"] = {"content": [_token("", -2.0)]}
    for chunk in (first, held, second):
        events += stream.feed(chunk)
    events += stream.finish({"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4})
    check_events(events)
    deltas = [e["logprobs"] for e in events if e["type"] == "response.output_text.delta"]
    assert [[t["token"] for t in d] for d in deltas] == [["Hé"], ["", "!"]]
    whole = [response_logprobs[0], _entry("", -2.0), response_logprobs[1]]
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert done["logprobs"] == whole
    assert events[-1]["response"]["output"][0]["content"][0]["logprobs"] == whole


def test_only_the_texts_tokens_are_its_logprobs_beside_reasoning_and_calls() -> None:
    """The bundled backend's logprobs cover its reasoning and calls too: one generation."""
    tokens = ["<think>", "Hm", "</think>", "Hi", " there", '{"name"', ":1}"]
    chat_logprobs = {"content": [_token(t, -1.0) for t in tokens]}
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    completion = _completion({"content": "Hi there", "reasoning_content": "Hm", "tool_calls": [call]}, "stop")
    completion["choices"][0]["logprobs"] = chat_logprobs
    message = next(item for item in ASKED.response(completion)["output"] if item["type"] == "message")
    assert message["content"][0]["logprobs"] == [_entry("Hi", -1.0), _entry(" there", -1.0)]

    stream = ASKED.events("gemma")
    events = stream.start()
    deltas: list[dict[str, Any]] = [
        {"role": "assistant", "reasoning_content": "Hm"},
        {"content": ""},  # the closing marker's token: no text of the answer's
        {"content": "Hi"},
        {"content": " there"},
        {"tool_calls": [{"index": 0, **call}]},
    ]
    for delta, token in zip(
        deltas, [["<think>", "Hm"], ["</think>"], ["Hi"], [" there"], tokens[5:]], strict=True
    ):
        chunk = _chunk(delta)
        chunk["choices"][0]["logprobs"] = {"content": [_token(t, -1.0) for t in token]}
        events += stream.feed(chunk)
    events += stream.feed(_chunk({}, "tool_calls"))
    events += stream.finish({"prompt_tokens": 1, "completion_tokens": 7, "total_tokens": 8})
    check_events(events)
    done = next(e for e in events if e["type"] == "response.output_text.done")
    # The marker's token, on a chunk with no text, goes with the next text: it is the text's neighbour.
    assert [t["token"] for t in done["logprobs"]] == ["</think>", "Hi", " there"]


def test_a_refusals_logprobs_are_chats_refusal_logprobs() -> None:
    completion = _completion({"content": None, "refusal": "No."}, "stop")
    completion["choices"][0]["logprobs"] = {"content": None, "refusal": [_token("No.", -0.1)]}
    assert ASKED.response(completion)["output"][0]["content"][0]["logprobs"] == [_entry("No.", -0.1)]
    stream = ASKED.events("gemma")
    chunk = _chunk({"role": "assistant", "refusal": "No."}, "stop")
    chunk["choices"][0]["logprobs"] = {"content": None, "refusal": [_token("No.", -0.1)]}
    events = stream.start() + stream.feed(chunk) + stream.finish()
    assert next(e for e in events if e["type"] == "response.output_text.delta")["logprobs"] == [
        _entry("No.", -0.1)
    ]


def test_malformed_logprobs_from_a_server_are_left_out() -> None:
    completion = _completion({"content": "A"}, "stop")
    completion["choices"][0]["logprobs"] = {"content": [{"token": 1}, "x", _token("A", -0.1, (("B", True),))]}
    body = ASKED.response(completion)
    assert body["output"][0]["content"][0]["logprobs"] == [_entry("A", -0.1)]


def test_a_failure_after_some_output_is_response_failed() -> None:
    stream = ResponseEvents(translate_request({"input": "hi"}).echo, model="gemma")
    events = stream.start() + stream.feed(_chunk({"content": "Hel"}))
    events += stream.fail(
        {"error": {"message": "the upstream went away", "type": "server_error", "param": None, "code": None}}
    )
    check_events(events)
    failed = events[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": "the upstream went away"}
    assert failed["output"][0]["status"] == "incomplete"


def test_a_stream_cut_where_it_stands_ends_with_an_error_event_numbered_after_the_last() -> None:
    """``error`` (what the proxy sends when the shutdown deadline comes during a stream's last event) is
    an event openai-python reads, and the suite's judge takes it as the stream's terminal event."""
    request = {"model": "gemma", "input": "hi", "stream": True}
    stream = ResponseEvents(translate_request(request).echo, model="gemma")
    events = stream.start() + stream.feed(_chunk({"content": "Hel"}))
    body = {"error": {"message": "shutting down", "type": "server_error", "param": None, "code": "x_y"}}
    events.append(stream.error(body))
    ResponseErrorEvent.model_validate(events[-1])
    assert events[-1] == {
        "type": "error",
        "sequence_number": len(events) - 1,
        "code": "x_y",
        "message": "shutting down",
        "param": None,
    }
    judged(named_events(events), request, 200, {"content-type": "text/event-stream"})


def test_an_empty_answer_completes_without_items() -> None:
    stream = ResponseEvents(translate_request({"input": "hi"}).echo)
    events = stream.start() + stream.feed(_chunk({"role": "assistant", "content": ""}, "stop"))
    events += stream.finish({"prompt_tokens": 2, "completion_tokens": 0, "total_tokens": 2})
    check_events(events)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"] == []


NAMESPACE_TOOL = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "spawn_agent",
            "description": "Start a sub-agent.",
            "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
            "strict": False,
        },
        {"type": "custom", "name": "note", "description": "Free text."},
    ],
}
"""As Codex CLI 0.171.0 sends its multi-agent tools (openai-python's NamespaceTool), trimmed."""


def test_a_namespace_tool_becomes_one_chat_function_per_tool() -> None:
    translation = translate_request(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "go"},
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "spawn_agent",
                    "namespace": "multi_agent_v1",
                    "arguments": "{}",
                },
                {"type": "function_call_output", "call_id": "call_1", "output": "started"},
            ],
            "tools": [{"type": "function", "name": "spawn_agent"}, NAMESPACE_TOOL],
            "tool_choice": {"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"},
        }
    )
    chat = translation.chat
    names = [tool["function"]["name"] for tool in chat["tools"]]
    assert names == ["spawn_agent", "multi_agent_v1__spawn_agent", "multi_agent_v1__note"]
    assert chat["tools"][1]["function"]["parameters"] == NAMESPACE_TOOL["tools"][0]["parameters"]  # type: ignore[index]
    assert chat["tools"][1]["function"]["description"] == "Start a sub-agent."
    assert chat["messages"][1]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "multi_agent_v1__spawn_agent"}}
    assert translation.custom_tools == frozenset({"multi_agent_v1__note"})
    assert translation.echo["tools"][1] == NAMESPACE_TOOL


def test_a_choice_of_a_namespace_tool_by_its_own_name_forces_it() -> None:
    # ToolChoiceFunction has no namespace: a client forces a namespace's tool by its name alone (it was
    # the 400 "no function named 'note'"); a top-level function of that name is still the one named.
    forced = _chat(
        {"input": "go", "tools": [NAMESPACE_TOOL], "tool_choice": {"type": "function", "name": "note"}}
    )
    assert forced["tool_choice"] == {"type": "function", "function": {"name": "multi_agent_v1__note"}}
    both = [{"type": "function", "name": "note"}, NAMESPACE_TOOL]
    top = _chat({"input": "go", "tools": both, "tool_choice": {"type": "function", "name": "note"}})
    assert top["tool_choice"] == {"type": "function", "function": {"name": "note"}}
    twice = [NAMESPACE_TOOL, {**NAMESPACE_TOOL, "name": "other"}]
    with pytest.raises(TranslationError) as refused:
        _chat({"input": "go", "tools": twice, "tool_choice": {"type": "function", "name": "note"}})
    assert "more than one namespace ('multi_agent_v1', 'other')" in str(refused.value)


def test_a_call_to_a_namespace_tool_names_its_namespace() -> None:
    request = {"model": "m", "input": "hi", "tools": [NAMESPACE_TOOL]}
    translation = translate_request(request)
    message = {
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "multi_agent_v1__spawn_agent", "arguments": '{"task": "x"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "multi_agent_v1__note", "arguments": '{"input": "remember"}'},
            },
        ],
    }
    response = response_from_chat(
        _completion(message, "tool_calls"),
        translation.echo,
        custom_tools=translation.custom_tools,
        namespaced=translation.namespaced,
    )
    check_response(response)
    judged(json.dumps(response).encode(), request, 200, {"content-type": "application/json"})
    call, custom = response["output"]
    assert (call["type"], call["name"], call["namespace"]) == (
        "function_call",
        "spawn_agent",
        "multi_agent_v1",
    )
    assert (custom["type"], custom["name"], custom["namespace"]) == (
        "custom_tool_call",
        "note",
        "multi_agent_v1",
    )
    assert custom["input"] == "remember"


def test_a_streamed_call_to_a_namespace_tool_names_its_namespace() -> None:
    request = {"model": "m", "input": "hi", "stream": True, "tools": [NAMESPACE_TOOL]}
    translation = translate_request(request)
    stream = ResponseEvents(
        translation.echo,
        model="gemma",
        custom_tools=translation.custom_tools,
        namespaced=translation.namespaced,
    )
    events = stream.start()
    call = {"index": 0, "id": "call_1", "type": "function"}
    for chunk in [
        _chunk(
            {
                "tool_calls": [
                    {**call, "function": {"name": "multi_agent_v1__spawn_agent", "arguments": '{"t'}}
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ask": "x"}'}}]}),
        _chunk({}, "tool_calls"),
        {
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {"prompt_tokens": 4, "completion_tokens": 9},
        },
    ]:
        events += stream.feed(chunk)
    events += stream.finish()
    check_events(events)
    judged(named_events(events), request, 200, {"content-type": "text/event-stream"})
    items = [
        e["item"] for e in events if e["type"] in ("response.output_item.added", "response.output_item.done")
    ]
    assert [(i["name"], i["namespace"]) for i in items] == [("spawn_agent", "multi_agent_v1")] * 2
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["name"] == "spawn_agent"
    assert json.loads(events[-1]["response"]["output"][0]["arguments"]) == {"task": "x"}


def test_a_stream_cut_while_its_end_is_stored_ends_with_that_end() -> None:
    """The shutdown deadline during the store's write of a stream's end: the end made (numbered, the
    Response completed) is the stream's last words, not an ``error`` event numbered past it."""
    request = {"model": "gemma", "input": "hi", "stream": True}
    output = ResponsesOutput(translate_request(request), "gemma")
    body = output.opening([_chunk({"role": "assistant", "content": "Hi"}, "stop")])
    asyncio.run(output.tail(None, {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}))
    body += output.cut({"error": {"message": "shutting down", "type": "server_error"}})
    check_events(sse_events(body))
    judged(body, request, 200, {"content-type": "text/event-stream"})
    assert sse_events(body)[-1]["type"] == "response.completed"


@pytest.mark.parametrize(
    ("param", "renamed"),
    [
        ("max_tokens", "max_output_tokens"),
        ("messages[1].content", "input"),
        ("messages", "input"),
        ("response_format.json_schema.schema", "text.format.schema"),
        ("response_format.json_schema.name", "text.format.name"),
        ("response_format.json_schema", "text.format"),
        ("response_format.type", "text.format.type"),
        ("tools[3].function.name", "tools"),  # (without the translation's tools, the root)
        ("temperature", "temperature"),
        (None, None),
    ],
)
def test_an_error_about_the_chat_request_names_what_the_client_sent(
    param: str | None, renamed: str | None
) -> None:
    """A chat reading's 400 (the judge's schema, a backend's parse, the upstream) about the translated
    request named ``max_tokens`` where the client sent ``max_output_tokens``."""
    message = f"Invalid '{param}': integer above maximum value."
    if param == "messages":  # a message that quotes the nested parameter its param names the root of
        message = "Invalid 'messages[1].content': integer above maximum value."
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": "x"}}
    error = responses_error(body)["error"]
    assert error["param"] == renamed
    assert error["message"] == f"Invalid '{renamed}': integer above maximum value."
    assert (error["type"], error["code"]) == ("invalid_request_error", "x")


def test_an_error_about_a_translated_tool_names_the_tool_the_client_sent() -> None:
    """The chat request's ``tools[1].function.name`` was named ``tools`` (black-box testing): a
    namespace's tool and a web search shift the chat indexes, so each chat tool keeps its origin."""
    function = {"type": "function", "name": "ok", "parameters": {"type": "object"}}
    namespace = {
        "type": "namespace",
        "name": "fs",
        "tools": [{**function, "name": "read"}, {**function, "name": "write"}],
    }
    tools = [{"type": "web_search"}, namespace, {**function, "name": "bad name!"}]
    translation = translate_request({"model": "m", "input": "hi", "tools": tools})
    assert translation.tool_params == ("tools[0]", "tools[1].tools[0]", "tools[1].tools[1]", "tools[2]")
    for index, param in enumerate(translation.tool_params):
        chat = f"tools[{index}].function.name"
        body = {"error": {"message": f"Invalid value for '{chat}'.", "param": chat, "code": "invalid_value"}}
        error = translation.error(body)["error"]
        assert (error["param"], error["message"]) == (f"{param}.name", f"Invalid value for '{param}.name'.")


def test_a_namespaces_own_name_and_a_joined_name_too_long_are_named_as_what_they_are() -> None:
    """Black-box testing: a namespace named "bad ns" was blamed on one of its tools' names, and two
    valid names joined past 64 characters were told they break the pattern."""
    inner = {"type": "function", "name": "y", "parameters": {"type": "object"}}
    with pytest.raises(TranslationError) as refused:
        translate_request(
            {
                "model": "m",
                "input": "hi",
                "tools": [{"type": "namespace", "name": "bad ns", "tools": [inner]}],
            }
        )
    assert refused.value.param == "tools[0].name"
    long = {"type": "namespace", "name": "n" * 40, "tools": [{**inner, "name": "t" * 30}]}
    with pytest.raises(TranslationError) as refused:
        translate_request({"model": "m", "input": "hi", "tools": [long]})
    assert refused.value.param == "tools[0].tools[0].name"
    assert "64 characters at most" in refused.value.body["error"]["message"]
    assert refused.value.body["error"]["code"] == "string_above_max_length"


def test_an_output_of_no_call_in_the_conversation_is_refused() -> None:
    """OpenAI's 400 "No tool call found for function call output": a chat template would show an answer
    to nothing (the Open Responses suite's failed continuation sends one, and expects the error)."""
    output = {"type": "function_call_output", "call_id": "call_nowhere", "output": "18 C"}
    with pytest.raises(TranslationError) as refused:
        translate_request({"model": "m", "input": [{"role": "user", "content": "Weather?"}, output]})
    assert refused.value.param == "input[1].call_id"
    assert (
        "No tool call found for function call output with call_id" in refused.value.body["error"]["message"]
    )
    call = {"type": "function_call", "call_id": "call_nowhere", "name": "get_weather", "arguments": "{}"}
    chat = translate_request({"model": "m", "input": [{"role": "user", "content": "Weather?"}, call, output]})
    assert chat.chat["messages"][-1] == {"role": "tool", "tool_call_id": "call_nowhere", "content": "18 C"}
