"""The Responses API rules, each on a stream or body built for one condition: a well-formed one passes,
and each deviation is reported by its rule (spec facts: conformance/protocols/responses/stream_rules.py,
response_rules.py)."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.judge import judge_response

SSE = {"content-type": "text/event-stream"}
JSON = {"content-type": "application/json"}
MSG, FC = "msg_1", "fc_1"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
        "additionalProperties": False,
    },
}
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


def response(
    status: str = "completed", output: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    """A Response with every key OpenAI sends (openai-python's live snapshot of test_output_text)."""
    finished = status in ("completed", "incomplete")
    body = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1754925861,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": "gpt-4o-mini",
        "output": output or [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "usage": {
            "input_tokens": 5,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 2,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 7,
        }
        if finished
        else None,
        "metadata": {},
    }
    body.update(extra)
    return body


def message(text: str, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"id": MSG, "type": "message", "role": "assistant", "status": status, "content": [part]}


def function_call(arguments: str, name: str = "get_weather") -> dict[str, Any]:
    return {
        "id": FC,
        "type": "function_call",
        "status": "completed",
        "call_id": "call_1",
        "name": name,
        "arguments": arguments,
    }


def text_events(pieces: list[str], index: int = 0) -> list[dict[str, Any]]:
    text = "".join(pieces)
    item = message(text)
    part = item["content"][0]
    where = {"item_id": MSG, "output_index": index, "content_index": 0}
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
        *({"type": "response.output_text.delta", **where, "delta": p, "logprobs": []} for p in pieces),
        {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": part},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def call_events(pieces: list[str], index: int = 0, name: str = "get_weather") -> list[dict[str, Any]]:
    item = function_call("".join(pieces), name)
    where = {"item_id": FC, "output_index": index}
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "arguments": ""},
        },
        *({"type": "response.function_call_arguments.delta", **where, "delta": p} for p in pieces),
        {"type": "response.function_call_arguments.done", **where, "arguments": "".join(pieces)},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def events_for(
    items: list[dict[str, Any]], final: dict[str, Any], terminal: str = "response.completed"
) -> list[dict[str, Any]]:
    start = {**final, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    return [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
        *items,
        {"type": terminal, "response": final},
    ]


def text_stream(pieces: tuple[str, ...] = ("Hel", "lo"), **extra: Any) -> list[dict[str, Any]]:
    return events_for(text_events(list(pieces)), response(output=[message("".join(pieces))], **extra))


def encode(events: list[dict[str, Any]], *, number: bool = True, lines: bool = True) -> bytes:
    out = []
    for n, event in enumerate(events):
        event = {**event, "sequence_number": n} if number and "sequence_number" not in event else event
        line = f"event: {event.get('type')}\n" if lines else ""
        out.append(f"{line}data: {json.dumps(event)}\n\n")
    return "".join(out).encode()


def request(**body: Any) -> dict[str, Any]:
    return {"method": "POST", "path": "/v1/responses", "body": {"model": "m", "input": "Hi", **body}}


def judged(
    body: bytes,
    req: dict[str, Any] | None = None,
    status: int = 200,
    headers: dict[str, str] = SSE,
    intent: str | None = None,
) -> tuple[set[str], set[str]]:
    verdict = judge_response(body, request=req, status=status, headers=headers, intent=intent)
    return {f.rule for f in verdict.errors}, {f.rule for f in verdict.warnings}


def test_a_well_formed_text_stream_passes() -> None:
    assert judged(encode(text_stream()), request(stream=True)) == (set(), set())


def test_a_well_formed_stream_passes_without_a_request_and_is_inferred() -> None:
    verdict = judge_response(encode(text_stream()), request=None, status=200, headers=SSE)
    assert (verdict.endpoint, verdict.stream, verdict.findings) == ("responses", True, [])


def test_a_stream_without_event_lines_passes_too() -> None:
    assert judged(encode(text_stream(), lines=False)) == (set(), set())


def test_a_well_formed_function_call_stream_passes() -> None:
    call = ['{"loc', 'ation": "Paris"}']
    events = events_for(call_events(call), response(output=[function_call("".join(call))], tools=[WEATHER]))
    assert judged(encode(events), request(stream=True, tools=[WEATHER])) == (set(), set())


def mutate(
    change: Callable[[list[dict[str, Any]]], object], events: list[dict[str, Any]] | None = None
) -> bytes:
    events = copy.deepcopy(events or text_stream())
    for n, event in enumerate(events):
        event["sequence_number"] = n
    change(events)
    return encode(events, number=False)


def test_sequence_number_gap() -> None:
    def gap(events: list[dict[str, Any]]) -> None:
        for event in events[3:]:
            event["sequence_number"] += 1

    assert judged(mutate(gap)) == ({"responses-sequence-number"}, set())


def test_sequence_number_from_zero() -> None:
    def one_based(events: list[dict[str, Any]]) -> None:
        for event in events:
            event["sequence_number"] += 1

    assert judged(mutate(one_based)) == ({"responses-sequence-number"}, set())


def test_sequence_number_missing_is_a_required_key() -> None:
    body = mutate(lambda events: [event.pop("sequence_number") for event in events])
    assert judged(body) == ({"required-key"}, set())


def test_created_first() -> None:
    assert judged(mutate(lambda events: events.pop(0)))[0] == {
        "responses-created-first",
        "responses-sequence-number",
    }


def test_terminal_missing() -> None:
    assert judged(mutate(lambda events: events.pop()))[0] == {"responses-terminal-missing"}


def test_event_after_terminal() -> None:
    def late(events: list[dict[str, Any]]) -> None:
        events.append({**events[1], "sequence_number": len(events)})

    assert judged(mutate(late))[0] == {"responses-terminal-last"}


def test_two_terminal_events() -> None:
    def twice(events: list[dict[str, Any]]) -> None:
        events.append({**events[-1], "sequence_number": len(events)})

    assert judged(mutate(twice))[0] == {"responses-terminal-once"}


def test_done_sentinel_is_a_warning() -> None:
    assert judged(encode(text_stream()) + b"data: [DONE]\n\n") == (set(), {"responses-done-sentinel"})


def test_event_line_other_than_the_type() -> None:
    body = encode(text_stream()).replace(b"event: response.in_progress", b"event: message", 1)
    assert judged(body) == (set(), {"responses-event-line"})


def test_delta_for_an_item_never_added() -> None:
    def wrong_index(events: list[dict[str, Any]]) -> None:
        events[4]["output_index"] = 3

    # The lost delta also leaves the done text and item short of it.
    assert judged(mutate(wrong_index))[0] == {
        "responses-index-unknown",
        "responses-done-text",
        "responses-item-done-mismatch",
    }


def test_delta_for_a_part_never_added() -> None:
    def wrong_part(events: list[dict[str, Any]]) -> None:
        events[4]["content_index"] = 1

    assert judged(mutate(wrong_part))[0] == {
        "responses-index-unknown",
        "responses-done-text",
        "responses-item-done-mismatch",
    }


def test_item_id_other_than_the_added_one() -> None:
    def other_id(events: list[dict[str, Any]]) -> None:
        events[4]["item_id"] = "msg_2"

    assert judged(mutate(other_id))[0] == {"responses-item-id-mismatch"}


def test_output_index_out_of_order() -> None:
    def second(events: list[dict[str, Any]]) -> None:
        for event in events[2:-1]:
            event["output_index"] = 1

    assert "responses-output-index" in judged(mutate(second))[0]


def test_deltas_joined_differ_from_the_done_text() -> None:
    def lost(events: list[dict[str, Any]]) -> None:
        events[4]["delta"] = "Xel"

    errors = judged(mutate(lost))[0]
    assert errors == {"responses-done-text", "responses-item-done-mismatch"}


def test_argument_deltas_joined_differ_from_the_done_arguments() -> None:
    call = ['{"location": ', '"Paris"}']
    events = events_for(call_events(call), response(output=[function_call("".join(call))]))

    def lost(events: list[dict[str, Any]]) -> None:
        events[3]["delta"] = '{"location"'

    assert judged(mutate(lost, events))[0] == {"responses-done-text", "responses-item-done-mismatch"}


def test_terminal_output_other_than_the_items_done() -> None:
    def other(events: list[dict[str, Any]]) -> None:
        events[-1]["response"]["output"][0]["content"][0]["text"] = "Bye"

    assert judged(mutate(other))[0] == {"responses-output-mismatch"}


def test_item_not_done_before_the_terminal_event() -> None:
    def undone(events: list[dict[str, Any]]) -> None:
        del events[-2]
        for n, event in enumerate(events):
            event["sequence_number"] = n

    assert judged(mutate(undone))[0] == {"responses-item-not-done"}


def test_terminal_event_and_status_disagree() -> None:
    def disagree(events: list[dict[str, Any]]) -> None:
        events[-1]["type"] = "response.incomplete"

    assert judged(mutate(disagree))[0] == {"responses-terminal-status"}


def test_status_early() -> None:
    def early(events: list[dict[str, Any]]) -> None:
        events[0]["response"]["status"] = "completed"

    assert judged(mutate(early))[0] == {"responses-status-early"}


def test_usage_missing_on_completion() -> None:
    def none(events: list[dict[str, Any]]) -> None:
        events[-1]["response"]["usage"] = None

    assert judged(mutate(none))[0] == {"responses-usage-missing"}


def test_usage_arithmetic() -> None:
    def wrong(events: list[dict[str, Any]]) -> None:
        events[-1]["response"]["usage"]["total_tokens"] = 99

    assert judged(mutate(wrong))[0] == {"responses-usage-arithmetic"}


def test_limit_reached_but_completed() -> None:
    body = encode(text_stream())  # usage.output_tokens is 2
    # A limit below OpenAI's floor of 16, served: a warning (no client fails on it; issue 33).
    assert judged(body, request(max_output_tokens=2)) == (
        {"responses-limit-completed"},
        {"invalid-request-accepted"},
    )
    assert judged(body, request(max_output_tokens=16))[0] == set()


def test_limit_reached_and_incomplete() -> None:
    final = response(
        "incomplete",
        output=[message("Hello", "incomplete")],
        incomplete_details={"reason": "max_output_tokens"},
    )
    events = events_for(text_events(["Hel", "lo"]), final, "response.incomplete")
    events[-2]["item"] = final["output"][0]
    body = encode(events)
    assert judged(body, request(max_output_tokens=16), intent="finish-length") == (set(), set())


def test_incomplete_without_a_reason() -> None:
    final = response("incomplete", output=[message("Hello")])
    events = events_for(text_events(["Hel", "lo"]), final, "response.incomplete")
    assert judged(encode(events))[0] == {"responses-incomplete-reason"}


def test_finish_length_intent_wants_incomplete() -> None:
    body = encode(text_stream())  # completed, 2 output tokens
    assert judged(body, request(max_output_tokens=16), intent="finish-length")[0] == set()  # stopped early
    final = response(
        output=[message("Hello")], usage={**response()["usage"], "output_tokens": 16, "total_tokens": 21}
    )
    events = events_for(text_events(["Hel", "lo"]), final)
    errors = judged(encode(events), request(max_output_tokens=16), intent="finish-length")[0]
    assert errors == {"responses-limit-completed"}  # the intent's rule says it once, not again
    # Without usage at the limit the intent's own rule says it.
    events = events_for(text_events(["Hel", "lo"]), response(output=[message("Hello")], usage=None))
    errors = judged(encode(events), request(max_output_tokens=16), intent="finish-length")[0]
    assert "responses-incomplete-expected" in errors


def test_failed_stream_is_an_error_only_where_success_was_meant() -> None:
    final = response("failed", error={"code": "server_error", "message": "upstream went away"}, usage=None)
    events = events_for([], final, "response.failed")
    assert judged(encode(events)) == (set(), set())
    assert judged(encode(events), request(stream=True), intent="success")[0] == {"expected-success"}


def test_failed_without_an_error() -> None:
    events = events_for([], response("failed", usage=None), "response.failed")
    assert judged(encode(events))[0] == {"responses-failed-error"}


def test_error_event_ends_a_stream() -> None:
    events = [*text_stream()[:2], {"type": "error", "code": "server_error", "message": "boom", "param": None}]
    assert judged(encode(events)) == (set(), set())


def test_function_arguments_not_json() -> None:
    call = ['{"location": "Par']
    events = events_for(call_events(call), response(output=[function_call("".join(call))]))
    assert judged(encode(events), request(tools=[WEATHER]))[0] == {"responses-function-arguments"}


def test_function_arguments_against_the_tool_schema() -> None:
    call = ['{"city": "Paris"}']
    events = events_for(call_events(call), response(output=[function_call("".join(call))]))
    assert judged(encode(events), request(tools=[WEATHER]))[0] == {"responses-function-arguments"}
    assert judged(encode(events))[0] == set()  # no request: no schema to hold them to


def test_function_not_offered() -> None:
    call = ['{"location": "Paris"}']
    events = events_for(
        call_events(call, name="get_time"), response(output=[function_call(call[0], "get_time")])
    )
    assert judged(encode(events), request(tools=[WEATHER]))[0] == {"responses-function-unknown"}


def test_text_format_json_schema_output() -> None:
    fmt = {"format": {"type": "json_schema", "name": "answer", "schema": SCHEMA, "strict": True}}
    good = encode(text_stream(('{"answer": ', "42}")))
    bad = encode(text_stream(('{"answer": ', '"42"}')))
    prose = encode(text_stream(("The answer", " is 42")))
    assert judged(good, request(text=fmt))[0] == set()
    assert judged(bad, request(text=fmt))[0] == {"responses-output-schema"}
    assert judged(prose, request(text=fmt))[0] == {"responses-output-schema"}


def test_model_a_local_path() -> None:
    def path(events: list[dict[str, Any]]) -> None:
        events[-1]["response"]["model"] = "/models/gemma-3-270m.gguf"

    assert judged(mutate(path)) == (set(), {"model-is-local-path"})


def test_ids_and_their_prefixes() -> None:
    def prefixes(events: list[dict[str, Any]]) -> None:
        for event in events:
            if "response" in event:
                event["response"]["id"] = "chatcmpl-1"

    assert judged(mutate(prefixes)) == (set(), {"responses-id-prefix"})
    assert judged(mutate(lambda events: events[-1]["response"].update(id="resp_2")))[0] == {
        "responses-id-changed"
    }
    call = ['{"location": "Paris"}']
    item = {**function_call(call[0]), "call_id": ""}
    events = events_for(call_events(call), response(output=[item]))
    events[-2]["item"] = item
    assert judged(encode(events))[0] == {"responses-call-id-empty", "responses-item-done-mismatch"}


def test_schema_of_the_events() -> None:
    def no_logprobs(events: list[dict[str, Any]]) -> None:
        del events[4]["logprobs"]

    assert judged(mutate(no_logprobs))[0] == {"required-key"}
    assert judged(mutate(lambda events: events[-1]["response"].update(object="chat.completion")))[0] == {
        "object-value"
    }


def test_unknown_keys_are_warnings() -> None:
    body = mutate(lambda events: events[-1].update(timings={"predicted_n": 2}))
    assert judged(body) == (set(), {"unknown-field"})


def test_body_judged_by_the_same_rules() -> None:
    body = json.dumps(response(output=[message("Hi")])).encode()
    assert judged(body, request(), headers=JSON) == (set(), set())
    broken = json.dumps(response(output=[message("Hi")], usage=None, model="/m/x.gguf")).encode()
    assert judged(broken, request(), headers=JSON) == ({"responses-usage-missing"}, {"model-is-local-path"})
    assert judge_response(body, request=None, status=200, headers=JSON).endpoint == "responses"


def test_a_server_without_the_route_is_unsupported() -> None:
    body = b'{"detail":"Not Found"}'
    assert judged(body, request(), status=404, headers=JSON, intent="success") == (
        set(),
        {"feature-unsupported"},
    )


@pytest.mark.parametrize(
    "body",
    [
        {"input": "Hi", "max_output_tokens": "eight"},
        {"input": "Hi", "max_output_tokens": 8},
        {"input": "Hi", "temperature": 7},
        {"input": [{"type": "function_call_output", "output": "sunny"}]},
        {"input": "Hi", "text": {"format": {"type": "json_schema", "schema": SCHEMA}}},
    ],
)
def test_invalid_requests_are_refused(body: dict[str, Any]) -> None:
    req = {"method": "POST", "path": "/v1/responses", "body": {"model": "m", **body}}
    ok = json.dumps(response(output=[message("Hi")])).encode()
    errors, warnings = judged(ok, req, headers=JSON)
    # Only a limit below OpenAI's pedantic floor of 16 is a warning: no client fails on it.
    pedantic = body.get("max_output_tokens") == 8
    assert "invalid-request-accepted" in (warnings if pedantic else errors)
    refusal = json.dumps(
        {"error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}}
    )
    assert judged(refusal.encode(), req, status=400, headers=JSON) == (set(), set())


def test_asked_logprobs_are_on_the_text_with_at_most_the_alternatives_asked() -> None:
    req = request(include=["message.output_text.logprobs"], top_logprobs=1)
    entry = {"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}
    top = {"token": "Hi", "logprob": -0.1, "bytes": [72, 105]}

    def answer(logprobs: list[dict[str, Any]]) -> bytes:
        item = message("Hi")
        item["content"][0]["logprobs"] = logprobs
        return json.dumps(response(output=[item])).encode()

    assert judged(answer([{**entry, "top_logprobs": [top]}]), req, headers=JSON) == (set(), set())
    assert judged(answer([]), req, headers=JSON)[0] == {"responses-logprobs-missing"}
    assert judged(answer([{**entry, "top_logprobs": [top, top]}]), req, headers=JSON)[0] == {
        "logprobs-top-count"
    }
    # Not asked (top_logprobs alone does not ask): none is right.
    assert judged(answer([]), request(top_logprobs=1), headers=JSON) == (set(), set())


def test_an_output_that_names_its_tool_needs_no_call_id() -> None:
    """The spec makes ``call_id`` optional; Codex CLI sends outputs of its own (its goal) with ``name`` and
    ``namespace`` instead, and OpenAI answers them. Without either, the output belongs to nothing."""
    output = {"type": "function_call_output", "name": "goal_objective", "namespace": "agent", "output": "hi"}
    req = {"method": "POST", "path": "/v1/responses", "body": {"model": "m", "input": [output]}}
    ok = json.dumps(response(output=[message("Hi")])).encode()
    assert "invalid-request-accepted" not in judged(ok, req, headers=JSON)[0]


def test_refusal_and_reasoning_streams() -> None:
    refusal = {"type": "refusal", "refusal": "I can't."}
    item = {"id": MSG, "type": "message", "role": "assistant", "status": "completed", "content": [refusal]}
    where = {"item_id": MSG, "output_index": 1, "content_index": 0}
    summary = {"type": "summary_text", "text": "Thought."}
    thought = {"type": "reasoning_text", "text": "Hmm."}
    reasoning = {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [summary],
        "content": [thought],
        "status": "completed",
    }
    at = {"item_id": "rs_1", "output_index": 0}
    items = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**reasoning, "summary": [], "content": []},
        },
        {
            "type": "response.reasoning_summary_part.added",
            **at,
            "summary_index": 0,
            "part": {**summary, "text": ""},
        },
        {"type": "response.reasoning_summary_text.delta", **at, "summary_index": 0, "delta": "Thought."},
        {"type": "response.reasoning_summary_text.done", **at, "summary_index": 0, "text": "Thought."},
        {"type": "response.reasoning_summary_part.done", **at, "summary_index": 0, "part": summary},
        {"type": "response.content_part.added", **at, "content_index": 0, "part": {**thought, "text": ""}},
        {"type": "response.reasoning_text.delta", **at, "content_index": 0, "delta": "Hmm."},
        {"type": "response.reasoning_text.done", **at, "content_index": 0, "text": "Hmm."},
        {"type": "response.content_part.done", **at, "content_index": 0, "part": thought},
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        {"type": "response.output_item.added", "output_index": 1, "item": {**item, "content": []}},
        {"type": "response.content_part.added", **where, "part": {**refusal, "refusal": ""}},
        {"type": "response.refusal.delta", **where, "delta": "I can"},
        {"type": "response.refusal.delta", **where, "delta": "'t."},
        {"type": "response.refusal.done", **where, "refusal": "I can't."},
        {"type": "response.content_part.done", **where, "part": refusal},
        {"type": "response.output_item.done", "output_index": 1, "item": item},
    ]
    events = events_for(items, response(output=[reasoning, item]))
    assert judged(encode(events)) == (set(), set())
    events[16]["refusal"] = "I can."  # response.refusal.done
    assert judged(encode(events))[0] == {"responses-done-text"}
    events[16]["refusal"] = "I can't."
    events[5]["text"] = "Thought!"  # response.reasoning_summary_text.done
    assert judged(encode(events))[0] == {"responses-done-text"}


def test_error_bodies_are_openai_shaped() -> None:
    req = {"method": "POST", "path": "/v1/responses", "body": {"model": "m", "input": "Hi", "temperature": 7}}
    assert judged(b'{"detail": "temperature too high"}', req, status=400, headers=JSON)[0] == {
        "error-body-shape"
    }


def test_every_responses_rule_is_documented() -> None:
    root = Path(__file__).resolve().parents[2]
    source = "".join(
        (root / "conformance" / "protocols" / "responses" / f).read_text()
        for f in ("stream_rules.py", "response_rules.py")
    )
    rules = set(re.findall(r'"(responses-[a-z-]+)"', source))
    documented = (root / "docs" / "validate.md").read_text()
    assert len(rules) > 25
    assert {rule for rule in rules if f"`{rule}`" not in documented} == set()


def test_tool_choice_is_judged_on_a_response_as_on_chat() -> None:
    # Issue 33: tool_choice "required" answered with text alone passed on /v1/responses.
    text = text_stream(("It is", " sunny"))
    body = json.dumps(response(output=[message("It is sunny")])).encode()
    required = request(tools=[WEATHER], tool_choice="required")
    assert judged(encode(text), required)[0] == {"tool-choice-required-ignored"}
    assert judged(body, required, headers=JSON)[0] == {"tool-choice-required-ignored"}
    call = ['{"location": "Paris"}']
    called = events_for(call_events(call), response(output=[function_call(call[0])]))
    assert judged(encode(called), required)[0] == set()
    assert judged(encode(called), request(tools=[WEATHER], tool_choice="none"))[0] == {
        "tool-choice-none-called"
    }
    named = {"type": "function", "name": "get_time"}
    time = {**WEATHER, "name": "get_time"}
    other = request(tools=[WEATHER, time], tool_choice=named)
    assert judged(encode(called), other)[0] == {"tool-choice-named-ignored"}
    assert judged(encode(text), request(tools=[WEATHER]))[0] == set()  # auto: text is an answer
