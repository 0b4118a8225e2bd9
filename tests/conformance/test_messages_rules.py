"""The Messages API rules, each on a stream or body built for one condition: Anthropic's own example
stream passes, and each deviation is reported by its rule (facts: conformance/protocols/messages/
stream_rules.py, message_rules.py)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from conformance.judge import judge_response

SSE = {"content-type": "text/event-stream"}
JSON = {"content-type": "application/json"}
WEATHER = {
    "name": "get_weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
USAGE = {
    "input_tokens": 25,
    "output_tokens": 1,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}


def start(**usage: int) -> dict[str, Any]:
    message = {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-5",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**USAGE, **usage},
    }
    return {"type": "message_start", "message": message}


def text_stream(reason: str = "end_turn", output_tokens: int = 15) -> list[dict[str, Any]]:
    """The basic streaming example of Anthropic's "Streaming Messages" guide (its event sequence)."""
    return [
        start(),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]


def tool_stream(partial: str = '{"city": "Paris"}', reason: str = "tool_use") -> list[dict[str, Any]]:
    block = {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather", "input": {}}
    return [
        start(),
        {"type": "content_block_start", "index": 0, "content_block": block},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": partial},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": None},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]


def encode(events: list[dict[str, Any]], *, named: bool = True) -> bytes:
    out = b""
    for event in events:
        line = f"event: {event.get('type', 'error')}\n".encode() if named else b""
        out += line + b"data: " + json.dumps(event).encode() + b"\n\n"
    return out


def body_of(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}], **extra}


def judged(
    body: bytes, asked: dict[str, Any] | None, status: int = 200, intent: str | None = "success"
) -> dict[str, list[str]]:
    stream = asked is None or asked.get("stream") is True
    request = {"path": "/v1/messages", "body": asked} if asked is not None else None
    verdict = judge_response(
        body, request=request, status=status, headers=SSE if stream and status == 200 else JSON, intent=intent
    )
    out: dict[str, list[str]] = {"error": [], "warning": []}
    for finding in verdict.findings:
        out.setdefault(str(finding.severity), []).append(finding.rule)
    return out


def errors_of(events: list[dict[str, Any]], **extra: Any) -> list[str]:
    return judged(encode(events), body_of(stream=True, **extra))["error"]


def test_anthropics_example_stream_passes() -> None:
    assert judged(encode(text_stream()), body_of(stream=True)) == {"error": [], "warning": []}


def test_a_bare_recording_is_read_as_messages_by_its_event_names() -> None:
    verdict = judge_response(encode(text_stream()), request=None, status=200, headers=SSE)
    assert verdict.endpoint == "messages"
    assert not verdict.findings


def test_a_tool_stream_passes_and_bad_input_json_is_reported() -> None:
    assert errors_of(tool_stream(), tools=[WEATHER]) == []
    assert "tool-arguments-json" in errors_of(tool_stream('{"city": '), tools=[WEATHER])
    assert "tool-arguments-schema" in errors_of(tool_stream("{}"), tools=[WEATHER])


def test_events_without_their_event_line_are_lost_to_the_sdk() -> None:
    found = judged(encode(text_stream(), named=False), body_of(stream=True))
    assert found["error"] == ["messages-event-line-missing"]


def test_an_event_line_naming_another_type() -> None:
    raw = encode(text_stream()).replace(b"event: ping", b"event: message_stop", 1)
    assert judged(raw, body_of(stream=True))["error"] == ["messages-event-line"]


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (lambda e: e.pop(0), "messages-start-first"),
        (lambda e: e.__setitem__(1, {**e[1], "index": 1}), "messages-block-index"),
        (lambda e: e[3]["delta"].update(type="input_json_delta", partial_json="x"), "messages-delta-type"),
        (lambda e: e.pop(5), "messages-block-not-stopped"),
        (lambda e: e.pop(6), "messages-delta-missing"),
        (lambda e: e.pop(7), "messages-stop-missing"),
        (lambda e: e.append({"type": "content_block_stop", "index": 0}), "messages-event-after-end"),
        (lambda e: e[0]["message"].update(id=""), "messages-id-empty"),
        (lambda e: e[0]["message"].update(content=[{"type": "text", "text": "x"}]), "messages-start-content"),
        (lambda e: e[6]["delta"].update(stop_reason="tool_use"), "messages-tool-use-without-calls"),
        (
            lambda e: e[6]["delta"].update(stop_reason="stop_sequence", stop_sequence="zzz"),
            "messages-stop-sequence",
        ),
        (lambda e: e[6]["usage"].update(output_tokens=65), "messages-usage-over-limit"),
        (lambda e: e[6]["delta"].update(stop_reason="finished"), "schema"),
    ],
)
def test_each_deviation_is_reported_by_its_rule(change: Any, rule: str) -> None:
    events = copy.deepcopy(text_stream())
    change(events)
    found = errors_of(events)
    assert rule in found, found


def test_a_prompt_counted_only_at_the_end_is_a_warning_q88() -> None:
    # LiteLLM's and CLIProxyAPI's streams: message_start says 0, message_delta has the count.
    late = text_stream()
    late[0] = start(input_tokens=0)
    late[-2] = {**late[-2], "usage": {"input_tokens": 25, "output_tokens": 15}}
    found = judged(encode(late), body_of(stream=True))
    assert found == {"error": [], "warning": ["messages-start-input-tokens"]}
    counted = [start(), *late[1:]]  # counted at the start and again at the end: as Anthropic's
    assert judged(encode(counted), body_of(stream=True)) == {"error": [], "warning": []}
    cached = [start(input_tokens=0, cache_read_input_tokens=25), *late[1:]]  # all of it read from a cache
    assert judged(encode(cached), body_of(stream=True)) == {"error": [], "warning": []}


def test_a_stop_sequence_named_with_end_turn_is_an_error_q89() -> None:
    stopped = text_stream()
    stopped[-2] = {**stopped[-2], "delta": {"stop_reason": "end_turn", "stop_sequence": "!"}}
    assert errors_of(stopped, stop_sequences=["!"]) == ["messages-stop-sequence-reason"]
    stopped[-2] = {**stopped[-2], "delta": {"stop_reason": "stop_sequence", "stop_sequence": "!"}}
    assert errors_of(stopped, stop_sequences=["!"]) == []


def test_calls_that_stop_end_turn_are_not_run_by_agents() -> None:
    assert "messages-calls-not-tool-use" in errors_of(tool_stream(reason="end_turn"), tools=[WEATHER])


def test_tool_choice_any_without_a_call_is_reported_by_the_core_rule() -> None:
    assert "tool-choice-required-ignored" in errors_of(
        text_stream(), tools=[WEATHER], tool_choice={"type": "any"}
    )
    found = errors_of(text_stream(), tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"})
    assert "tool-choice-named-ignored" in found


def test_the_limit_reached_says_max_tokens() -> None:
    limit = body_of(stream=True, max_tokens=15)
    assert judged(encode(text_stream()), limit)["error"] == ["messages-limit-end-turn"]
    assert judged(encode(text_stream("max_tokens")), limit, intent="finish-length")["error"] == []
    found = judged(encode(text_stream("end_turn")), limit, intent="finish-length")["error"]
    assert "messages-max-tokens-expected" in found


def test_an_error_event_is_anthropics_and_fails_a_stream_meant_to_succeed() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    events = [*text_stream()[:4], error]
    assert judged(encode(events), body_of(stream=True))["error"] == ["expected-success"]
    openai_shaped = {"error": {"message": "boom", "type": "server_error"}}
    found = judged(encode([*text_stream()[:4], openai_shaped]), body_of(stream=True))["error"]
    assert "messages-stop-missing" in found


def test_a_message_body_passes_and_its_deviations_are_reported() -> None:
    message = {
        **start()["message"],
        "content": [{"type": "text", "text": "Hi!"}],
        "stop_reason": "end_turn",
        "usage": USAGE,
    }
    assert judged(json.dumps(message).encode(), body_of()) == {"error": [], "warning": []}
    broken = {**message, "stop_reason": "tool_use", "id": "chatcmpl-1"}
    found = judged(json.dumps(broken).encode(), body_of())
    assert found == {"error": ["messages-tool-use-without-calls"], "warning": ["messages-id-prefix"]}


def test_error_bodies_are_anthropics_shape_with_a_fitting_type() -> None:
    good = {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: bad"}}
    assert judged(json.dumps(good).encode(), body_of(max_tokens="x"), 400, None) == {
        "error": [],
        "warning": [],
    }
    openai_shaped = {
        "error": {"message": "bad", "type": "invalid_request_error", "code": None, "param": None}
    }
    assert judged(json.dumps(openai_shaped).encode(), body_of(max_tokens="x"), 400, None)["error"]
    wrong_type = {"type": "error", "error": {"type": "api_error", "message": "bad"}}
    assert judged(json.dumps(wrong_type).encode(), body_of(max_tokens="x"), 400, None)["warning"] == [
        "messages-error-type"
    ]


def test_a_context_overflow_must_say_prompt_is_too_long() -> None:
    words = {"type": "error", "error": {"type": "invalid_request_error", "message": "context size exceeded"}}
    found = judged(json.dumps(words).encode(), body_of(), 400, "context-overflow")
    assert found["error"] == ["messages-overflow-words"]
    good = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long: 9 > 2"},
    }
    assert judged(json.dumps(good).encode(), body_of(), 400, "context-overflow")["error"] == []


def test_a_server_without_the_route_does_not_support_it() -> None:
    found = judged(b'{"detail":"Not Found"}', body_of(), 404)
    assert found == {"error": [], "warning": ["feature-unsupported"]}


def test_every_messages_rule_is_documented() -> None:
    root = Path(__file__).resolve().parents[2]
    source = "".join(
        (root / "conformance" / "protocols" / "messages" / f).read_text()
        for f in ("stream_rules.py", "message_rules.py")
    )
    rules = set(re.findall(r'"(messages-[a-z-]+)"', source))
    documented = (root / "docs" / "validate.md").read_text()
    assert len(rules) > 20
    assert {rule for rule in rules if f"`{rule}`" not in documented} == set()
