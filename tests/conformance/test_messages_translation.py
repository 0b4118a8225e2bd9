"""The Messages front-end's translation, both ways: a Messages request as the chat request that serves
it, and chat output (a whole completion, a stream of chunks) as a Message and its stream events, checked
against what the Anthropic SDK builds from them (conformance/protocols/messages/, docs/messages.md)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from conformance.api_errors import APIError
from conformance.judge import judge_response
from conformance.protocols.messages.errors import messages_error, overflow_message
from conformance.protocols.messages.output import MessagesOutput
from conformance.protocols.messages.response import message_from_chat
from conformance.protocols.messages.serving import MessagesFrontEnd
from conformance.protocols.messages.translation import translate_request

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def request(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}], **extra}


def test_system_blocks_and_a_system_turn_become_the_first_system_message() -> None:
    body = request(
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        messages=[
            {"role": "user", "content": "Hi"},
            {"role": "system", "content": "Today is Monday."},
            {"role": "user", "content": [{"type": "text", "text": "Which day?"}]},
        ],
    )
    chat = translate_request(body).chat
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief.\n\nToday is Monday."},
        {"role": "user", "content": "Hi\n\nWhich day?"},
    ]


def test_a_tool_round_trip_becomes_chat_calls_and_tool_messages() -> None:
    body = request(
        tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I should call it.", "signature": "sig"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "18 C"}],
                    },
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
    )
    chat = translate_request(body).chat
    assert chat["tool_choice"] == "required"
    assert chat["parallel_tool_calls"] is False
    assert chat["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]
    assistant, result, user = chat["messages"][1:]
    assert assistant["content"] == "Checking."
    assert assistant["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert result == {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C"}
    assert user == {"role": "user", "content": "And tomorrow?"}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "low"),
        ({"thinking": {"type": "enabled", "budget_tokens": 8000}}, "medium"),
        ({"thinking": {"type": "enabled", "budget_tokens": 32000}}, "high"),
        ({"output_config": {"effort": "max"}}, "max"),
        ({"thinking": {"type": "adaptive"}}, None),
    ],
)
def test_thinking_becomes_reasoning_effort(given: dict[str, Any], expected: str | None) -> None:
    assert translate_request(request(**given)).chat.get("reasoning_effort") == expected


def test_settings_map_to_chat_names() -> None:
    chat = translate_request(
        request(
            stop_sequences=["END"],
            temperature=0.2,
            top_k=5,
            metadata={"user_id": "u1"},
            stream=True,
            output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}},
        )
    ).chat
    assert chat["stop"] == ["END"]
    assert chat["temperature"] == 0.2
    assert chat["top_k"] == 5
    assert chat["user"] == "u1"
    assert chat["stream_options"] == {"include_usage": True}
    assert chat["response_format"]["json_schema"]["schema"] == {"type": "object"}


def refusal(body: Any) -> tuple[int, dict[str, Any]]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(APIError) as caught:
        asyncio.run(MessagesFrontEnd().translate(raw))
    return caught.value.status, caught.value.body


def test_a_tool_use_without_its_tool_result_in_the_next_message_is_anthropics_400() -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}
    asked = {"role": "user", "content": "Weather in Paris?"}
    called = {"role": "assistant", "content": [use]}
    later = {"role": "user", "content": "Thanks."}
    for messages in ([asked, called, later], [asked, called, later, {"role": "user", "content": [result]}]):
        status, body = refusal({"model": "m", "max_tokens": 8, "messages": messages})
        assert status == 400
        assert body["error"]["message"] == (
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
            "toolu_1. Each `tool_use` block must have a corresponding `tool_result` block in the next "
            "message."
        )
    answered = [
        asked,
        called,
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": "18C."},
    ]
    assert translate_request({"model": "m", "max_tokens": 8, "messages": [*answered, later]}).chat


def test_a_tool_use_from_the_user_or_a_tool_result_from_the_model_is_anthropics_400() -> None:
    """A user's ``tool_use`` was dropped, and a model's ``tool_result`` sent as a tool message before its
    turn (found by black-box testing)."""
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}
    asked = {"role": "user", "content": "Weather?"}
    for messages, said in (
        (
            [asked, {"role": "user", "content": [use]}],
            "messages.1.content: `tool_use` blocks can only be in `assistant` messages.",
        ),
        (
            [asked, {"role": "assistant", "content": [use, result]}],
            "messages.1.content: `tool_result` blocks can only be in `user` messages.",
        ),
    ):
        status, body = refusal({"model": "m", "max_tokens": 8, "messages": messages})
        assert (status, body["error"]["message"]) == (400, said)


def test_results_after_other_blocks_and_repeated_call_ids_are_anthropics_400s() -> None:
    """Accepted before (found by review): text before the results put the user's words between a call and
    its answer, and a repeated ``tool_use`` id left results paired with the wrong call."""
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}
    asked = {"role": "user", "content": "Weather?"}
    text = {"type": "text", "text": "Here it is."}
    for messages, said in (
        (
            [asked, {"role": "assistant", "content": [use]}, {"role": "user", "content": [text, result]}],
            "messages.2: Did not find 1 `tool_result` block(s) at the beginning of this message. Messages "
            "following `tool_use` blocks must begin with a matching number of `tool_result` blocks.",
        ),
        (
            [asked, {"role": "assistant", "content": [text, use, use]}],
            "messages.1.content.2: `tool_use` ids must be unique",
        ),
        (
            [
                asked,
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [result]},
                {"role": "assistant", "content": [use]},
            ],
            "messages.3.content.0: `tool_use` ids must be unique",
        ),
    ):
        status, body = refusal({"model": "m", "max_tokens": 8, "messages": messages})
        assert (status, body["error"]["message"]) == (400, said)
    # Results first, then the user's words: as Claude Code sends a result with a note.
    fine = [asked, {"role": "assistant", "content": [use]}, {"role": "user", "content": [result, text]}]
    chat = translate_request({"model": "m", "max_tokens": 8, "messages": fine}).chat["messages"]
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "user"]


def test_a_conversation_ending_in_the_models_calls_is_anthropics_400() -> None:
    """llama-server refused it in its own words ("Cannot continue an assistant message that contains
    tool calls"; found by black-box testing)."""
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    messages = [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": [use]}]
    status, body = refusal({"model": "m", "max_tokens": 8, "messages": messages})
    assert (status, body["error"]["message"]) == (
        400,
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. "
        "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
    )


def test_consecutive_assistant_turns_are_one_turn() -> None:
    """Anthropic combines consecutive turns of one role; llama-server refused two assistant messages at
    the end ("Cannot have 2 or more assistant messages at the end of the list", black-box testing)."""
    messages = [
        {"role": "user", "content": "Count."},
        {"role": "assistant", "content": "One,"},
        {"role": "assistant", "content": [{"type": "text", "text": "two,"}]},
    ]
    chat = translate_request({"model": "m", "max_tokens": 8, "messages": messages}).chat["messages"]
    assert chat == [{"role": "user", "content": "Count."}, {"role": "assistant", "content": "One,\n\ntwo,"}]


@pytest.mark.parametrize(
    ("tool", "said"),
    [
        (
            {"name": "get weather!", "input_schema": {"type": "object"}},
            "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
        ),
        (
            {"name": "x" * 129, "input_schema": {"type": "object"}},
            "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
        ),
        (
            {"name": "w", "input_schema": {"type": "string"}},
            "tools.0.custom.input_schema.type: Input should be 'object'",
        ),
        (
            {"name": "w", "input_schema": {"properties": {}}},
            "tools.0.custom.input_schema.type: Input should be 'object'",
        ),
    ],
)
def test_a_custom_tools_name_and_schema_are_held_as_anthropic_holds_them(
    tool: dict[str, Any], said: str
) -> None:
    """Refused before in chat's words ("Invalid value for 'tools[0].function.name'.") or taken (a
    schema of a string; found by black-box testing)."""
    status, body = refusal(request(tools=[tool]))
    assert (status, body["error"]["message"]) == (400, said)


def test_two_tools_of_one_name_are_anthropics_400() -> None:
    tool = {"name": "web_search", "input_schema": {"type": "object"}}
    for tools in ([tool, tool], [{"type": "web_search_20250305", "name": "web_search"}, tool]):
        status, body = refusal(request(tools=tools))
        assert (status, body["error"]["message"]) == (400, "tools: Tool names must be unique.")
    assert translate_request(request(tools=[])).chat.get("tools") is None  # Anthropic takes an empty list


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"model": "m", "messages": [{"role": "user", "content": "Hi"}]}, "max_tokens: Field required"),
        (request(max_tokens="eight"), "max_tokens: Input should be an integer of at least 1"),
        (request(max_tokens=0), "max_tokens: Input should be greater than or equal to 1"),
        (request(temperature=3), "temperature: Input should be less than or equal to 1"),
        (request(messages=[]), "messages: List should have at least 1 item after validation"),
        (
            request(messages=[{"role": "wizard", "content": "Hi"}]),
            "messages.0.role: Input should be 'user' or 'assistant'",
        ),
        (
            request(
                messages=[
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]},
                ]
            ),
            "messages.1.content.0.id: Field required",
        ),
    ],
)
def test_schema_refusals_name_the_field_as_anthropic_does(body: Any, said: str) -> None:
    """A dotted path and pydantic's words, as Anthropic's 400s (``max_tokens: Field required``), not
    OpenAI's ``Missing required parameter: 'messages[1].content[0].id'.`` (found by review)."""
    status, error = refusal(body)
    assert (status, error["error"]["message"]) == (400, said)


THINKING = {"type": "enabled", "budget_tokens": 1024}
PREFILL = [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            request(messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}]),
            "messages: text content blocks must be non-empty",
        ),
        (
            request(messages=[{"role": "user", "content": ""}]),
            "messages.0: all messages must have non-empty content except for the optional final assistant "
            "message",
        ),
        (
            request(
                messages=[*PREFILL, {"role": "assistant", "content": []}, {"role": "user", "content": "?"}]
            ),
            "messages.1: all messages must have non-empty content except for the optional final assistant "
            "message",
        ),
        (
            request(messages=[*PREFILL, {"role": "assistant", "content": "The answer is "}]),
            "messages: final assistant content cannot end with trailing whitespace",
        ),
        (
            request(
                messages=[*PREFILL, {"role": "assistant", "content": [{"type": "text", "text": "So\n"}]}]
            ),
            "messages: final assistant content cannot end with trailing whitespace",
        ),
        (
            request(max_tokens=2048, thinking=THINKING, temperature=0.2),
            "`temperature` may only be set to 1 when thinking is enabled.",
        ),
        (
            request(
                max_tokens=2048,
                thinking={"type": "adaptive"},
                tools=[WEATHER],
                tool_choice={"type": "tool", "name": "get_weather"},
            ),
            "Thinking may not be enabled when tool_choice forces tool use.",
        ),
        (
            # A system message is taken where Claude Code puts one, among the turns; alone, it leaves
            # the model no turn to answer (it went on from the system prompt).
            request(messages=[{"role": "system", "content": "Be brief."}]),
            "messages.0.role: Input should be 'user' or 'assistant'",
        ),
    ],
)
def test_requests_anthropic_refuses_are_its_400s_in_its_words(body: Any, said: str) -> None:
    """Black-box testing found each served, where Anthropic answers a 400 (its words as its clients
    quote them in public reports): a client tried against this server would break on Anthropic's."""
    status, error = refusal(body)
    assert (status, error["error"]["message"]) == (400, said)


def test_what_anthropic_takes_beside_those_refusals_is_served() -> None:
    inner = [*PREFILL, {"role": "assistant", "content": "Sure. "}, {"role": "user", "content": "Go on."}]
    assert translate_request(request(messages=inner)).chat["messages"][1]["content"] == "Sure. "
    assert translate_request(request(messages=[*PREFILL, {"role": "assistant", "content": "The answer"}]))
    # An empty final assistant turn gives the answer no start (Anthropic takes it; reviewed, it was refused).
    empty = translate_request(request(messages=[*PREFILL, {"role": "assistant", "content": ""}]))
    assert empty.chat["messages"] == [{"role": "user", "content": "Hi"}]
    thinking = translate_request(request(max_tokens=2048, thinking=THINKING, temperature=1, tools=[WEATHER]))
    assert thinking.chat["temperature"] == 1


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_a_forced_choice_without_tools_is_anthropics_400(choice: dict[str, Any]) -> None:
    """Dropped with the tools it had none of, the choice left the model to answer text under a forced call
    (found by black-box testing); ``auto`` and ``none`` still go without tools."""
    base = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    status, body = refusal({**base, "tool_choice": choice})
    assert status == 400
    assert body["error"] == {
        "type": "invalid_request_error",
        "message": "tool_choice: `tool_choice` may only be specified while providing tools.",
    }
    for unforced in ("auto", "none"):
        assert "tool_choice" not in translate_request({**base, "tool_choice": {"type": unforced}}).chat


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b"{not json", "JSON"),
        (request(max_tokens="eight"), "max_tokens"),
        ({"model": "m", "messages": [{"role": "user", "content": "Hi"}]}, "max_tokens"),
        (request(temperature=3), "temperature"),
        (request(tools=[{"type": "bash_20250124", "name": "bash"}]), "bash_20250124"),
        (request(messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}]), "document"),
        (request(tool_choice={"type": "tool"}), "tool_choice"),
        # (chat's words before: "no function named 'get_time' was specified in 'tools'")
        (request(tools=[WEATHER], tool_choice={"type": "tool", "name": "get_time"}), "tool_choice.name: "),
    ],
)
def test_refusals_are_anthropic_400s_naming_the_parameter(body: Any, named: str) -> None:
    status, error = refusal(body)
    assert status == 400
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert named in error["error"]["message"]


def test_core_errors_name_the_messages_parameter_and_status() -> None:
    body = {"error": {"message": "'stop' must hold at most 4 strings", "type": "invalid_request_error"}}
    assert messages_error(body, 400)["error"]["message"] == "'stop_sequences' must hold at most 4 strings"
    assert messages_error({"error": {"message": "busy"}}, 503)["error"]["type"] == "overloaded_error"
    assert (
        messages_error({"error": {"message": "x", "code": "upstream_timeout"}})["error"]["type"]
        == "timeout_error"
    )
    # A content part refused by its chat type is named as the client's block (black-box testing: an image
    # to a text-only upstream was refused as "image_url").
    image = APIError.make(
        "Invalid content type. image_url is only supported by certain models; the upstream's model reads no "
        "images.",
        400,
        param="messages[2].content[1]",
    )
    assert messages_error(image.body, 400)["error"]["message"].startswith(
        "Invalid content type. image is only"
    )


def test_a_context_overflow_is_worded_as_anthropic_words_it() -> None:
    core = (
        "This model's maximum context length is 2048 tokens. However, your messages resulted in 5000 tokens."
    )
    assert overflow_message(core) == "prompt is too long: 5000 tokens > 2048 maximum"
    body = {"error": {"message": core, "code": "context_length_exceeded", "type": "invalid_request_error"}}
    assert messages_error(body, 400)["error"]["message"].startswith("prompt is too long")


def test_a_whole_completion_becomes_a_message() -> None:
    chat = {
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Checking.",
                    "reasoning_content": "Think.",
                    "tool_calls": [
                        {"id": "c", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 5}},
    }
    message = message_from_chat(chat, "alias")
    assert message["model"] == "alias"
    assert message["stop_reason"] == "tool_use"
    assert [block["type"] for block in message["content"]] == ["thinking", "text", "tool_use"]
    assert message["content"][2]["input"] == {"city": "Paris"}
    assert message["content"][2]["id"].startswith("toolu_")
    assert message["usage"] == {
        "input_tokens": 15,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 5,
        "output_tokens": 7,
    }


@pytest.mark.parametrize(
    ("arguments", "whole"),
    [
        ('{\n  "city": "Paris",\n  "days":', {"city": "Paris"}),
        ('{"city": "Par', {}),
        ('{"a": {"b": "x,y"}, "c": [1, 2', {"a": {"b": "x,y"}}),  # (a list cut inside: not shown shorter)
        ('{"a": [1, 2], "b": {"c": 1', {"a": [1, 2]}),
        ("", {}),
    ],
)
def test_a_call_cut_by_the_limit_is_the_last_block_with_its_whole_members(
    arguments: str, whole: dict[str, Any]
) -> None:
    """Anthropic keeps a ``tool_use`` the limit cut as the last block (its docs: retry with a higher
    ``max_tokens`` if it is one); streamed, its ``input_json_delta`` carried the text so far. Black-box
    testing found the whole answer left the block out: the two modes differed."""
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    chat = {"model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "length"}]}
    answer = message_from_chat(chat, None)
    assert answer["stop_reason"] == "max_tokens"
    (block,) = answer["content"]
    assert (block["type"], block["name"], block["input"]) == ("tool_use", "get_weather", whole)


def stream_of(chunks: list[dict[str, Any]], stops: tuple[str, ...] = (), prefill: str = "") -> bytes:
    output = MessagesOutput("m", stops, prefill)
    return output.opening(chunks[:1]) + output.events(chunks[1:]) + asyncio.run(output.tail(None, None))


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}]}


def test_a_stream_with_thinking_text_and_calls_is_judged_clean_and_read_by_the_sdk() -> None:
    anthropic = pytest.importorskip("anthropic")
    chunks = [
        chunk({"role": "assistant", "reasoning_content": "Think"}),
        chunk({"content": "Let me check."}),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "a", "function": {"name": "get_weather", "arguments": '{"ci'}}
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty":"Paris"}'}}]}),
        chunk(
            {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "get_weather", "arguments": "{}"}}]}
        ),
        chunk({}, "tool_calls"),
        {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 9}},
    ]
    body = stream_of(chunks)
    asked = {"path": "/v1/messages", "body": request(tools=[WEATHER], stream=True)}
    verdict = judge_response(body, request=asked, status=200, headers={"content-type": "text/event-stream"})
    errors = [f for f in verdict.findings if f.severity == "error"]
    # The second call's {} breaks the tool's schema (city is required): the core's rule says so.
    assert [f.rule for f in errors] == ["tool-arguments-schema"], verdict.findings
    message = _sdk_final_message(anthropic, body)
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert message.content[2].input == {"city": "Paris"}
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens == 9
    assert message.usage.input_tokens == 12


def test_a_stop_sequence_an_upstream_names_is_the_stop_reason() -> None:
    chunks = [chunk({"role": "assistant", "content": "1, 2"}), chunk({}, "stop", stop_reason="END")]
    events = [
        json.loads(line[6:])
        for line in stream_of(chunks, ("END",)).decode().splitlines()
        if line.startswith("data: ")
    ]
    delta = next(event for event in events if event["type"] == "message_delta")
    assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


def test_a_broken_stream_ends_with_an_error_event_the_sdk_raises() -> None:
    anthropic = pytest.importorskip("anthropic")
    output = MessagesOutput("m", ())
    body = output.opening([chunk({"role": "assistant", "content": "Hel"})])
    body += asyncio.run(
        output.tail({"error": {"message": "upstream went away", "code": "upstream_unavailable"}}, None)
    )
    assert b"event: error\ndata: " in body
    with pytest.raises(anthropic.APIStatusError) as caught:
        _sdk_final_message(anthropic, body)
    assert "overloaded_error" in str(caught.value)


def _sdk_final_message(anthropic: Any, body: bytes) -> Any:
    """What anthropic-python's ``messages.stream(...).get_final_message()`` makes of ``body`` (its HTTP
    client handed the bytes: the SDK's own SSE reading and accumulation run on them)."""
    httpx2 = pytest.importorskip("httpx2")

    def answer(_: Any) -> Any:
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})

    transport = httpx2.MockTransport(answer)
    client = anthropic.Anthropic(
        api_key="k", base_url="http://proxy.invalid", http_client=httpx2.Client(transport=transport)
    )
    with client.messages.stream(
        model="m", max_tokens=64, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        return stream.get_final_message()


def test_a_streamed_thinking_block_is_signed_as_its_whole_text_without_holding_it() -> None:
    from conformance.protocols.messages.events import MessageEvents
    from conformance.protocols.messages.response import signature

    pieces = ["Let me ", "ponder \U0001f914", " about \ud800 it."]  # an emoji and a lone surrogate
    events = MessageEvents("m")
    out = events.start()
    for piece in pieces:
        out += events.feed({"choices": [{"index": 0, "delta": {"reasoning_content": piece}}]})
    # The pieces are digested as they come: with the block still open, none of its text is kept.
    kept = [value for value in vars(events).values() if isinstance(value, (list, str))]
    assert not any("ponder" in str(value) for value in kept)
    out += events.feed({"choices": [{"index": 0, "delta": {"content": "Done."}}]})
    signed = [e["delta"]["signature"] for e in out if e.get("delta", {}).get("type") == "signature_delta"]
    assert signed == [signature("".join(pieces))]


def test_a_value_that_reads_like_a_chat_parameter_is_not_renamed() -> None:
    """The error names its parameter (``param``): only that is put in the Messages API's words; a role's
    allowed value ``'user'`` is no ``metadata.user_id``."""
    message = "Invalid value for 'messages[0].role': 'wizard'. Supported values are: 'user', 'assistant'."
    body = {"error": {"message": message, "param": "messages[0].role", "type": "invalid_request_error"}}
    assert messages_error(body, 400)["error"]["message"] == message
    named = {"error": {"message": "Invalid 'stop[1]': too long.", "param": "stop[1]"}}
    assert messages_error(named, 400)["error"]["message"] == "Invalid 'stop_sequences': too long."


PREFILLED = request(messages=[*PREFILL, {"role": "assistant", "content": "1, 2, 3, 4,"}])


@pytest.mark.parametrize(
    ("texts", "answered"),
    [
        (["1, 2, 3, 4, ", "5", ", 6"], " 5, 6"),  # written again first (llama-server --jinja), cut off
        (["1, 2,", " 3, 4, 5"], " 5"),  # over two chunks
        ([" 5", ", 6"], " 5, 6"),  # only the continuation: as it came
        (["1, 2, 9"], "1, 2, 9"),  # the prefill's start, then not: as it came
        (["1, 2"], "1, 2"),  # the prefill's start, then the end: held, then sent as it came
    ],
)
def test_an_answer_is_the_prefills_continuation_without_the_prefill(texts: list[str], answered: str) -> None:
    """Anthropic answers a final assistant turn with what follows it; llama-server with ``--jinja``
    writes the turn again first ("1, 2, 3, 4, 5, 6, 7" for "1, 2, 3, 4,"), which a client joining the
    prefill and the answer got twice (found by black-box testing). Streamed and whole alike."""
    prefill = translate_request(PREFILLED).prefill
    assert prefill == "1, 2, 3, 4,"
    chunks = [chunk({"role": "assistant"}), *(chunk({"content": text}) for text in texts), chunk({}, "stop")]
    events = [
        json.loads(line[6:])
        for line in stream_of(chunks, prefill=prefill).decode().splitlines()
        if line.startswith("data: ")
    ]
    deltas = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(deltas) == answered
    assert all(deltas)  # no empty delta for the text held
    message = {"role": "assistant", "content": "".join(texts)}
    whole = {"model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    assert message_from_chat(whole, None, (), prefill)["content"] == [{"type": "text", "text": answered}]


def test_a_turn_that_ends_with_the_users_has_no_prefill() -> None:
    assert translate_request(request()).prefill == ""
