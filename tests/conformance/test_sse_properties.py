"""The SSE parser under any split of the bytes, and the WHATWG edge cases, parsed and judged."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.judge import judge_response
from conformance.sse import SSEBlock, SSEParser, parse_sse

DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts"
CORPUS = sorted(p.read_bytes() for p in DATA.rglob("*.sse"))
# Line-ending variants of the corpus: the same events must come out of CR, LF and CRLF streams.
VARIANTS = CORPUS + [b.replace(b"\n", b"\r\n") for b in CORPUS] + [b.replace(b"\n", b"\r") for b in CORPUS]


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def whatwg_view(blocks: list[SSEBlock]) -> list[tuple[object, ...]]:
    """What a client sees of each block, without byte offsets (which move with CRLF)."""
    return [(b.data, b.event, b.id, b.retry, b.comments, b.other_fields, b.complete) for b in blocks]


@settings(max_examples=300, deadline=None)
@given(data=st.sampled_from(VARIANTS), cuts=st.lists(st.integers(min_value=0), max_size=40))
def test_any_split_yields_the_same_blocks(data: bytes, cuts: list[int]) -> None:
    assert list(parse_sse(split(data, cuts))) == list(parse_sse([data]))


@settings(max_examples=100, deadline=None)
@given(index=st.integers(min_value=0, max_value=len(CORPUS) - 1), cuts=st.lists(st.integers(min_value=0)))
def test_line_endings_do_not_change_the_events(index: int, cuts: list[int]) -> None:
    lf = CORPUS[index]
    for variant in (lf.replace(b"\n", b"\r\n"), lf.replace(b"\n", b"\r")):
        assert whatwg_view(list(parse_sse(split(variant, cuts)))) == whatwg_view(list(parse_sse([lf])))


def blocks(*reads: bytes) -> list[SSEBlock]:
    return list(parse_sse(reads))


def rules(body: bytes) -> tuple[set[str], set[str]]:
    verdict = judge_response(body, request=None, status=200, headers={"Content-Type": "text/event-stream"})
    return {f.rule for f in verdict.errors}, {f.rule for f in verdict.warnings}


CHUNK = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}'
)
FINAL = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'
)
GOOD = b"data: " + CHUNK + b"\n\ndata: " + FINAL + b"\n\ndata: [DONE]\n\n"


def test_a_conformant_stream_has_no_findings() -> None:
    assert rules(GOOD) == (set(), set())


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_bom_is_stripped_even_split_across_reads_and_reported(cut: bool) -> None:
    body = b"\xef\xbb\xbf" + GOOD
    parser = SSEParser()
    out = parser.feed(body[:cut]) + parser.feed(body[cut:])
    assert parser.bom
    assert out[0].data == CHUNK.decode()
    assert rules(body) == ({"sse-bom"}, set())


def test_bytes_that_are_not_utf8_are_read_as_replacements_and_reported() -> None:
    """A character cut across two events (its first two bytes in one): read as U+FFFD as WHATWG says,
    but openai-python raises UnicodeDecodeError on the stream (found by black-box testing)."""
    cut = CHUNK.replace(b'"hi"', b'"hi \xf0\x9f"')
    body = b"data: " + cut + b"\n\ndata: " + FINAL + b"\n\ndata: [DONE]\n\n"
    parser = SSEParser()
    first = parser.feed(body)[0]
    assert parser.not_utf8 == 0
    assert "hi \ufffd" in first.data
    assert rules(body) == ({"sse-not-utf8"}, set())


def test_crlf_split_across_reads_is_one_line_end() -> None:
    split_crlf = blocks(b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n")
    assert whatwg_view(split_crlf) == whatwg_view(blocks(b"data: a\n\ndata: b\n\n"))


def test_lone_cr_ends_a_line() -> None:
    assert [b.data for b in blocks(b"data: a\rdata: b\r\r")] == ["a\nb"]


def test_comments_are_kept_and_warned_about() -> None:
    (block,) = blocks(b": keep-alive\n\n")
    assert block.comments == ["keep-alive"]
    assert not block.dispatched
    assert rules(b": ping\n\n" + GOOD) == (set(), {"sse-comment"})


def test_multi_line_data_joins_with_lf() -> None:
    (block,) = blocks(b"data: first\ndata\ndata:  third\n\n")
    assert block.data == "first\n\n third"


def test_id_with_nul_is_ignored() -> None:
    (block,) = blocks(b"id: a\x00b\ndata: x\n\n")
    assert block.id is None


def test_retry_with_non_digits_is_ignored_but_noted() -> None:
    (bad,) = blocks(b"retry: 10s\ndata: x\n\n")
    (good,) = blocks(b"retry: 1000\ndata: x\n\n")
    assert (bad.retry, bad.invalid_retry, good.retry) == (None, True, 1000)


def test_field_without_colon_has_empty_value() -> None:
    (block,) = blocks(b"data\n\n")
    assert block.data == ""
    assert block.dispatched


def test_block_without_data_is_not_dispatched() -> None:
    (block,) = blocks(b"event: ping\n\n")
    assert not block.dispatched


def test_cut_off_last_event_is_discarded_and_reported() -> None:
    *_complete, tail = blocks(b"data: " + CHUNK + b"\n\ndata: " + FINAL)
    assert tail.complete is False
    assert not tail.dispatched
    assert rules(b"data: " + CHUNK + b"\n\ndata: " + FINAL) == ({"sse-cut-off", "done-missing"}, set())


def test_unterminated_done_is_a_warning() -> None:
    assert rules(GOOD[:-1]) == (set(), {"done-unterminated"})


@pytest.mark.parametrize(
    ("body", "errors", "warnings"),
    [
        (b"event: message\n" + GOOD, {"sse-event-field"}, set()),
        (b"id: 7\n" + GOOD, set(), {"sse-id-field"}),
        (
            b"id: 7\n" + GOOD.replace(b"data: [DONE]", b": ping\n\ndata: [DONE]"),
            {"sse-empty-event"},
            {"sse-id-field", "sse-comment"},
        ),
        (b"retry: 5\n\n" + GOOD, {"sse-empty-event"}, {"sse-retry-field"}),
        (b"data:\n\n" + GOOD, {"sse-empty-data"}, set()),
        (b"data: hello\n\n" + GOOD, {"data-not-json"}, set()),
        (GOOD + b"data: " + CHUNK + b"\n\n", {"data-after-done"}, set()),
        (b'error: {"message":"boom"}\n\ndata: [DONE]\n\n', {"sse-error-field", "stream-empty"}, set()),  # Q42
        (
            b"data: " + CHUNK + b'\n\n{"error":"runner died"}\n\n',
            {"sse-unknown-field", "done-missing"},
            set(),
        ),
    ],
)
def test_framing_lints(body: bytes, errors: set[str], warnings: set[str]) -> None:
    assert rules(body) == (errors, warnings)


def test_an_event_of_many_data_lines_is_joined_once_at_its_end() -> None:
    # 200,000 lines in one event, CR-ended: joined line by line this copied the data on every line.
    lines = [f"{i}" for i in range(200_000)]
    raw = b"".join(b"data: " + line.encode() + b"\r" for line in lines) + b"\r"
    blocks = list(parse_sse([raw[i : i + 65536] for i in range(0, len(raw), 65536)]))
    assert len(blocks) == 1
    assert blocks[0].data == "\n".join(lines)
