"""The request model, whether OpenAI would accept a recorded request, and the probes' intents: judged from
the request (and the sidecar's ``expect``) in ``validate`` exactly as in ``check``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.judge import judge_response, judge_transcript
from conformance.live.probes import PROBES
from conformance.openai_errors import error_bytes
from conformance.protocols import recorded_request
from conformance.request import Request
from conformance.request_info import RequestInfo
from conformance.rules.acceptance import refusal
from conformance.rules.intents import INTENTS
from conformance.transcript import load_transcript, save_transcript
from tests.conformance.test_rules import JSON, SSE, chat_chunk, delta, stream

MESSAGES = [{"role": "user", "content": "Hi"}]


def chat(**body: Any) -> dict[str, Any]:
    return {
        "method": "POST",
        "path": "/v1/chat/completions",
        "body": {"model": "m", "messages": MESSAGES, **body},
    }


def completion(**body: Any) -> dict[str, Any]:
    return {"method": "POST", "path": "/v1/completions", "body": {"model": "m", "prompt": "Hi", **body}}


def without(request: dict[str, Any], key: str) -> dict[str, Any]:
    return {**request, "body": {k: v for k, v in request["body"].items() if k != key}}


def chat_body(content: str = "Hello", finish: str = "stop", completion_tokens: int = 1) -> bytes:
    message = {"role": "assistant", "content": content, "refusal": None}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    usage = {
        "prompt_tokens": 3,
        "completion_tokens": completion_tokens,
        "total_tokens": 3 + completion_tokens,
    }
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
    return json.dumps({**body, "usage": usage}).encode()


def text_body(*texts: str, model: str = "m") -> bytes:
    choices = [
        {"index": i, "text": t, "logprobs": None, "finish_reason": "length"} for i, t in enumerate(texts)
    ]
    return json.dumps(
        {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": model, "choices": choices}
    ).encode()


def found(
    body: bytes,
    request: dict[str, Any] | None,
    status: int,
    *,
    intent: str | None = None,
    headers: Any = None,
) -> set[tuple[str, str, str | None]]:
    verdict = judge_response(body, request=request, status=status, headers=headers or JSON, intent=intent)
    return {(f.rule, f.severity, f.quirk) for f in verdict.findings}


SERVER_ERROR = error_bytes("boom", 500)


# --- the request model ---


def test_token_limit_is_read_the_way_openai_reads_it() -> None:
    assert Request.from_body("chat", {"max_tokens": 5}).max_tokens == 5
    assert Request.from_body("chat", {"max_completion_tokens": 3}).max_tokens == 3
    both = Request.from_body("chat", {"max_tokens": 9, "max_completion_tokens": 3})
    # max_completion_tokens wins (the judge once took the larger, the proxy the latter): and OpenAI
    # refuses the pair.
    assert (both.max_tokens, both.limit_conflict) == (3, True)
    assert RequestInfo.from_body("chat", {"max_tokens": 9, "max_completion_tokens": 3}).max_tokens == 3
    assert refusal(recorded_request(chat(max_tokens=9, max_completion_tokens=3))) is not None
    zero = Request.from_body("completions", {"max_tokens": 0, "echo": True, "prompt": "x"})
    assert (zero.generates, RequestInfo.from_body("completions", {"max_tokens": 0}).generates) == (
        False,
        False,
    )


def test_one_reading_of_stream_prompts_and_features() -> None:
    unstreamed = Request.from_body("chat", {"stream_options": {"include_usage": True}})
    assert not unstreamed.include_usage  # OpenAI honours it in a stream only
    array = Request.from_body("completions", {"prompt": ["a", "b"], "n": 2})
    assert (array.prompts, array.choices, array.prompt_for(3), array.features) == (
        2,
        4,
        "b",
        ("n", "prompt array"),
    )
    tokens = Request.from_body("completions", {"prompt": [1, 2, 3], "echo": True})
    assert (tokens.prompts, tokens.prompt_token_ids, tokens.features) == (1, 3, ("token-id prompt", "echo"))
    chat_logprobs = Request.from_body("chat", {"logprobs": True})
    assert (chat_logprobs.top_logprobs, chat_logprobs.features) == (0, ("logprobs",))
    assert Request.from_body("completions", {"logprobs": 2}).top_logprobs == 2
    malformed = recorded_request({"path": "/v1/chat/completions", "body": '{"model": '})
    assert (malformed.known, malformed.body, refusal(malformed)) == (
        True,
        None,
        "the body is not a JSON object",
    )
    assert not recorded_request(None).known


# --- acceptance ---


def test_a_completion_without_prompt_answered_200_is_accepted_invalid() -> None:
    assert found(text_body("Paris"), without(completion(), "prompt"), 200) == {
        ("invalid-request-accepted", "error", "spec")
    }
    assert ("invalid-request-accepted", "error", "spec") in found(chat_body(), chat(temperature=7), 200)
    assert found(chat_body(), chat(), 200) == set()
    # OpenAI requires model; local clients leave it out and one-model servers serve them (as the proxy).
    assert found(chat_body(), without(chat(), "model"), 200) == set()


def test_an_invalid_request_answered_500_or_400() -> None:
    invalid = completion(max_tokens="eight")
    assert ("invalid-request-status", "error", "Q43") in found(SERVER_ERROR, invalid, 500)
    refused = error_bytes("Invalid type for 'max_tokens'", 400, param="max_tokens", code="invalid_type")
    assert found(refused, invalid, 400) == set()
    malformed = {"method": "POST", "path": "/v1/chat/completions", "body": '{"model": "x", "messages": ['}
    assert ("invalid-request-status", "error", "Q43") in found(SERVER_ERROR, malformed, 500)


def test_a_valid_feature_answered_500_or_declined() -> None:
    array = completion(prompt=["The sky is", "Grass is"])
    assert ("feature-server-error", "error", "Q73") in found(SERVER_ERROR, array, 500)
    # The feature's catalogue row where it has one (n: Q70, token ids: Q74), else Q43.
    assert ("feature-server-error", "error", "Q70") in found(SERVER_ERROR, chat(n=2), 500)
    assert ("feature-server-error", "error", "Q74") in found(SERVER_ERROR, completion(prompt=[1, 2]), 500)
    assert ("feature-server-error", "error", "Q43") in found(SERVER_ERROR, chat(logprobs=True), 500)
    declined = error_bytes("n > 1 is not supported", 400, param="n")
    assert found(declined, chat(n=2), 400) == {("feature-unsupported", "warning", None)}
    # Without a recorded request nothing can be told.
    assert found(SERVER_ERROR, None, 500) == set()


# --- what the request decides on its own ---


def test_max_tokens_zero_generates_nothing_past_the_echo() -> None:
    scoring = completion(max_tokens=0, echo=True)
    assert found(text_body("Hi"), scoring, 200) == set()
    assert ("max-tokens-zero-generated", "error", "spec") in found(text_body("Hi there"), scoring, 200)
    assert ("max-tokens-zero-generated", "error", "spec") in found(
        text_body("x"), completion(max_tokens=0), 200
    )


def test_chat_logprobs_alone_carry_no_alternatives() -> None:
    top = [{"token": "x", "logprob": -1.0, "bytes": [120]}]
    logprobs = {"content": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": top}]}
    chunk = chat_chunk([{**delta("Hi"), "logprobs": {**logprobs, "refusal": None}}])
    request = chat(stream=True, logprobs=True)
    body = stream(chat_chunk([delta("", role="assistant")]), chunk, chat_chunk([delta(finish="stop")]))
    assert ("logprobs-top-count", "error", "spec") in found(body, request, 200, headers=SSE)
    assert found(body, chat(stream=True, logprobs=True, top_logprobs=1), 200, headers=SSE) == set()


def test_local_paths_in_model_and_errors() -> None:
    leaked = text_body("Paris", model="/root/models/gemma.gguf")
    assert found(leaked, completion(), 200) == {("model-is-local-path", "warning", "Q09")}
    assert found(leaked, None, 200) == {("model-is-local-path", "warning", "Q09")}  # validate alone too
    trace = error_bytes('Traceback: File "/app/server.py", line 3', 400)
    assert ("error-leaks-path", "error", "spec") in found(trace, completion(), 400)


# --- intents ---


def test_every_probe_intent_is_known() -> None:
    assert {p.intent for p in PROBES} - {None} <= set(INTENTS)


OVERFLOW = error_bytes("maximum context length is 2048 tokens", 400, code="context_length_exceeded")


@pytest.mark.parametrize(
    ("body", "status", "headers", "expected"),
    [
        (OVERFLOW, 400, JSON, set()),
        (error_bytes("too long", 400), 400, JSON, {("context-overflow-code", "error", "Q43")}),
        (SERVER_ERROR, 500, JSON, {("context-overflow-status", "error", "Q43")}),
    ],
)
def test_context_overflow_intent(body: bytes, status: int, headers: Any, expected: set[Any]) -> None:
    assert found(body, completion(prompt="hello " * 50), status, intent="context-overflow") == expected


def test_context_overflow_answered_with_an_empty_stream() -> None:
    # An empty 200 stream is stream-empty's (Q52), judged with or without the intent; the intent adds
    # nothing of its own. A stream with events is the intent's context-overflow-in-stream (Q42).
    findings = found(b"", completion(stream=True), 200, intent="context-overflow", headers=SSE)
    assert findings == {("stream-empty", "error", "Q52")}
    assert found(b"", completion(stream=True), 200, headers=SSE) == findings
    error_event = b'data: {"error": {"message": "context full", "type": "server_error"}}\n\n'
    in_stream = found(error_event, completion(stream=True), 200, intent="context-overflow", headers=SSE)
    assert ("context-overflow-in-stream", "error", "Q42") in in_stream


def test_success_finish_length_and_unknown_model_intents() -> None:
    assert found(SERVER_ERROR, chat(), 500, intent="success") == {("expected-success", "error", "spec")}
    assert found(SERVER_ERROR, chat(), 500) == set()  # without the intent a 500 may be transient
    limit = chat(max_completion_tokens=3)
    assert found(chat_body("1, 2", "stop", 2), limit, 200, intent="finish-length") == set()  # stopped early
    # 'stop' where usage shows the limit reached is one fact, said by the rule that holds for every
    # response (finish-stop-at-limit); the intent's own rule is for what usage cannot show.
    assert found(chat_body("1, 2, 3", "stop", 3), limit, 200, intent="finish-length") == {
        ("finish-stop-at-limit", "error", "spec")
    }
    without_usage = {k: v for k, v in json.loads(chat_body("1, 2, 3", "stop", 3)).items() if k != "usage"}
    assert found(json.dumps(without_usage).encode(), limit, 200, intent="finish-length") == {
        ("finish-length-expected", "error", "spec")
    }
    assert found(chat_body(), chat(), 200, intent="unknown-model") == {
        ("unknown-model-accepted", "warning", "spec")
    }
    assert found(chat_body(), chat(), 200, intent="no-such-intent") == {("intent-unknown", "warning", None)}


def test_intent_survives_a_recording(tmp_path: Path) -> None:
    """``expect`` in the sidecar: a hang-up recording is not judged for its cut-off end."""
    cut = stream(chat_chunk([delta("", role="assistant")]), done=False) + b'data: {"id'
    save_transcript(
        tmp_path / "hangup", cut, request=chat(stream=True), status=200, headers=SSE, intent="hang-up"
    )
    loaded = load_transcript(tmp_path / "hangup.sse")
    assert loaded.intent == "hang-up"
    assert judge_transcript(loaded).findings == []
    save_transcript(tmp_path / "plain", cut, request=chat(stream=True), status=200, headers=SSE)
    assert {f.rule for f in judge_transcript(load_transcript(tmp_path / "plain.sse")).errors} >= {
        "sse-cut-off"
    }
