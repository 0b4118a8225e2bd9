"""Findings on real recordings say what the client sees, where it is (the hand review of
tests/data/batteries/): a Messages or Responses answer worded in its own protocol, a stream's key at the
event that carries it, a cut value shown as cut, a count at the event it was read from."""

from __future__ import annotations

from pathlib import Path

from conformance.commands.validate import validate_paths
from conformance.findings import Finding
from conformance.judge import _context_for, _judge_answer
from conformance.rules.context import clipped
from conformance.transcript import load_transcript

BATTERIES = Path(__file__).resolve().parents[1] / "data" / "batteries"
LLAMA_SERVER = BATTERIES / "llama-server-b11434"
IK = BATTERIES / "ik_llama.cpp-540a265"
LLAMA_CPP_PYTHON = BATTERIES / "llama-cpp-python"


def finding(path: Path, rule: str) -> Finding:
    (verdict,) = validate_paths([str(path)])
    return next(f for f in [*verdict.errors, *verdict.warnings] if f.rule == rule)


def test_a_messages_tool_choice_any_is_worded_as_anthropic() -> None:
    f = finding(LLAMA_SERVER / "messages-tool-any.json", "tool-choice-required-ignored")
    assert f.message == "tool_choice type 'any' asks for at least one tool_use block; the message made none"
    assert f.pointer == "/content"


def test_a_messages_stream_named_tool_choice_has_no_chat_pointer() -> None:
    f = finding(LLAMA_SERVER / "messages-tool-use.json", "tool-choice-named-ignored")
    assert f.message == "tool_choice names 'get_weather'; the message made no tool_use block"
    assert f.pointer is None


def test_a_responses_named_tool_choice_points_at_the_output() -> None:
    f = finding(LLAMA_SERVER / "responses-tool-call.json", "tool-choice-named-ignored")
    assert f.message == "tool_choice names 'get_weather'; the response made no function_call item"
    assert (f.event, f.pointer) == (71, "/response/output")


def test_a_messages_streams_model_and_id_are_at_message_start() -> None:
    path = LLAMA_SERVER / "messages-stream.json"
    assert (finding(path, "model-is-local-path").event, finding(path, "model-is-local-path").pointer) == (
        0,
        "/message/model",
    )
    assert (finding(path, "messages-id-prefix").event, finding(path, "messages-id-prefix").pointer) == (
        0,
        "/message/id",
    )


def test_a_responses_streams_model_is_under_response() -> None:
    f = finding(LLAMA_SERVER / "responses-stream.json", "model-is-local-path")
    assert (f.event, f.pointer) == (23, "/response/model")


def test_a_cut_id_or_model_shows_it_was_cut() -> None:
    f = finding(LLAMA_SERVER / "messages.json", "messages-id-prefix")
    assert "'chatcmpl-HdQTz3mXnqb3v3FRb3BrrAedGUbS5i2'..." in f.message
    f = finding(IK / "chat-stream.json", "model-changed")
    assert f.message.endswith("gemma-3-270m-q4_k_m.ggu'...")
    assert clipped("abc", 3) == "'abc'"
    assert clipped("abcd", 3) == "'abc'..."


def test_a_missing_routes_body_is_counted() -> None:
    t = load_transcript(LLAMA_CPP_PYTHON / "messages-context-overflow.json")
    ctx = _context_for(t, None)
    _judge_answer(ctx, t, cut=False)
    assert ctx.body_bytes == len(t.read_body()) == 22


def test_a_missing_count_tokens_route_names_that_path() -> None:
    f = finding(LLAMA_CPP_PYTHON / "messages-count-tokens.json", "feature-unsupported")
    assert f.message == "the server has no /v1/messages/count_tokens (HTTP 404)"


def test_text_lost_points_at_the_usage_it_quotes() -> None:
    f = finding(IK / "completion-stream.json", "text-lost")
    assert f.message.startswith("usage counts 8 completion tokens")
    assert (f.event, f.pointer) == (8, "/usage/completion_tokens")


def test_usage_on_a_choice_chunk_unasked_does_not_say_where_usage_belongs() -> None:
    for name in ("completion-stream.json", "stop-stream.json"):
        assert "choices: []" not in finding(IK / name, "usage-in-choice-chunk").message
    asked = finding(IK / "completion-stream-usage.json", "usage-in-choice-chunk")
    assert "usage comes alone in a final choices: [] chunk" in asked.message


def test_a_repeated_name_or_id_names_the_client_that_concatenates_it() -> None:
    path = BATTERIES.parent / "transcripts" / "tools" / "llama-cpp-python-named-stream.sse"
    name = finding(path, "tool-call-name-repeated").message
    assert "openai-python's stream helper (accumulate_delta)" in name
    assert "clients concatenate" not in name
    assert "openai-python's stream helper" in finding(path, "tool-call-id-repeated").message
