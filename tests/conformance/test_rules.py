"""Rules on streams and bodies built for one condition each: request-driven expectations, errors, bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conformance.findings import ERROR, MAX_POINTERS, WARNING, Finding, FindingSink
from conformance.judge import judge_response
from conformance.openai_errors import error_bytes
from conformance.sse import DONE_EVENT, encode_data

MESSAGES = [{"role": "user", "content": "Hi"}]

SSE = {"content-type": "text/event-stream"}
JSON = {"content-type": "application/json"}


def chat_chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": choices,
        **extra,
    }


def delta(content: str | None = None, finish: str | None = None, index: int = 0, **d: Any) -> dict[str, Any]:
    body = dict(d)
    if content is not None:
        body["content"] = content
    return {"index": index, "delta": body, "logprobs": None, "finish_reason": finish}


def stream(*chunks: dict[str, Any] | bytes, done: bool = True) -> bytes:
    parts = [c if isinstance(c, bytes) else encode_data(json.dumps(c)) for c in chunks]
    return b"".join(parts) + (DONE_EVENT if done else b"")


def chat_request(**body: Any) -> dict[str, Any]:
    return {
        "method": "POST",
        "path": "/v1/chat/completions",
        "body": {"model": "m", "messages": MESSAGES, "stream": True, **body},
    }


def judged(
    body: bytes,
    request: dict[str, Any] | None = None,
    status: int | None = 200,
    headers: dict[str, str] | None = None,
) -> tuple[set[str], set[str]]:
    verdict = judge_response(
        body, request=request, status=status, headers=SSE if headers is None else headers
    )
    return {f.rule for f in verdict.errors}, {f.rule for f in verdict.warnings}


FIRST = chat_chunk([delta("", role="assistant")])
TEXT = chat_chunk([delta("Hi")])
FINISH = chat_chunk([delta(finish="stop")])
USAGE = chat_chunk([], usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})


def test_include_usage_asked_and_given() -> None:
    body = stream(FIRST, TEXT, FINISH, USAGE)
    assert judged(body, chat_request(stream_options={"include_usage": True})) == (set(), set())


def test_include_usage_asked_and_missing_q28() -> None:
    body = stream(FIRST, TEXT, FINISH)
    assert judged(body, chat_request(stream_options={"include_usage": True})) == ({"usage-missing"}, set())


def test_usage_on_the_finish_chunk_is_placed_wrong_not_missing_q26() -> None:
    # llama-server b11434 with include_usage: usage rides on the finish chunk, then [DONE]. The client
    # reads it; where it rode is one finding, and the message must not say it never came.
    finish = chat_chunk([delta(finish="stop")], usage=USAGE["usage"])
    body = stream(FIRST, TEXT, finish)
    assert judged(body, chat_request(stream_options={"include_usage": True})) == (
        {"usage-in-choice-chunk"},
        set(),
    )


def test_usage_unasked_q26() -> None:
    assert judged(stream(FIRST, TEXT, FINISH, USAGE), chat_request()) == ({"usage-unrequested"}, set())


def test_usage_repeated_not_last_and_wrong_sum() -> None:
    bad = chat_chunk([], usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 9})
    errors, _ = judged(stream(FIRST, USAGE, TEXT, FINISH, bad))
    assert errors == {"usage-not-last", "usage-repeated", "usage-arithmetic"}


def test_usage_null_on_content_chunks_is_fine() -> None:
    body = stream(chat_chunk([delta("", role="assistant")], usage=None), TEXT, FINISH, USAGE)
    assert judged(body, chat_request(stream_options={"include_usage": True})) == (set(), set())


def test_n_choices_interleaved_and_counted_q71() -> None:
    two = [chat_chunk([delta("", role="assistant", index=i)]) for i in (0, 1)]
    fins = [chat_chunk([delta(finish="stop", index=i)]) for i in (0, 1)]
    assert judged(stream(*two, *fins), chat_request(n=2)) == (set(), set())
    assert judged(stream(two[0], fins[0]), chat_request(n=2)) == ({"choice-count"}, set())


def test_choice_index_gap_and_finish_missing_q22() -> None:
    body = stream(FIRST, chat_chunk([delta("x", role="assistant", index=2)]), FINISH)
    assert judged(body) == ({"choice-index-gap", "finish-reason-missing"}, set())


def test_finish_reason_values_q20_q24() -> None:
    for value, quirk in (("abort", "Q20"), ("insufficient_system_resource", "Q24"), ("", "Q15")):
        verdict = judge_response(
            stream(FIRST, chat_chunk([delta(finish=value)])), request=None, status=200, headers=SSE
        )
        [finding] = [f for f in verdict.errors if f.rule == "finish-reason-value"]
        assert (finding.quirk, finding.pointer) == (quirk, "/choices/0/finish_reason")


def test_finish_on_content_chunk_warns_q23() -> None:
    assert judged(stream(FIRST, chat_chunk([delta("end", finish="stop")]))) == (set(), {"finish-on-content"})


def test_tool_call_fragments_done_right() -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
    opening = {"role": "assistant", "content": None, "tool_calls": [call]}
    first = chat_chunk([{"index": 0, "delta": opening, "logprobs": None, "finish_reason": None}])
    more = chat_chunk([delta(tool_calls=[{"index": 0, "function": {"arguments": "{}"}}])])
    end = chat_chunk([delta(finish="tool_calls")])
    assert judged(stream(first, more, end)) == (set(), set())
    again = chat_chunk([delta(tool_calls=[{"index": 0, "id": "call_1", "function": {"arguments": "}"}}])])
    gap = chat_chunk(
        [delta(tool_calls=[{"index": 2, "id": "c", "type": "function", "function": {"name": "g"}}])]
    )
    stop = chat_chunk([delta(finish="stop")])
    # The arguments joined, "}", are no JSON object: what the call says is judged besides its fragments.
    assert judged(stream(first, again, gap, stop)) == (
        {"tool-call-id-repeated", "tool-call-index-gap", "tool-arguments-json"},
        {"tool-calls-finish-reason"},
    )


def test_a_tool_call_fragment_without_index_is_still_judged_as_its_call_q64() -> None:
    # Issue 33: a fragment without 'index' got only required-key, hiding that the call also had no id,
    # arguments that are no JSON object and a 'stop' finish, each found once 'index' is present.
    whole = {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": '}}
    rest = {"function": {"arguments": '"Paris"}{}'}}
    body = stream(
        FIRST, chat_chunk([delta(tool_calls=[whole])]), chat_chunk([delta(tool_calls=[rest])]), FINISH
    )
    errors, warnings = judged(body)
    assert errors == {"required-key", "tool-call-id-missing", "tool-arguments-json"}
    assert warnings == {"tool-calls-finish-reason"}
    indexed = stream(
        FIRST,
        chat_chunk([delta(tool_calls=[{**whole, "index": 0}])]),
        chat_chunk([delta(tool_calls=[{**rest, "index": 0}])]),
        FINISH,
    )
    assert judged(indexed) == (errors - {"required-key"}, warnings)


def test_a_chat_template_control_token_in_the_content_warns() -> None:
    # A held-out llama-server answer ended "...<|im_end|>": the client shows the turn marker.
    leaked = chat_chunk([delta("Paris.<|im_end|>")])
    assert judged(stream(FIRST, leaked, FINISH)) == (set(), {"template-token-in-content"})
    message = {"role": "assistant", "content": "Paris.<end_of_turn>", "refusal": None}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
    assert judged(json.dumps(body).encode(), headers=JSON) == (set(), {"template-token-in-content"})
    # Text that merely talks about markup is no control token.
    assert judged(stream(FIRST, chat_chunk([delta("use <s> tags")]), FINISH)) == (set(), set())


def test_blank_id_or_name_on_later_tool_call_fragments_q66() -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
    first = chat_chunk([delta(role="assistant", tool_calls=[call])])
    blank_name = chat_chunk([delta(tool_calls=[{"index": 0, "function": {"name": "", "arguments": "{"}}])])
    blank_id = chat_chunk([delta(tool_calls=[{"index": 0, "id": "", "function": {"arguments": "}"}}])])
    end = chat_chunk([delta(finish="tool_calls")])
    verdict = judge_response(stream(first, blank_name, blank_id, end), request=None, status=200, headers=SSE)
    assert verdict.errors == []
    # One finding for the rule: the first place, counted twice, the other place kept beside it.
    assert [(f.rule, f.event, f.pointer, f.quirk, f.count, f.pointers) for f in verdict.warnings] == [
        (
            "tool-call-blank-repeat",
            1,
            "/choices/0/delta/tool_calls/0/function/name",
            "Q66",
            2,
            ("/choices/0/delta/tool_calls/0/id",),
        ),
    ]


def test_empty_deltas_warn_q62() -> None:
    for empty in ({}, {"content": ""}, {"content": None, "tool_calls": []}):
        body = stream(FIRST, TEXT, chat_chunk([delta(**empty)]), FINISH)
        verdict = judge_response(body, request=None, status=200, headers=SSE)
        assert [(f.rule, f.event, f.quirk) for f in verdict.warnings if f.rule == "delta-empty"] == [
            ("delta-empty", 2, "Q62")
        ], empty
    filtered = chat_chunk([{**delta(), "content_filter_results": {"hate": {"filtered": False}}}])
    assert "delta-empty" not in judged(stream(FIRST, filtered, FINISH))[1]  # Azure's filter verdict
    # What is not empty: a first delta with only the role, a finish, a chunk that carries logprobs.
    role_only = chat_chunk([delta(role="assistant")])
    token = {"token": "", "logprob": -0.1, "bytes": [], "top_logprobs": []}
    with_logprobs = chat_chunk(
        [
            {
                "index": 0,
                "delta": {"content": ""},
                "logprobs": {"content": [token], "refusal": None},
                "finish_reason": None,
            }
        ]
    )
    assert judged(stream(role_only, TEXT, with_logprobs, FINISH)) == (set(), set())


@pytest.mark.parametrize(("status", "quirk"), [(402, "Q53"), (422, "Q53"), (424, "Q45")])
def test_statuses_openai_does_not_answer_with_q53(status: int, quirk: str) -> None:
    body = error_bytes("rejected", status)
    verdict = judge_response(body, request=chat_request(), status=status, headers=JSON)
    assert verdict.errors == []
    assert [(f.rule, f.quirk) for f in verdict.warnings] == [("http-status-nonstandard", quirk)]
    assert judged(error_bytes("rejected", 400), chat_request(), status=400, headers=JSON) == (set(), set())


def test_identity_changes_q03_q13() -> None:
    other = dict(TEXT, id="chatcmpl-2", created=2, model="n")
    # A new timestamp breaks no client: a warning (severity policy, docs/validate.md).
    assert judged(stream(FIRST, other, FINISH)) == ({"id-changed", "model-changed"}, {"created-changed"})


@pytest.mark.parametrize(
    ("payload", "quirk", "shape"),
    [
        ({"error": {"message": "boom", "type": "server_error", "param": None, "code": None}}, "N2", False),
        ({"error": "Input validation error", "error_type": "validation"}, "Q45", True),  # TGI < 2.4.1
        ({"error": {"message": "too long", "http_status_code": 422}}, "Q45", True),  # TGI >= 2.4.1
        ({"error": {"message": "x", "trace": "Traceback"}}, "Q49", True),  # TabbyAPI
        ({"error": {"message": "Compute error."}, "message": "Compute error."}, "Q48", True),  # LM Studio
        ({"error": {"object": "error", "message": "x", "type": "BadRequestError", "code": 400}}, "Q47", True),
    ],
)
def test_error_events_in_a_200_stream_n2(payload: dict[str, Any], quirk: str, shape: bool) -> None:
    verdict = judge_response(stream(FIRST, payload, done=False), request=None, status=200, headers=SSE)
    assert {f.rule for f in verdict.errors} == {"error-in-stream"}
    assert {f.rule for f in verdict.warnings} == ({"error-event-shape"} if shape else set())
    assert verdict.errors[0].quirk == quirk


def test_error_then_done_is_one_error_q46() -> None:
    payload = {"error": {"message": "x", "type": "server_error", "param": None, "code": None}}
    assert judged(stream(FIRST, payload)) == ({"error-in-stream"}, set())


def test_proper_error_body() -> None:
    body = error_bytes("This model's maximum context length is 10", 400, code="context_length_exceeded")
    assert judged(body, chat_request(), status=400, headers=JSON) == (set(), set())


def test_error_bodies_q43_q46() -> None:
    overflow = json.dumps(
        {
            "error": {
                "message": "too long",
                "type": "exceed_context_size_error",
                "param": None,
                "code": "exceed_context_size_error",
            }
        }
    ).encode()
    assert judged(overflow, chat_request(), status=500, headers=JSON) == ({"error-status"}, set())
    vllm = json.dumps(
        {"object": "error", "message": "x", "type": "BadRequestError", "param": None, "code": 400}
    ).encode()
    assert judged(vllm, chat_request(), status=400, headers=JSON) == ({"error-body-shape"}, set())
    llamacpp = json.dumps(
        {"error": {"message": "prompt is required", "type": "invalid_request_error", "code": 400}}
    ).encode()
    # An integer code and no param: every strict client reads them loosely (issue 33), a warning.
    assert judged(llamacpp, None, status=400, headers=JSON) == (set(), {"error-body-shape"})
    # HTML labelled text/html is labelled truly: its fault is not being JSON, said once (issue 33).
    assert judged(b"<html>502</html>", None, status=502, headers={"content-type": "text/html"}) == (
        {"error-body-shape"},
        set(),
    )
    as_text = json.dumps({"error": {"message": "x", "type": "t", "param": None, "code": None}}).encode()
    assert judged(as_text, None, status=400, headers={"content-type": "text/plain"}) == (
        {"content-type"},
        set(),
    )
    in_200 = error_bytes("bad", 400)
    assert judged(in_200, None, status=200, headers=JSON) == ({"error-with-200"}, set())


def test_http_status_and_content_type() -> None:
    assert judged(stream(FIRST, FINISH), chat_request(), headers={"content-type": "application/json"}) == (
        {"content-type"},
        set(),
    )
    assert judged(stream(FIRST, FINISH), chat_request(), status=201)[0] == {"http-status"}


def test_json_body_for_a_stream_request() -> None:
    body = json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hi", "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()
    assert judged(body, chat_request(), headers=JSON)[0] == {"stream-not-sse", "content-type"}
    plain = {"method": "POST", "path": "/v1/chat/completions", "body": {"model": "m", "messages": MESSAGES}}
    assert judged(body, plain, headers=JSON) == (set(), set())


def test_non_stream_chat_required_but_nullable_q61() -> None:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    }
    verdict = judge_response(json.dumps(body).encode(), request=None, status=200, headers=JSON)
    # Both keys every client reads as null when absent: warnings (severity policy, docs/validate.md).
    assert verdict.errors == []
    assert sorted(p for f in verdict.warnings for p in (f.pointer or "", *f.pointers)) == [
        "/choices/0/logprobs",
        "/choices/0/message/refusal",
    ]
    assert {f.quirk for f in verdict.warnings} == {"Q61"}
    del body["model"]
    verdict = judge_response(json.dumps(body).encode(), request=None, status=200, headers=JSON)
    assert [(f.rule, f.pointer) for f in verdict.errors] == [("required-key", "/model")]


def completion(logprobs: Any, **extra: Any) -> bytes:
    return json.dumps(
        {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "text": " blue", "logprobs": logprobs, "finish_reason": "length"}],
            **extra,
        }
    ).encode()


def test_legacy_logprobs_shape_q67_and_lengths() -> None:
    request = {
        "method": "POST",
        "path": "/v1/completions",
        "body": {"model": "m", "prompt": "x", "logprobs": 1},
    }
    good = {
        "tokens": [" blue"],
        "token_logprobs": [-0.1],
        "top_logprobs": [{" blue": -0.1, " red": -2.0}],
        "text_offset": [0],
    }
    assert judged(completion(good), request, headers=JSON) == (set(), set())
    chat_style = {
        "content": [{"id": 1, "token": " blue", "logprob": -0.1, "bytes": [32], "top_logprobs": []}]
    }
    assert judged(completion(chat_style), request, headers=JSON)[0] == {"logprobs-shape"}
    short = dict(good, text_offset=[])
    assert judged(completion(short), request, headers=JSON)[0] == {"logprobs-lengths"}
    assert judged(completion(None), request, headers=JSON)[0] == {"logprobs-missing"}  # Q69
    echo = dict(good, token_logprobs=[None], top_logprobs=[None])  # echo's null first entries are allowed
    assert judged(completion(echo), request, headers=JSON) == (set(), set())


def test_prompt_array_answered_with_an_array_q73() -> None:
    assert judged(b"[" + completion(None) + b"]", None, headers=JSON)[0] == {"body-not-object"}


def test_unknown_fields_are_warnings_once_each() -> None:
    # vLLM's stop_reason (Q37); reasoning_content is no unknown key: the reasoning rules judge its name (Q39).
    chunks = [
        chat_chunk([dict(delta("x", reasoning_content="r"), stop_reason=None)], timings={"n": 1})
        for _ in range(5)
    ]
    verdict = judge_response(stream(FIRST, *chunks, FINISH), request=None, status=200, headers=SSE)
    assert verdict.errors == []
    # One finding for the rule, although its two keys cite two quirks: each key once, both quirks kept.
    assert [(f.rule, f.pointer, f.quirk, f.count, f.pointers, f.cited) for f in verdict.warnings] == [
        ("unknown-field", "/choices/0/stop_reason", "Q37", 2, ("/timings",), ("Q37", "Q35"))
    ]


def test_a_rule_repeated_on_every_chunk_is_one_finding_with_its_count() -> None:
    # 10 chunks, each with a new timestamp: 9 changes, one finding that points at the first.
    body = stream(*[dict(TEXT, created=i) for i in range(10)], dict(FINISH, created=9))
    verdict = judge_response(body, request=None, status=200, headers=SSE)
    created = [f for f in verdict.warnings if f.rule == "created-changed"]
    assert [(f.count, f.event) for f in created] == [(9, 1)]
    assert "from 0 to 1" in created[0].message
    assert len({f.rule for f in verdict.findings}) == len(verdict.findings)


def test_a_long_stream_keeps_one_finding_per_rule() -> None:
    body = stream(*[dict(TEXT, created=i) for i in range(5000)], dict(FINISH, created=4999))
    verdict = judge_response(body, request=None, status=200, headers=SSE)
    assert [f.count for f in verdict.warnings if f.rule == "created-changed"] == [4999]


def test_one_finding_per_rule_keeps_every_quirk_and_the_worst_severity_in_bounded_memory() -> None:
    # No rule of the judge warns and errs under one id today; the sink must still never let an earlier
    # warning hide a later error of the same rule, and must stay one finding per rule over 5,000 of them.
    sink = FindingSink()
    sink.add(Finding("r", WARNING, "first", event=1, pointer="/a", quirk="Q26"))
    for i in range(5000):
        severity = ERROR if i == 2500 else WARNING
        sink.add(Finding("r", severity, f"again {i}", event=2 + i, pointer=f"/p/{i}", quirk=f"Q2{7 + i % 2}"))
    sink.add(Finding("other", WARNING, "x", quirk=None))
    finding, other = sink.close()
    assert (finding.rule, finding.severity, finding.message, finding.event) == ("r", ERROR, "first", 1)
    assert (finding.pointer, finding.quirk, finding.count) == ("/a", "Q26", 5001)
    assert finding.pointers == tuple(f"/p/{i}" for i in range(MAX_POINTERS))
    assert finding.to_json()["quirks"] == ["Q26", "Q27", "Q28"]
    assert (other.rule, other.cited, other.to_json()["quirks"]) == ("other", (), [])


def test_verdict_json_shape() -> None:
    verdict = judge_response(
        stream(FIRST, FINISH, done=False), request=None, status=None, headers=None, source="x"
    )
    assert verdict.to_json() == {
        "source": "x",
        "endpoint": "chat",
        "stream": True,
        "errors": [
            {
                "rule": "done-missing",
                "message": verdict.errors[0].message,
                "event": 1,
                "pointer": None,
                "quirk": "Q55",
                "count": 1,
                "pointers": [],
                "quirks": ["Q55"],
            }
        ],
        "warnings": [],
        "server": None,
        "excerpt": False,
    }


def chat_body(message: dict[str, Any], finish: str = "stop", logprobs: Any = None) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "refusal": None, **message}}
    choice.update(logprobs=logprobs, finish_reason=finish)
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
    return json.dumps(body).encode()


def test_stop_sequence_in_the_text_q76() -> None:
    asked = chat_request(stop=["END", "\n\n"])
    # Across a chunk boundary: "...EN" then "D".
    split = stream(FIRST, chat_chunk([delta("the EN")]), chat_chunk([delta("D and more")]), FINISH)
    verdict = judge_response(split, request=asked, status=200, headers=SSE)
    assert [(f.rule, f.event, f.quirk) for f in verdict.errors] == [("stop-ignored", 2, "Q76")]
    honoured = stream(FIRST, chat_chunk([delta("the E")]), chat_chunk([delta("N")]), FINISH)
    assert judged(honoured, asked) == (set(), set())
    body = {
        "method": "POST",
        "path": "/v1/chat/completions",
        "body": {"model": "m", "messages": MESSAGES, "stop": "\n\n"},
    }
    assert judged(chat_body({"content": "one\n\ntwo"}), body, headers=JSON)[0] == {"stop-ignored"}
    assert judged(chat_body({"content": "one\ntwo"}), body, headers=JSON) == (set(), set())
    echoed = {
        "method": "POST",
        "path": "/v1/completions",
        "body": {"model": "m", "prompt": "a\n\nb", "echo": True, "stop": "\n\n"},
    }
    echo_body = completion(None).replace(b'" blue"', b'"a\\n\\nb blue"')
    assert judged(echo_body, echoed, headers=JSON) == (set(), set())  # the prompt may hold it


def test_logprob_standing_for_minus_infinity_q67() -> None:
    legacy = {"tokens": [" blue"], "token_logprobs": [-3.4e38], "top_logprobs": [None], "text_offset": [0]}
    assert judged(completion(legacy), None, headers=JSON) == (set(), {"logprob-sentinel"})
    token = {"token": "Hi", "logprob": -3.4028234663852886e38, "bytes": [72, 105], "top_logprobs": []}
    chunk = chat_chunk([{**delta("Hi"), "logprobs": {"content": [token], "refusal": None}}])
    assert judged(stream(FIRST, chunk, FINISH)) == (set(), {"logprob-sentinel"})
    alternative = {
        **token,
        "logprob": -0.1,
        "top_logprobs": [{"token": "x", "logprob": -3.4e38, "bytes": [120]}],
    }
    chunk = chat_chunk([{**delta("Hi"), "logprobs": {"content": [alternative], "refusal": None}}])
    assert judged(stream(FIRST, chunk, FINISH)) == (set(), {"logprob-sentinel"})
    legacy_top = {**legacy, "token_logprobs": [-0.1], "top_logprobs": [{" red": -3.4e38}]}
    assert judged(completion(legacy_top), None, headers=JSON) == (set(), {"logprob-sentinel"})
    floor = {**token, "logprob": -9999.0}  # OpenAI's own value for a very unlikely token
    chunk = chat_chunk([{**delta("Hi"), "logprobs": {"content": [floor], "refusal": None}}])
    assert judged(stream(FIRST, chunk, FINISH)) == (set(), set())


def test_chat_body_without_the_logprobs_asked_for_q69() -> None:
    asked = {
        "method": "POST",
        "path": "/v1/chat/completions",
        "body": {"model": "m", "messages": MESSAGES, "logprobs": True},
    }
    assert judged(chat_body({"content": "Hi"}), asked, headers=JSON)[0] == {"logprobs-missing"}
    given = {
        "content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}],
        "refusal": None,
    }
    assert judged(chat_body({"content": "Hi"}, logprobs=given), asked, headers=JSON) == (set(), set())


def null_content(**d: Any) -> dict[str, Any]:
    """A first delta with ``content: null``, as llama.cpp and tool-call turns send it."""
    return {
        "index": 0,
        "delta": {"role": "assistant", "content": None, **d},
        "logprobs": None,
        "finish_reason": None,
    }


def test_first_content_null_then_text_q60() -> None:
    null_first = chat_chunk([null_content()])
    assert judged(stream(null_first, TEXT, FINISH)) == (set(), {"content-null-then-text"})
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    tools = chat_chunk([null_content(tool_calls=[call])])
    assert judged(stream(tools, chat_chunk([delta(finish="tool_calls")]))) == (set(), set())


def test_two_tool_calls_with_one_id_q65() -> None:
    calls = [
        {"index": i, "id": "0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for i in (0, 1)
    ]
    body = stream(
        chat_chunk([null_content(tool_calls=calls)]),
        chat_chunk([delta(finish="tool_calls")]),
    )
    verdict = judge_response(body, request=None, status=200, headers=SSE)
    assert [(f.rule, f.pointer, f.quirk) for f in verdict.errors] == [
        ("tool-call-id-duplicate", "/choices/0/delta/tool_calls/1/id", "Q65")
    ]
    whole = [{k: v for k, v in c.items() if k != "index"} for c in calls]
    message = chat_body({"content": None, "tool_calls": whole}, finish="tool_calls")
    assert judged(message, None, headers=JSON)[0] == {"tool-call-id-duplicate"}
    # One id in each of two choices: each choice is a conversation of its own.
    per_choice = [chat_chunk([{**null_content(tool_calls=calls[:1]), "index": i}]) for i in (0, 1)]
    ends = [chat_chunk([delta(finish="tool_calls", index=i)]) for i in (0, 1)]
    assert judged(stream(*per_choice, *ends), chat_request(n=2)) == (set(), set())


def test_context_overflow_worded_without_a_code_answered_500_q43() -> None:
    for message in ("the request exceeds the available context size", "Context size has been exceeded."):
        body = error_bytes(message, 500)
        assert judged(body, chat_request(), status=500, headers=JSON) == ({"error-status"}, set())
    for fault in ("model crashed", "CUDA graph capture is not supported with this GPU"):
        assert judged(error_bytes(fault, 500), chat_request(), status=500, headers=JSON) == (set(), set())
    odd = json.dumps({"error": {"message": "x", "type": ["a"], "code": {"b": 1}, "param": None}}).encode()
    assert judged(odd, chat_request(), status=500, headers=JSON)[0] == {"error-body-shape"}  # no crash


def _error_status_quirks(body: bytes) -> set[tuple[str, str | None]]:
    verdict = judge_response(body, request=chat_request(), status=500, headers=JSON)
    return {(f.rule, f.quirk) for f in verdict.errors}


def test_error_status_cites_q72_for_a_refused_parameter_and_q43_otherwise() -> None:
    for refusal in ("Unsupported param: echo", "Only no echo is supported"):
        assert _error_status_quirks(error_bytes(refusal, 500)) == {("error-status", "Q72")}
    overflow = error_bytes("the request exceeds the available context size", 500)
    assert _error_status_quirks(overflow) == {("error-status", "Q43")}
    named = json.dumps(
        {"error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}}
    ).encode()
    assert _error_status_quirks(named) == {("error-status", "Q43")}


def test_blank_lines_before_a_json_body_q57() -> None:
    body = b"\n\n\n" + chat_body({"content": "Hi"})
    assert judged(body, None, headers=JSON) == (set(), {"body-blank-lines"})


def test_a_stream_with_no_chunk_is_empty_q52() -> None:
    assert judged(DONE_EVENT) == ({"stream-empty"}, set())


def test_chat_chunks_named_text_completion_are_judged_as_chat_q12() -> None:
    chunks = [dict(c, object="text_completion") for c in (FIRST, TEXT, FINISH)]
    verdict = judge_response(stream(*chunks), request=None, status=200, headers=SSE)
    assert verdict.endpoint == "chat"
    assert {(f.rule, f.quirk) for f in verdict.errors} == {("object-value", "Q12")}
