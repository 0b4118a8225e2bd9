"""Every quirk id a rule cites is a row of docs/quirks.md, and the rows of the citations that were wrong
describe what the finding found: usage on every chunk is not usage on the finish chunk, a prompt array
answered as one prompt or with a 500 is not an ignored ``n``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conformance.judge import judge_response
from tests.conformance.test_probes import errors as probe_errors
from tests.conformance.test_probes import run as run_probe
from tests.conformance.test_rules import SSE, chat_chunk, chat_request, delta, stream

ROOT = Path(__file__).resolve().parents[2]
ROWS = {
    match[1]: match[2]
    for match in re.finditer(r"^\| (Q\d\d) \|(.*)$", (ROOT / "docs" / "quirks.md").read_text(), re.M)
}


def test_every_cited_quirk_is_a_row() -> None:
    cited = {
        quirk
        for path in (ROOT / "conformance").rglob("*.py")
        for quirk in re.findall(r"\"(Q\d\d)\"", path.read_text())
    }
    assert len(cited) > 40
    assert cited <= set(ROWS), cited - set(ROWS)


def quirks(
    body: bytes, request: dict[str, Any] | None, rule: str, headers: dict[str, str] = SSE
) -> tuple[list[str], int]:
    """Every quirk id ``rule`` cited in the response, first first, and how many times it fired."""
    verdict = judge_response(body, request=request, status=200, headers=headers)
    found = [f for f in verdict.findings if f.rule == rule]
    assert len(found) <= 1, found  # one finding per rule per response, whatever quirks it cites
    return (list(found[0].to_json()["quirks"]), found[0].count) if found else ([], 0)


COUNTS = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
ZERO = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def test_usage_on_the_finish_chunk_is_q26_on_every_chunk_q27_zeroed_q29() -> None:
    first = chat_chunk([delta("", role="assistant")])
    finish_with_usage = chat_chunk([delta(finish="stop")], usage=COUNTS)
    text_with_usage = chat_chunk([delta("Hi")], usage=COUNTS)
    assert quirks(
        stream(first, chat_chunk([delta("Hi")]), finish_with_usage), None, "usage-in-choice-chunk"
    ) == (["Q26"], 1)
    every = stream(first, text_with_usage, finish_with_usage)
    assert quirks(every, None, "usage-in-choice-chunk") == (["Q27"], 2)
    zero = stream(
        first, chat_chunk([delta("Hi")], usage=ZERO), chat_chunk([delta(finish="stop")], usage=ZERO)
    )
    assert quirks(zero, None, "usage-in-choice-chunk") == (["Q29"], 2)
    # Usage on the finish chunk (Q26), then again on a second one (Q27): one finding citing both.
    twice = stream(first, finish_with_usage, finish_with_usage)
    assert quirks(twice, None, "usage-in-choice-chunk") == (["Q26", "Q27"], 2)
    assert "on the finish chunk itself" in ROWS["Q26"]
    assert "Usage on every streamed chunk" in ROWS["Q27"]
    assert "on **every** chunk" in ROWS["Q29"]


def completion_body(choices: int) -> bytes:
    listed = [{"text": "x", "index": i, "logprobs": None, "finish_reason": "stop"} for i in range(choices)]
    body = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": listed}
    return json.dumps(body).encode()


def test_too_few_choices_is_an_ignored_n_q71_or_an_ignored_prompt_array_q73() -> None:
    one = stream(chat_chunk([delta("Hi", role="assistant")]), chat_chunk([delta(finish="stop")]))
    assert quirks(one, chat_request(n=2), "choice-count") == (["Q71"], 1)
    array = {"method": "POST", "path": "/v1/completions", "body": {"model": "m", "prompt": ["a", "b"]}}
    json_headers = {"content-type": "application/json"}
    assert quirks(completion_body(1), array, "choice-count", json_headers) == (["Q73"], 1)
    both = {**array, "body": {**array["body"], "n": 2}}
    assert quirks(completion_body(2), both, "choice-count", json_headers) == (["Q71"], 1)
    assert "`n` silently ignored" in ROWS["Q71"]
    assert "Prompt arrays" in ROWS["Q73"]


@pytest.mark.parametrize(
    ("probe", "quirk", "row"),
    [
        ("prompt-array", "Q73", "assert len(prompt) <= 1"),
        ("n-2", "Q70", "`n != 1` rejected"),
        ("token-prompt", "Q74", "Token-id prompts"),
        ("echo", "Q72", "as 500"),
        ("chat-logprobs", "Q43", "answered 500"),
    ],
)
def test_a_500_for_an_optional_feature_cites_the_features_row(probe: str, quirk: str, row: str) -> None:
    failure = {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}}
    result, _ = run_probe(probe, lambda body: (500, failure))
    assert ("feature-server-error", quirk) in probe_errors(result)
    assert row in ROWS[quirk]


def test_an_empty_stream_is_q52_and_text_lost_q14() -> None:
    assert quirks(b"data: [DONE]\n\n", None, "stream-empty") == (["Q52"], 1)
    assert "can only cut the connection" in ROWS["Q52"]
    lost = stream(chat_chunk([delta("", role="assistant")]), chat_chunk([delta(finish="length")]))
    assert quirks(lost, None, "text-lost") == (["Q14"], 1)
    assert '`"text":""`' in ROWS["Q14"]


def test_tool_call_index_gap_and_missing_name_are_the_specs() -> None:
    call = {"index": 1, "id": "call_1", "type": "function", "function": {"arguments": "{}"}}
    body = stream(
        chat_chunk([delta(role="assistant", tool_calls=[call])]), chat_chunk([delta(finish="tool_calls")])
    )
    verdict = judge_response(body, request=None, status=200, headers=SSE)
    cited = {f.rule: f.quirk for f in verdict.errors}
    assert (cited["tool-call-index-gap"], cited["tool-call-name-missing"]) == ("spec", "spec")
