"""Every recorded stream and body in tests/data is judged, and the exact rule ids it breaks are written down.

Broken transcripts must be flagged for exactly the deviations of their quirk rows (quirks.md and each
``.source.txt``); conformant ones must pass. Excerpts quoted in bug reports stop early: for them the
table adds what the cut itself causes (``done-missing``; ``sse-cut-off`` when the paste also lost the
last blank line), kept apart in ``EXCERPT`` so the quirk-driven part stays readable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.judge import EXCERPT_QUIET_RULES, judge_transcript
from conformance.transcript import Transcript, load_transcript

MESSAGES = [{"role": "user", "content": "Hi"}]

DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts"

CHAT_STREAM = {
    "method": "POST",
    "path": "/v1/chat/completions",
    "body": {"model": "m", "messages": MESSAGES, "stream": True},
}
COMPLETIONS_STREAM = {
    "method": "POST",
    "path": "/v1/completions",
    "body": {"model": "m", "prompt": "Hi", "stream": True},
}

EXCERPT = frozenset({"done-missing"})
EXCERPT_UNTERMINATED = frozenset({"done-missing", "sse-cut-off"})


@dataclass(frozen=True)
class Case:
    path: str
    errors: frozenset[str]
    warnings: frozenset[str] = frozenset()
    request: dict[str, Any] | None = None
    """The request as the source describes it, where it does (bare pasted streams have no sidecar)."""
    excerpt: frozenset[str] = field(default=frozenset())


def case(path: str, errors: set[str], warnings: set[str] | None = None, **kw: Any) -> Any:
    c = Case(path, frozenset(errors), frozenset(warnings or ()), **kw)
    return pytest.param(c, id=path)


CASES = [
    # --- reports: streams quoted in public bug reports (quirks.md, "Transcripts") ---
    case(
        "reports/ik_llama-767.sse",
        # Q02 empty id and model; Q14 finish_reason on every chunk, and no text in any (text-lost); Q27
        # usage on every chunk, unasked (Q26).
        {
            "id-empty",
            "model-empty",
            "finish-reason-repeated",
            "text-lost",
            "usage-in-choice-chunk",
            "usage-unrequested",
        },
        request=COMPLETIONS_STREAM,
        excerpt=EXCERPT_UNTERMINATED,
    ),
    # Q42: error: line, then [DONE]: the client sees an empty successful completion (stream-empty).
    case("reports/llamacpp-14566.reconstructed.sse", {"sse-error-field", "stream-empty"}),
    case(
        "reports/llamacpp-16048.sse",
        # Q26: usage chunk without include_usage. The report quotes only the stream's end, so judged
        # against a whole request it also has no choice at all (choice-count).
        {"usage-unrequested", "choice-count"},
        {"unknown-field", "done-unterminated"},  # Q35 timings; the paste lost [DONE]'s blank line
        request=CHAT_STREAM,
    ),
    case(
        "reports/llamacpp-ik_llama-767-comment.sse",
        set(),
        # Q13: llama.cpp stamps created per chunk (1757389182 -> ...183); Q04: chatcmpl- id on text_completion
        {"created-changed", "id-prefix"},
        excerpt=EXCERPT_UNTERMINATED,
    ),
    case(
        "reports/llamacpp-openai-php-780.sse",
        set(),
        {"unknown-field", "role-missing"},  # Q35 timings, Q39 reasoning_content; Q60 no role in first delta
        excerpt=EXCERPT_UNTERMINATED,
    ),
    case(
        "reports/llamacpp-vllm-pr18692.sse",
        # Q26: usage on the finish chunk (choices non-empty) and unasked; Q13 created per chunk.
        {"usage-in-choice-chunk", "usage-unrequested"},
        {"created-changed", "id-prefix", "unknown-field", "done-unterminated"},  # Q04, Q35; paste lost \n
        request=COMPLETIONS_STREAM,
    ),
    case(
        "reports/localai-1194.sse",
        # required-key: Q06 no id/created, Q61 no index, Q16 no finish_reason. Q29 zero usage per chunk.
        {"required-key", "usage-in-choice-chunk"},
        excerpt=EXCERPT_UNTERMINATED,
    ),
    case(
        "reports/ollama-4357.sse",
        {"finish-reason-value", "role-repeated"},  # Q15 finish_reason "", Q58 role in every delta
        excerpt=EXCERPT_UNTERMINATED,
    ),
    case("reports/openai-reference-simonw-llm-284.sse", set(), excerpt=EXCERPT_UNTERMINATED),  # the baseline
    case(
        "reports/sglang-4550.sse",
        set(),
        # Q07 bare hex id; Q38 matched_stop, explicit null delta keys; Q39 reasoning_content; Q60 role null.
        {"id-prefix", "unknown-field", "delta-null-field", "role-missing"},
        excerpt=EXCERPT_UNTERMINATED,
    ),
    case(
        "reports/vllm-18412.sse",
        {"tool-call-id-missing", "tool-call-type-missing", "tool-call-name-repeated"},  # Q63
        excerpt=EXCERPT_UNTERMINATED,
    ),
    case(
        "reports/vllm-19650.sse",
        {"required-key"},  # Q17: finish_reason key gone from content deltas
        {"tool-calls-empty"},  # Q17: "tool_calls": []
        excerpt=EXCERPT_UNTERMINATED,
    ),
    case(
        "reports/vllm-pr19662.sse",
        set(),
        # Q09: "model": "/home/jovyan/qwen3-8b", the path it was loaded from; Q37 stop_reason; the excerpt
        # starts after the role chunk.
        {"model-is-local-path", "unknown-field", "role-missing"},
        excerpt=EXCERPT_UNTERMINATED,
    ),
    # --- seeds: SSE examples extracted from tests/data/seeds (see each .source.txt) ---
    case(
        "seeds/ik_llama-767-broken.sse",
        # Q02, Q13, Q14 (every chunk finishes 'length' with no text: text-lost), Q27 (+ Q26 unasked),
        # Q55 no [DONE].
        {
            "id-empty",
            "model-empty",
            "finish-reason-repeated",
            "text-lost",
            "usage-in-choice-chunk",
            "usage-unrequested",
            "done-missing",
        },
        {"created-changed", "unknown-field"},  # Q35 timings
        request=COMPLETIONS_STREAM,
    ),
    case(
        "seeds/ik_llama-767-fixed.sse",
        # PR #768 fixed Q14 only: Q02, Q13, Q27 (+ Q26), Q55 remain.
        {
            "id-empty",
            "model-empty",
            "usage-in-choice-chunk",
            "usage-unrequested",
            "done-missing",
        },
        {"created-changed", "unknown-field"},
        request=COMPLETIONS_STREAM,
    ),
    case(
        "seeds/ik_llama-767-chat.sse",
        # Q02 model "" until the finish chunk (so it also changes), Q13, Q27 usage on every chunk (+ Q26);
        # content null in the first delta, then text (Q60).
        {"model-empty", "model-changed", "usage-in-choice-chunk", "usage-unrequested"},
        {"created-changed", "unknown-field", "content-null-then-text"},
        request=CHAT_STREAM,
    ),
    case(
        "seeds/llamacpp-b6351-completions.sse",
        {"usage-in-choice-chunk", "usage-unrequested"},  # Q26
        {"created-changed", "id-prefix", "unknown-field"},  # Q13, Q04, Q35
        request=COMPLETIONS_STREAM,
    ),
    case("seeds/llamacpp-docs-completions-stream.sse", set(), request=COMPLETIONS_STREAM),
    # llama.cpp #14566 as its reporter's curl printed it: Q42's 'error:' line, then [DONE]; the client
    # sees an empty successful completion (stream-empty, Q42).
    case("seeds/llamacpp-14566-curl.sse", {"sse-error-field", "stream-empty"}, request=CHAT_STREAM),
    case(
        "seeds/minisglang-docs-chat-stream.sse",
        {"object-value", "required-key"},  # Q12 text_completion.chunk; no created/model (Q06, Q11)
        {"id-prefix"},  # cmpl-1 on chat
    ),
    case("seeds/deepseek-fim-logprobs.sse", set(), {"id-prefix"}, excerpt=EXCERPT),  # bare UUID id
    case("seeds/llamacpp-docs-completion.json", set()),
    case(
        "seeds/ik_llama-767-completion.json", {"model-empty"}, {"id-prefix", "unknown-field"}
    ),  # Q02, Q04, Q35
    # Q61: refusal and logprobs left out, which every client reads as null (a warning); Q35.
    case("seeds/ik_llama-767-chat-completion.json", set(), {"required-key", "unknown-field"}),
]


def _load(c: Case) -> Transcript:
    path = DATA / c.path
    if path.suffix == ".json":
        transcript = load_transcript(path)
    else:
        # Built directly: these are bare pasted streams, and the table supplies the request.
        transcript = Transcript(name=str(path.with_suffix("")), body_path=path)
    if c.request is not None:
        transcript.request = c.request
    return transcript


@pytest.mark.parametrize("c", CASES)
def test_transcript_breaks_exactly_its_rules(c: Case) -> None:
    verdict = judge_transcript(_load(c))
    assert {f.rule for f in verdict.errors} == c.errors | c.excerpt
    assert {f.rule for f in verdict.warnings} == c.warnings


def test_every_corpus_file_has_a_row() -> None:
    listed = {DATA / c.values[0].path for c in CASES}
    on_disk = {
        p
        for folder in ("reports", "seeds")
        for p in (DATA / folder).iterdir()
        if p.suffix in {".sse", ".json"}
    }
    assert on_disk == listed


@pytest.mark.parametrize("path", sorted((DATA / "openai").glob("*.sse")), ids=lambda p: p.name)
def test_golden_openai_streams_pass(path: Path) -> None:
    verdict = judge_transcript(load_transcript(path))
    assert verdict.endpoint == "chat"
    assert verdict.stream
    assert verdict.errors == []
    assert verdict.warnings == []


def test_every_finding_cites_a_quirk_or_the_spec() -> None:
    for c in CASES:
        for finding in judge_transcript(_load(c.values[0])).findings:
            assert finding.quirk, finding


SHIPPED = Path(__file__).resolve().parents[2] / "conformance" / "corpus"


def test_the_shipped_corpus_marks_its_excerpts_and_they_are_not_blamed_for_the_cut() -> None:
    quoted = sorted(SHIPPED.glob("*.source.txt"))
    assert quoted
    cut_rules_seen = 0
    for note in quoted:
        stem = note.name[: -len(".source.txt")]
        t = load_transcript(SHIPPED / f"{stem}.sse")
        # A report quotes some events; only a stream rebuilt from the server's code is whole.
        assert t.excerpt is not note.read_text().startswith("RECONSTRUCTED"), stem
        assert not {f.rule for f in judge_transcript(t).findings} & EXCERPT_QUIET_RULES, stem
        t.excerpt = False
        cut_rules_seen += bool({f.rule for f in judge_transcript(t).findings} & EXCERPT_QUIET_RULES)
    assert cut_rules_seen >= 10  # without the mark, most quotes would fail for where they stop
    recorded = [load_transcript(p) for p in sorted((SHIPPED / "llama-cpp-python").glob("*.sse"))]
    assert recorded
    assert not any(t.excerpt for t in recorded)


# Tails of a stream as quoted: they end where the quote ends, as the excerpts above do, but their last
# event is whole, so the table's cut rules did not show it.
QUOTED_TAILS = {"reports/llamacpp-16048.sse", "reports/llamacpp-vllm-pr18692.sse"}


def test_a_note_that_says_the_stream_is_quoted_in_part_makes_it_an_excerpt() -> None:
    # Issue 33: validate over these folders blamed every quote for its cut unless --excerpt was given,
    # though each note says whether it holds the whole stream.
    excerpts = {c.values[0].path for c in CASES if c.values[0].excerpt} | QUOTED_TAILS
    streams = sorted(p for folder in ("reports", "seeds") for p in (DATA / folder).glob("*.sse"))
    judged = {str(p.relative_to(DATA)): load_transcript(p) for p in streams}
    assert {name for name, t in judged.items() if t.excerpt} == excerpts
    for name in excerpts:
        assert not {f.rule for f in judge_transcript(judged[name]).findings} & EXCERPT_QUIET_RULES, name


def test_a_sidecar_that_says_excerpt_is_not_overruled_by_its_note(tmp_path: Path) -> None:
    (tmp_path / "x.sse").write_bytes(b'data: {"id": "x"}\n\n')
    (tmp_path / "x.source.txt").write_text("https://github.com/o/r/issues/1 -- first event as quoted")
    assert load_transcript(tmp_path / "x.sse").excerpt
    (tmp_path / "x.json").write_text('{"excerpt": false, "response": {"status": 200}}')
    assert not load_transcript(tmp_path / "x.sse").excerpt
