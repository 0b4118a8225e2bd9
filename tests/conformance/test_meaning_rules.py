"""Rules that judge what a response means, not only its shape: text lost while usage counts tokens (Q14),
usage that cannot be true, a prompt cut without a word (Q50), leaks in errors and a path as ``model``
(Q09), an overflow refused without its code (Q43), an empty 200 stream (Q52). A stream and a body that
say the same thing get the same finding."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.judge import judge_response, judge_transcript
from conformance.openai_errors import error_bytes
from conformance.sse import DONE_EVENT, encode_data
from conformance.transcript import load_transcript
from tests.conformance.test_rules import JSON, SSE, judged, stream

DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts" / "meaning"
PROMPT = "The capital of France is"

# Each transcript of tests/data/transcripts/meaning with the rule ids it must break (its .source.txt says
# where it comes from), the acceptance rules' status findings included: the 500 for an invalid parameter
# is `invalid-request-status` besides its leaks, the 200 without a prompt `invalid-request-accepted`, and
# the 500 to a valid prompt array `feature-server-error` besides its empty message.
TRANSCRIPTS = {
    "text-lost-stream.sse": {"text-lost"},
    "invalid-param-500-traceback.sse": {
        "invalid-request-status",
        "error-leaks-traceback",
        "error-leaks-path",
    },
    "completion-without-prompt-200.sse": {"invalid-request-accepted"},
    "prompt-array-500-empty-message.sse": {"feature-server-error", "error-message-empty"},
    "model-local-path-stream.sse": set(),
    "overflow-400.sse": set(),
}
WARNED = {"model-local-path-stream.sse": {"model-is-local-path"}}  # no client fails on it: a warning


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_transcript_breaks_its_meaning_rules(name: str) -> None:
    verdict = judge_transcript(load_transcript(DATA / name))
    assert {f.rule for f in verdict.errors} == TRANSCRIPTS[name]
    assert {f.rule for f in verdict.warnings} == WARNED.get(name, set())


def test_every_meaning_transcript_has_a_row() -> None:
    assert {p.name for p in DATA.glob("*.sse")} == set(TRANSCRIPTS)


# --- building blocks: one completion, as a stream or as a body ---


def completions_request(**body: Any) -> dict[str, Any]:
    return {"method": "POST", "path": "/v1/completions", "body": {"model": "m", "prompt": PROMPT, **body}}


def choice(text: str, finish: str | None, index: int = 0) -> dict[str, Any]:
    return {"text": text, "index": index, "logprobs": None, "finish_reason": finish}


def completion(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": choices,
        **extra,
    }


def usage(completion: int, prompt: int = 5, **extra: Any) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        **extra,
    }


def as_stream(texts: list[str], finish: str, counted: dict[str, Any] | None) -> bytes:
    """One choice's texts, a finish chunk of its own, then the usage chunk (include_usage)."""
    chunks = [completion([choice(t, None)]) for t in texts] + [completion([choice("", finish)])]
    if counted is not None:
        chunks.append(completion([], usage=counted))
    return stream(*chunks)


def as_body(texts: list[str], finish: str, counted: dict[str, Any] | None) -> bytes:
    extra = {} if counted is None else {"usage": counted}
    return json.dumps(completion([choice("".join(texts), finish)], **extra)).encode()


def both(
    texts: list[str], finish: str, counted: dict[str, Any] | None, **asked: Any
) -> list[tuple[set[str], set[str]]]:
    """The verdict (errors, warnings) of the same answer sent as a stream and as a body."""
    streamed = judged(
        as_stream(texts, finish, counted),
        completions_request(stream=True, stream_options={"include_usage": True}, **asked),
    )
    body = judged(as_body(texts, finish, counted), completions_request(**asked), headers=JSON)
    return [streamed, body]


# --- text lost (Q14) ---


def test_text_lost_when_usage_counts_tokens_and_no_text_came() -> None:
    assert both(["", ""], "stop", usage(12)) == [({"text-lost"}, set())] * 2
    assert both(["", ""], "length", usage(8), max_tokens=8) == [({"text-lost"}, set())] * 2


def test_text_lost_for_a_length_finish_without_usage() -> None:
    assert both([""], "length", None, max_tokens=8)[1] == ({"text-lost"}, set())
    verdict = judge_response(as_stream([""], "length", None), request=None, status=200, headers=SSE)
    assert [(f.rule, f.quirk, f.event) for f in verdict.errors] == [("text-lost", "Q14", 1)]


def test_text_that_came_is_not_lost() -> None:
    assert both(["Paris", "."], "length", usage(2), max_tokens=2) == [(set(), set())] * 2
    assert both(["Paris"], "stop", usage(5)) == [(set(), set())] * 2


def test_one_token_per_choice_without_text_is_its_end_of_sequence() -> None:
    # llama.cpp counts the end-of-sequence token the model chose at once; it has no text.
    assert both([], "stop", usage(1)) == [(set(), set())] * 2
    assert both([], "stop", usage(2))[0] == ({"text-lost"}, set())


def test_hidden_reasoning_and_max_tokens_zero_explain_an_empty_text() -> None:
    # OpenAI's reasoning models: the whole budget went to reasoning, content "" and finish length.
    hidden = usage(16, completion_tokens_details={"reasoning_tokens": 16})
    assert both([], "length", hidden, max_tokens=16) == [(set(), set())] * 2
    assert both([], "length", usage(0), max_tokens=0) == [(set(), set())] * 2


def chat_stream(*deltas: dict[str, Any], finish: str = "stop", counted: int = 9) -> bytes:
    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": choices, **extra}  # fmt: skip

    first = chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                    "finish_reason": None}])  # fmt: skip
    parts = [chunk([{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]) for d in deltas]
    end = chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}])
    return stream(first, *parts, end, chunk([], usage=usage(counted)))


def test_tool_calls_reasoning_and_refusals_are_output() -> None:
    asked = {"method": "POST", "path": "/v1/chat/completions",
             "body": {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True,
                      "stream_options": {"include_usage": True}}}  # fmt: skip
    call = {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                            "function": {"name": "f", "arguments": "{}"}}]}  # fmt: skip
    assert judged(chat_stream(call, finish="tool_calls"), asked) == (set(), set())
    assert judged(chat_stream({"refusal": "I can't."}), asked) == (set(), set())
    errors, _ = judged(chat_stream({"reasoning_content": "Thinking."}), asked)
    assert "text-lost" not in errors
    assert judged(chat_stream({"content": ""}), asked) == ({"text-lost"}, {"delta-empty"})


def test_a_failed_stream_is_not_text_lost() -> None:
    failed = stream(
        completion([choice("", None)]),
        encode_data(json.dumps({"error": {"message": "x", "type": "server_error"}})),
        done=False,
    )
    assert "text-lost" not in judged(failed, completions_request(stream=True))[0]


# --- usage that cannot be true, a finish the usage contradicts ---


def test_stop_at_the_token_limit_is_an_error() -> None:
    # The client takes a cut answer for a whole one (severity policy, docs/validate.md; issue 33).
    assert both(["Paris is"], "stop", usage(8), max_tokens=8) == [({"finish-stop-at-limit"}, set())] * 2
    # A stop sequence may end the text on the limit's last token; below the limit a stop is the model's.
    assert both(["Paris is"], "stop", usage(8), max_tokens=8, stop=["\n"]) == [(set(), set())] * 2
    assert both(["Paris is"], "stop", usage(7), max_tokens=8) == [(set(), set())] * 2


def test_usage_below_what_length_finishes_took_is_a_warning() -> None:
    assert both(["Paris is"], "length", usage(3), max_tokens=8) == [(set(), {"usage-below-length"})] * 2
    assert both(["Paris is"], "length", usage(8), max_tokens=8) == [(set(), set())] * 2
    # Without a limit in the request, the context ended it: nothing to hold the count against.
    assert both(["Paris is"], "length", usage(3)) == [(set(), set())] * 2


def test_a_length_on_every_chunk_then_a_real_stop_is_not_usage_below_length_q14() -> None:
    # ik_llama.cpp before #768: 'length' on every chunk, the stop sequence's 'stop' on the last. The
    # repeat is finish-reason-repeated; the choice ended with 'stop', below its limit: no usage claim.
    chunks = [completion([choice(word, "length")]) for word in ("Paris", " is")]
    last = completion([choice("", "stop")], usage=usage(2))
    request = completions_request(
        stream=True, max_tokens=8, stop=["\n"], stream_options={"include_usage": True}
    )
    errors, warnings = judged(stream(*chunks, last), request)
    assert "finish-reason-repeated" in errors
    assert "usage-below-length" not in warnings


def test_logprobs_null_on_every_chunk_of_a_stream_that_lost_its_text_q69() -> None:
    # ik_llama.cpp #767's empty chunks, with logprobs asked: the text is lost (text-lost) and so are the
    # logprobs, though no chunk with text was there to show it.
    silent = [completion([choice("", None)]) for _ in range(3)]
    last = completion([choice("", "length")])
    counts = completion([], usage=usage(4))
    asked = completions_request(stream=True, max_tokens=4, logprobs=1, stream_options={"include_usage": True})
    assert judged(stream(*silent, last, counts), asked) == ({"text-lost", "logprobs-missing"}, set())
    # A choice that stopped at once, with nothing generated, owes no logprobs.
    empty = completion([choice("", "stop")])
    assert judged(stream(empty, completion([], usage=usage(1))), asked) == (set(), set())


LONG = " ".join(["word"] * 40)


def test_a_prompt_cut_without_a_word_q50() -> None:
    assert both(["x"], "stop", usage(1, prompt=20), prompt=LONG) == [({"prompt-truncated"}, set())] * 2
    # 40 words take at least 40 tokens; 30 is within the margin the check leaves a tokenizer.
    assert both(["x"], "stop", usage(1, prompt=30), prompt=LONG) == [(set(), set())] * 2
    # A short prompt is judged by no bound: one token can be a whole short phrase's count.
    assert both(["x"], "stop", usage(1, prompt=1), prompt="a b c") == [(set(), set())] * 2


def test_chat_messages_cut_without_a_word_q50() -> None:
    # Every message is part of the prompt; text parts count as a string content does.
    parts = [{"type": "text", "text": LONG}]
    messages = [{"role": "system", "content": LONG}, {"role": "user", "content": parts}]
    asked = {"method": "POST", "path": "/v1/chat/completions", "body": {"model": "m", "messages": messages}}
    answer = {"index": 0, "message": {"role": "assistant", "content": "x", "refusal": None}, "logprobs": None,
              "finish_reason": "stop"}  # fmt: skip

    def body(prompt: int) -> bytes:
        reply = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                 "choices": [answer], "usage": usage(1, prompt=prompt)}  # fmt: skip
        return json.dumps(reply).encode()

    # 80 words: 45 tokens is the first message alone, 70 both with the template's few.
    assert judged(body(45), asked, headers=JSON) == ({"prompt-truncated"}, set())
    assert judged(body(70), asked, headers=JSON) == (set(), set())


def test_usage_counting_one_prompt_of_an_array() -> None:
    prompts = [LONG, LONG]
    chunks = [completion([choice("x", "stop", index=i)]) for i in (0, 1)]
    body = stream(*chunks, completion([], usage=usage(2, prompt=41)))
    asked = completions_request(prompt=prompts, stream=True, stream_options={"include_usage": True})
    verdict = judge_response(body, request=asked, status=200, headers=SSE)
    assert [(f.rule, f.quirk) for f in verdict.errors] == [("usage-prompt-array", "spec")]
    whole = stream(*chunks, completion([], usage=usage(2, prompt=82)))
    assert judged(whole, asked) == (set(), set())


# --- leaks (Q09, Q49, spec), an empty message ---


@pytest.mark.parametrize(
    "message",
    [
        "cannot open /home/ci/models/gemma.gguf",
        "model file C:\\Users\\ci\\models\\gemma.gguf not found",
        "cannot read \\\\fileserver\\models\\gemma.gguf",
        "see file:///srv/app/config.yaml",
        "/opt/server/weights missing",
        # Roots outside the usual ones: a CI checkout's installed package, a source file in a frame.
        "failed in /check/work/main/.tox/backend/lib/python3.11/site-packages/llama_cpp/llama.py",
        'raised at "/builds/srv/server.py"',
    ],
)
def test_a_local_path_in_an_error_body_and_in_an_error_event(message: str) -> None:
    body = error_bytes(message, 400)
    assert judged(body, completions_request(), status=400, headers=JSON) == ({"error-leaks-path"}, set())
    event = stream(encode_data(body.decode()), done=False)
    assert judged(event, completions_request(stream=True)) == ({"error-in-stream", "error-leaks-path"}, set())


def test_urls_and_model_names_are_not_paths() -> None:
    for message in (
        "see https://example.com/home/docs",
        "model gemma-3-270m.gguf is not loaded",
        "a/b",
        "no route for POST /v1/chat/completions",
        "see https://example.com/src/app.py",
    ):
        body = error_bytes(message, 400)
        assert judged(body, completions_request(), status=400, headers=JSON) == (set(), set()), message


def test_a_traceback_in_an_error_event_trace_key_q49() -> None:
    frame = 'Traceback (most recent call last):\n  File "server.py", line 12, in generate\nValueError: x'
    event = encode_data(json.dumps({"error": {"message": "failed", "trace": frame}}))
    verdict = judge_response(event, request=completions_request(stream=True), status=200, headers=SSE)
    assert ("error-leaks-traceback", "Q49") in {(f.rule, f.quirk) for f in verdict.errors}


def test_an_empty_error_message_in_a_body_and_an_event() -> None:
    body = error_bytes("", 500)
    assert "error-message-empty" in judged(body, completions_request(), status=500, headers=JSON)[0]
    event = stream(encode_data(error_bytes(" ", 500).decode()), done=False)
    assert "error-message-empty" in judged(event, completions_request(stream=True))[0]


def test_a_traceback_in_an_error_that_is_not_json() -> None:
    text = b'Internal Server Error\nTraceback (most recent call last):\n  File "app.py", line 3, in f\n'
    errors, _ = judged(text, completions_request(), status=500, headers={"content-type": "text/plain"})
    assert {"error-leaks-traceback"} <= errors


def test_a_local_path_as_model_in_a_body_and_once_per_stream_q09() -> None:
    path = "/models/gemma-3-270m-it-Q4_K_M.gguf"
    body = json.dumps(completion([choice("Paris", "stop")], model=path)).encode()
    verdict = judge_response(body, request=completions_request(), status=200, headers=JSON)
    assert [(f.rule, f.quirk) for f in verdict.warnings] == [("model-is-local-path", "Q09")]
    chunks = [completion([choice(t, f)], model=path) for t, f in (("Paris", None), ("", "stop"))]
    verdict = judge_response(stream(*chunks), request=None, status=200, headers=SSE)
    assert [(f.rule, f.event) for f in verdict.warnings] == [("model-is-local-path", 0)]


# --- a context overflow refused without its code (Q43) ---


def test_an_overflow_refused_without_context_length_exceeded_q43() -> None:
    wrong = error_bytes(
        "the request exceeds the available context size", 400, code="exceed_context_size_error"
    )
    verdict = judge_response(wrong, request=completions_request(), status=400, headers=JSON)
    assert [(f.rule, f.quirk) for f in verdict.errors] == [("context-overflow-code", "Q43")]
    right = error_bytes("maximum context length is 2048 tokens", 400, code="context_length_exceeded")
    assert judged(right, completions_request(), status=400, headers=JSON) == (set(), set())
    # A rate limit or an unrelated refusal is no overflow.
    limit = error_bytes("too many tokens per minute", 429, code="rate_limit_exceeded")
    assert judged(limit, completions_request(), status=429, headers=JSON) == (set(), set())
    bad = error_bytes("max_tokens must be an integer", 400)
    assert judged(bad, completions_request(), status=400, headers=JSON) == (set(), set())


# --- an empty 200 stream (Q52) ---


@pytest.mark.parametrize("body", [b"", DONE_EVENT, b": ping\n\n", b": ping\n\n" + DONE_EVENT])
def test_an_empty_200_stream_is_its_own_cause_q52(body: bytes) -> None:
    asked = completions_request(stream=True, stream_options={"include_usage": True})
    verdict = judge_response(body, request=asked, status=200, headers=SSE)
    assert [(f.rule, f.quirk) for f in verdict.errors] == [("stream-empty", "Q52")]


def test_an_error_field_line_then_done_is_still_an_empty_success_q42() -> None:
    # llama.cpp #14566: clients drop the 'error:' line and see an empty successful completion, the
    # failure they miss (stream-empty), besides where the error went (sse-error-field).
    body = b'error: {"message": "context"}\n\n' + DONE_EVENT
    verdict = judge_response(body, request=None, status=200, headers=SSE)
    assert {f.rule for f in verdict.errors} == {"sse-error-field", "stream-empty"}
    [empty] = [f for f in verdict.errors if f.rule == "stream-empty"]
    assert "'error:' line" in empty.message
    assert empty.quirk == "Q42"  # the catalogue's row for this very stream


def test_an_overflow_error_event_in_a_200_stream_is_the_overflow_q42() -> None:
    # llama-server b11434: a context overflow as an error event, code 500 and type server_error, in a
    # 200 stream. Without a recorded intent it is still the overflow a client needed as a 400.
    event = {
        "error": {
            "code": 500,
            "message": "the request exceeds the available context size",
            "type": "server_error",
        }
    }
    body = encode_data(json.dumps(event)) + DONE_EVENT
    verdict = judge_response(body, request=completions_request(stream=True), status=200, headers=SSE)
    assert [(f.rule, f.quirk) for f in verdict.errors] == [("context-overflow-in-stream", "Q42")]
    [shape] = verdict.warnings
    assert shape.rule == "error-event-shape"
    assert "no 'param'" in shape.message
    assert "'code' is int" in shape.message
    other = {"error": {"message": "boom", "type": "server_error", "code": None}}  # no 'param'
    verdict = judge_response(
        encode_data(json.dumps(other)) + DONE_EVENT, request=None, status=200, headers=SSE
    )
    assert [(f.rule, f.message) for f in verdict.warnings] == [
        ("error-event-shape", "error event not in OpenAI's shape: no 'param'")
    ]
    assert [f.rule for f in verdict.errors] == ["error-in-stream"]
