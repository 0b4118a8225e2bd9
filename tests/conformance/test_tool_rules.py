"""Rules for what tools, structured outputs and reasoning mean (issue 20): each judged on transcripts that
break it and that pass it (tests/data/transcripts/tools, each with a .source.txt saying where it comes
from), and the same answer judged alike as a stream and as a body."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.judge import judge_response, judge_transcript
from conformance.live.probes import PROBES
from conformance.probe import ProbeContext
from conformance.protocols import recorded_request
from conformance.request import Request
from conformance.transcript import load_transcript
from tests.conformance.test_rules import FIRST, JSON, chat_chunk, chat_request, delta, judged, stream

DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts" / "tools"

# Each transcript with the errors and warnings it must give, and nothing else.
TRANSCRIPTS: dict[str, tuple[set[str], set[str]]] = {
    "tool-call-stream-pass.sse": (set(), set()),
    "tool-args-sent-twice.sse": ({"tool-arguments-json"}, set()),
    "tool-args-off-schema.sse": ({"tool-arguments-schema"}, set()),
    "tool-choice-required-text.sse": ({"tool-choice-required-ignored"}, set()),
    "tool-choice-none-called.sse": ({"tool-choice-none-called"}, set()),
    "tool-choice-named-other.sse": ({"tool-choice-named-ignored"}, set()),
    "tool-call-unknown-function.sse": ({"tool-call-unknown"}, set()),
    "parallel-off-two-calls.sse": ({"parallel-tool-calls-off"}, set()),
    "parallel-two-calls-pass.sse": (set(), set()),
    "finish-tool-calls-no-call.sse": ({"finish-tool-calls-without-calls"}, set()),
    "tool-call-in-content-hermes.sse": ({"tool-call-in-content"}, set()),
    "tool-call-in-content-mistral.sse": ({"tool-call-in-content"}, set()),
    # One per syntax of conformance/tool_formats/catalog.py (tests/support/tool_syntax_samples.py).
    "tool-call-in-content-qwen-xml.sse": ({"tool-call-in-content"}, set()),
    "tool-call-in-content-glm.sse": ({"tool-call-in-content"}, set()),
    "tool-call-in-content-granite.sse": ({"tool-call-in-content"}, set()),
    "tool-call-in-content-deepseek.sse": ({"tool-call-in-content"}, set()),
    "tool-call-in-content-kimi.sse": ({"tool-call-in-content"}, set()),
    # The analysis message before the call ends with harmony's <|end|>, a turn marker left in the text.
    "tool-call-in-content-harmony.sse": ({"tool-call-in-content"}, {"template-token-in-content"}),
    "tool-call-in-content-gemma.sse": ({"tool-call-in-content"}, set()),
    "tool-call-in-content-llama3.sse": ({"tool-call-in-content"}, set()),
    "tool-markup-in-content-no-tools.sse": (set(), {"tool-markup-in-content"}),
    "tool-round-trip-pass.sse": (set(), set()),
    "json-object-fenced.sse": ({"json-object-invalid"}, set()),
    "json-schema-missing-keys.sse": ({"json-schema-invalid"}, set()),
    "json-schema-stream-pass.sse": (set(), set()),
    "reasoning-under-reasoning.sse": (set(), {"reasoning-field-name"}),
    "reasoning-content-pass.sse": (set(), set()),
    "llama-cpp-python-named-stream.sse": (
        {"tool-call-name-repeated", "tool-call-id-repeated"},
        {"delta-null-field"},  # a null legacy function_call: openai-python types it optional
    ),
    # Warnings: the model's file path, refusal left out (read as null), ChatML's <|im_end|> in the text.
    "llama-server-tool-choice-named.sse": (
        {"tool-choice-named-ignored"},
        {"model-is-local-path", "required-key", "unknown-field", "template-token-in-content"},
    ),
    # Its <|im_end|> comes as text in pieces (`<`, `|`, `im`...): found in the content joined.
    "llama-server-tool-choice-named-stream.sse": (
        {"tool-choice-named-ignored"},
        {
            "model-is-local-path",
            "created-changed",
            "content-null-then-text",
            "unknown-field",
            "template-token-in-content",
        },
    ),
    "llama-cpp-python-control-character.sse": ({"tool-arguments-json"}, {"required-key"}),
    "llama-cpp-python-control-character-stream.sse": (
        {"tool-arguments-json", "tool-call-name-repeated", "tool-call-id-repeated"},
        {"delta-null-field"},
    ),
}


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_transcript_breaks_exactly_its_rules(name: str) -> None:
    verdict = judge_transcript(load_transcript(DATA / name))
    errors, warnings = TRANSCRIPTS[name]
    assert ({f.rule for f in verdict.errors}, {f.rule for f in verdict.warnings}) == (errors, warnings)


def test_every_tool_transcript_has_a_row_and_a_source() -> None:
    assert {p.name for p in DATA.glob("*.sse")} == set(TRANSCRIPTS)
    assert all((DATA / name).with_suffix(".source.txt").is_file() for name in TRANSCRIPTS)


# --- the same answer as a stream and as a body ---

WEATHER_REQUEST = next(p for p in PROBES if p.name == "tool-choice-named").request(ProbeContext("m"))


def _request(**extra: Any) -> dict[str, Any]:
    body = {**WEATHER_REQUEST.body, **extra}
    return {"method": "POST", "path": "/v1/chat/completions", "body": body}


def _call_stream(arguments: list[str], name: str = "get_weather", finish: str = "tool_calls") -> bytes:
    opening = {"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": ""}}
    first = chat_chunk([delta(role="assistant", tool_calls=[opening])])
    parts = [chat_chunk([delta(tool_calls=[{"index": 0, "function": {"arguments": a}}])]) for a in arguments]
    return stream(first, *parts, chat_chunk([delta(finish=finish)]))


def _call_body(arguments: list[str], name: str = "get_weather", finish: str = "tool_calls") -> bytes:
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": "".join(arguments)}}
    message = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [call]}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    return json.dumps(
        {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
    ).encode()


def both(
    arguments: list[str], name: str = "get_weather", finish: str = "tool_calls", **asked: Any
) -> list[Any]:
    streamed = judged(_call_stream(arguments, name, finish), _request(stream=True, **asked))
    body = judged(_call_body(arguments, name, finish), _request(**asked), headers=JSON)
    return [streamed, body]


def test_arguments_joined_over_a_stream_are_judged_as_the_body_is() -> None:
    assert both(['{"city": ', '"Paris", "unit": "celsius"}']) == [(set(), set())] * 2
    assert both(['{"city": "Paris"', "}"]) == [({"tool-arguments-schema"}, set())] * 2  # unit required
    assert both(['{"city": "Paris",', ' "unit": "celsius"}{}']) == [({"tool-arguments-json"}, set())] * 2
    assert both(["[1, 2]"]) == [({"tool-arguments-json"}, set())] * 2


def test_arguments_cut_by_the_token_limit_are_not_judged() -> None:
    cut = both(['{"city": "Pa'], finish="length")
    assert cut == [(set(), set())] * 2  # OpenAI ends a call its limit cut with 'length' too
    assert (
        both(['{"city": "Paris", "unit": "celsius"}'], finish="stop")
        == [(set(), {"tool-calls-finish-reason"})] * 2
    )  # Q64: calls made, and 'stop'


def test_a_body_call_with_an_empty_id_is_an_id_missing() -> None:
    body = json.loads(_call_body(['{"city": "Paris", "unit": "celsius"}']))
    body["choices"][0]["message"]["tool_calls"][0]["id"] = ""
    assert judged(json.dumps(body).encode(), _request(), headers=JSON) == ({"tool-call-id-missing"}, set())


def test_arguments_sent_as_an_object_are_the_schema_finding_alone() -> None:
    # Issue 33: "arguments ... not one JSON object: ''" for arguments sent as an object, besides the
    # schema's "must be string": one fact, said once.
    body = json.loads(_call_body(["{}"]))
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
    verdict = judge_response(json.dumps(body).encode(), request=_request(), status=200, headers=JSON)
    assert [(f.rule, f.pointer) for f in verdict.errors] == [
        ("schema", "/choices/0/message/tool_calls/0/function/arguments")
    ]
    streamed = json.loads(json.dumps(body))  # the same call as one stream fragment
    call = streamed["choices"][0]["message"]["tool_calls"][0]
    first = chat_chunk([delta(role="assistant", tool_calls=[{**call, "index": 0}])])
    errors, _ = judged(stream(first, chat_chunk([delta(finish="tool_calls")])), _request(stream=True))
    assert errors == {"schema"}


PARALLEL = DATA / "parallel-two-calls-pass.sse"


@pytest.mark.parametrize("calls", [2, 1])
def test_the_parallel_probe_cut_by_its_limit_after_its_calls_is_not_warned(
    calls: int, tmp_path: Path
) -> None:
    # The parallel-tool-calls probe's answer (intent two-calls) run on to max_tokens after its calls, or
    # cut before the second: finish 'length', no usage to say more. Neither is a deviation.
    events = PARALLEL.read_bytes().split(b"\n\n")
    if calls == 1:
        events = [e for e in events if b'"index": 1' not in e]
    (tmp_path / "cut.sse").write_bytes(b"\n\n".join(events).replace(b'"tool_calls"}]}', b'"length"}]}'))
    (tmp_path / "cut.json").write_text(PARALLEL.with_suffix(".json").read_text())
    verdict = judge_transcript(load_transcript(tmp_path / "cut.sse"))
    assert (verdict.errors, verdict.warnings) == ([], [])


def test_a_choice_cut_off_by_its_limit_is_judged_once_it_shows_text() -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    text = _request(stream=True, tool_choice=named)
    answer = [
        chat_chunk([delta(role="assistant", content="What is the weather")]),
        chat_chunk([delta(finish="length")]),
    ]
    assert judged(stream(*answer), text) == ({"tool-choice-named-ignored"}, set())
    required = _request(stream=True, tool_choice="required")
    assert judged(stream(*answer), required) == ({"tool-choice-required-ignored"}, set())
    nothing = [chat_chunk([delta(role="assistant", content="")]), chat_chunk([delta(finish="length")])]
    assert judged(stream(*nothing), required) == ({"text-lost"}, set())  # no output: only Q14's rule
    for opening in ("<tool_", '{"tool_call": {"name": "get_ti', "[TOOL_CALLS][", "  <tool_call>\n{"):
        # A call written out and cut off before the server parsed it (the bundled backend's formats).
        cut_open = [
            chat_chunk([delta(role="assistant", content=opening)]),
            chat_chunk([delta(finish="length")]),
        ]
        assert judged(stream(*cut_open), required) == (set(), set())
    cut_call = both(['{"city": "Pa'], finish="length", tool_choice=named)  # the name came first
    assert cut_call == [({"tool-choice-named-ignored"}, set())] * 2


def test_tool_choice_as_the_request_set_it() -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    assert both(['{"city": "Paris"}'], "get_time", tool_choice=named) == [(set(), set())] * 2
    weather = ['{"city": "Paris", "unit": "celsius"}']
    assert both(weather, tool_choice=named) == [({"tool-choice-named-ignored"}, set())] * 2
    assert both(weather, tool_choice="none") == [({"tool-choice-none-called"}, set())] * 2
    assert both(weather, tool_choice="auto") == [(set(), set())] * 2


def _allowed(mode: str, *names: str) -> dict[str, Any]:
    tools = [{"type": "function", "function": {"name": name}} for name in names]
    return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": tools}}


def test_an_allowed_tools_choice_is_judged_by_its_list_and_its_mode() -> None:
    weather = ['{"city": "Paris", "unit": "celsius"}']
    assert both(weather, tool_choice=_allowed("auto", "get_weather")) == [(set(), set())] * 2
    outside_auto = both(weather, tool_choice=_allowed("auto", "get_time"))
    assert outside_auto == [({"tool-choice-allowed-ignored"}, set())] * 2
    outside = both(weather, tool_choice=_allowed("required", "get_time"))
    assert outside == [({"tool-choice-allowed-ignored"}, set())] * 2
    required = _request(stream=True, tool_choice=_allowed("required", "get_time"))
    text = stream(chat_chunk([delta(role="assistant", content="Sunny.")]), chat_chunk([delta(finish="stop")]))
    assert judged(text, required) == ({"tool-choice-required-ignored"}, set())


def test_request_reads_an_allowed_tools_choice_in_either_api() -> None:
    chat = recorded_request(_request(tool_choice=_allowed("required", "get_time")))
    assert (chat.tool_choice_mode, chat.tool_choice_allowed) == ("required", ("get_time",))
    flat = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_time"}]}
    responses = recorded_request(_request(tool_choice=flat))
    assert (responses.tool_choice_mode, responses.tool_choice_allowed) == ("auto", ("get_time",))
    odd = recorded_request(_request(tool_choice={"type": "allowed_tools", "mode": "sometimes"}))
    assert (odd.tool_choice_mode, odd.tool_choice_allowed) == (None, None)


def test_tool_call_rules_quiet_without_a_request_except_for_whole_arguments() -> None:
    assert judged(_call_stream(['{"a": 1}'])) == (set(), set())
    assert judged(_call_stream(['{"a": 1}{'])) == ({"tool-arguments-json"}, set())


def test_request_reads_tools_choice_and_formats() -> None:
    request = recorded_request(_request(tool_choice={"type": "function", "function": {"name": "get_time"}}))
    assert (request.tool_choice_mode, request.tool_choice_function) == ("function", "get_time")
    assert set(request.tool_schemas) == {"get_time", "get_weather"}
    assert Request.from_body("chat", {"messages": []}).tool_choice_mode is None
    assert recorded_request(_request(tool_choice=None)).tool_choice_mode == "auto"
    schema = {"type": "object"}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    request = Request.from_body("chat", {"response_format": fmt, "parallel_tool_calls": False})
    assert (request.response_format_type, request.output_schema, request.parallel_tool_calls) == (
        "json_schema",
        schema,
        False,
    )


def test_harmony_text_that_holds_no_call_is_no_call_in_content() -> None:
    """gpt-oss's harmony markup left in the content opens any message: a final answer written so is a
    leaked template (its ``<|end|>`` a template token), not a call; one that addresses a function is."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    request = chat_request(tools=tools)
    end = chat_chunk([delta(finish="stop")])
    answer = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi."
    errors, _ = judged(stream(FIRST, chat_chunk([delta(answer)]), end), request)
    assert "tool-call-in-content" not in errors
    call = (
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
    )
    errors, _ = judged(stream(FIRST, chat_chunk([delta(call)]), end), request)
    assert "tool-call-in-content" in errors
