"""A chat template's control token left in an answer's text (rules/template_tokens.py): found in the text
joined across a stream's deltas, as a server whose vocabulary lacks the token sends it (``<``, ``|``,
``im``...), in bounded memory; in chat completions, Responses and Messages answers alike, never in a
completion's raw text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.findings import WARNING, Finding
from conformance.judge import judge_response, judge_transcript
from conformance.request import Request
from conformance.rules.context import ChoiceState, Context
from conformance.rules.template_tokens import CONTROL_TOKENS, template_tokens
from conformance.transcript import load_transcript
from tests.conformance import test_messages_rules as messages
from tests.conformance import test_responses_rules as responses
from tests.conformance.test_meaning_rules import completion, completions_request
from tests.conformance.test_rules import JSON, SSE, chat_chunk, chat_request, delta, stream

RULE = "template-token-in-content"
BATTERIES = Path(__file__).resolve().parents[1] / "data" / "batteries"


def found(body: bytes, request: dict[str, Any] | None, headers: dict[str, str] = SSE) -> list[Finding]:
    verdict = judge_response(body, request=request, status=200, headers=headers)
    return [f for f in verdict.findings if f.rule == RULE]


def where(findings: list[Finding]) -> list[tuple[int | None, str | None]]:
    """Each finding's event and pointer, after checking it is the rule's one warning."""
    assert all(f.severity == WARNING for f in findings)
    return [(f.event, f.pointer) for f in findings]


def chat_stream(*pieces: str) -> bytes:
    """A chat stream whose content comes in ``pieces``: events 0 (role), 1.. (pieces), then the finish."""
    chunks = [chat_chunk([delta(p)]) for p in pieces]
    return stream(chat_chunk([delta("", role="assistant")]), *chunks, chat_chunk([delta(finish="stop")]))


# --- chat completions: the content joined across chunks ---


@pytest.mark.parametrize(
    ("pieces", "event"),
    [
        (("Hello.<|im", "_end|>"), 2),
        (("Hello.", "<", "|", "im", "_end|>", " more"), 5),
        (("Hi", "<|start_header", "_id|>"), 3),
    ],
    ids=["two-chunks", "four-chunks", "longest-token"],
)
def test_a_token_split_across_chat_chunks_is_found_where_it_completes(
    pieces: tuple[str, ...], event: int
) -> None:
    assert where(found(chat_stream(*pieces), chat_request())) == [(event, "/choices/0/delta/content")]


def test_a_token_whole_in_one_chunk_is_still_found() -> None:
    assert where(found(chat_stream("Hello.", "<|im_end|>"), chat_request())) == [
        (2, "/choices/0/delta/content")
    ]


def test_a_less_than_sign_that_begins_no_token_is_not_reported() -> None:
    # Pieces that come close: a `<|` then plain text, `im_end` without its bars, an `<end` left open.
    body = chat_stream("a <", "|", " b", "im", "_end", "|", " 1 < 2 <end", "_of", " turn>")
    assert found(body, chat_request()) == []


def test_tokens_in_two_choices_are_each_found_in_their_own_text() -> None:
    # Interleaved choices: each keeps its own tail, so one's `<|im` does not join the other's `_end|>`.
    crossed = stream(
        chat_chunk([delta("<|im", index=0)]),
        chat_chunk([delta("_end|>", index=1)]),
        chat_chunk([delta("_end|>", index=0)]),
        chat_chunk([delta(finish="stop", index=0), delta(finish="stop", index=1)]),
    )
    findings = found(crossed, chat_request(n=2))
    assert [(f.event, f.pointer, f.pointers) for f in findings] == [(2, "/choices/0/delta/content", ())]


def test_a_token_in_a_completion_stream_is_raw_text_not_reported() -> None:
    def chunk(text: str) -> dict[str, Any]:
        return completion([{"text": text, "index": 0, "logprobs": None, "finish_reason": None}])

    body = stream(chunk("Say <|im"), chunk("_end|>"), chunk(" and <|im_end|>"))
    assert found(body, completions_request(stream=True)) == []


def test_the_tail_kept_between_chunks_never_exceeds_the_longest_token_less_one() -> None:
    from conformance.rules.template_tokens import KEEP

    assert max(map(len, CONTROL_TOKENS)) - 1 == KEEP
    ctx = Context("chat", True, Request.from_body("chat", chat_request()["body"]), 200, {})
    state = ChoiceState(first_event=0)
    # A long text in pieces of every size, ending in near misses: nothing to report, and after each piece
    # the choice keeps at most KEEP characters of it.
    pieces = ["word " * 200, "x", "<|start_header_id", "|" * 50, "<|im_en", "d", "a" * 5000, "<"]
    for event, piece in enumerate(pieces):
        template_tokens(ctx, event, 0, delta(piece), state)
        assert state.tokens is not None
        assert len(state.tokens.tail) <= KEEP
    assert ctx.sink.close() == []
    template_tokens(ctx, len(pieces), 0, delta("|im_end|>"), state)  # the last `<` begins one
    assert [(f.rule, f.event) for f in ctx.sink.close()] == [(RULE, len(pieces))]


# --- the Responses API ---


def test_a_token_in_a_responses_body_is_found_at_its_text() -> None:
    body = responses.response(output=[responses.message("Hello.<|im_end|>")])
    findings = found(json.dumps(body).encode(), responses.request(), JSON)
    assert where(findings) == [(None, "/output/0/content/0/text")]


def test_a_token_split_across_responses_deltas_is_found_where_it_completes() -> None:
    pieces = ("Hello.", "<", "|", "im", "_end|>")
    events = responses.text_stream(pieces)
    completing = next(n for n, e in enumerate(events) if e.get("delta") == "_end|>")
    findings = found(responses.encode(events), responses.request(stream=True))
    assert where(findings) == [(completing, "/delta")]


def test_a_responses_stream_without_indices_is_still_joined() -> None:
    # llama-server's native events named no output_index or content_index.
    events = responses.text_stream(("Hi.<|eot", "_id|>"))
    bare = [{k: v for k, v in e.items() if k not in ("output_index", "content_index")} for e in events]
    completing = next(n for n, e in enumerate(bare) if e.get("delta") == "_id|>")
    assert where(found(responses.encode(bare), responses.request(stream=True))) == [(completing, "/delta")]


# --- the Messages API ---


def test_a_token_in_a_messages_body_is_found_at_its_block() -> None:
    message = {
        **messages.start()["message"],
        "content": [{"type": "text", "text": "Hello.<end_of_turn>"}],
        "stop_reason": "end_turn",
        "usage": messages.USAGE,
    }
    verdict = judge_response(
        json.dumps(message).encode(),
        request={"path": "/v1/messages", "body": messages.body_of()},
        status=200,
        headers=JSON,
    )
    findings = [f for f in verdict.findings if f.rule == RULE]
    assert where(findings) == [(None, "/content/0/text")]


def test_a_token_split_across_messages_deltas_is_found_where_it_completes() -> None:
    def text(piece: str) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}

    events = messages.text_stream()
    events[3:5] = [text("Hello.<"), text("|"), text("im"), text("_end|>")]
    request = {"path": "/v1/messages", "body": messages.body_of(stream=True)}
    assert where(found(messages.encode(events), request)) == [(6, "/delta/text")]


# --- real recordings: llama-server b11434 with a model whose vocabulary lacks <|im_end|> ---


@pytest.mark.parametrize(
    ("recording", "event", "pointer"),
    [
        ("llama-server-b11434/chat-stream.sse", 8, "/choices/0/delta/content"),
        ("llama-server-b11434/responses-stream.sse", 11, "/delta"),
        ("llama-server-b11434/responses.sse", None, "/output/0/content/0/text"),
        ("llama-server-b11434/messages-stream.sse", 7, "/delta/text"),
        ("llama-server-b11434-no-jinja/messages.sse", None, "/content/0/text"),
    ],
)
def test_a_recorded_token_left_in_the_text_is_found(recording: str, event: int | None, pointer: str) -> None:
    verdict = judge_transcript(load_transcript(BATTERIES / recording))
    assert where([f for f in verdict.findings if f.rule == RULE]) == [(event, pointer)]


def test_a_recorded_completion_stream_is_not_judged_for_tokens() -> None:
    verdict = judge_transcript(load_transcript(BATTERIES / "llama-server-b11434" / "completion-stream.sse"))
    assert [f for f in verdict.findings if f.rule == RULE] == []
