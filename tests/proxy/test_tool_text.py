"""Tool calls an upstream sent as text in ``content`` (Q79), repaired into ``tool_calls`` where unambiguous.

The model outputs are the ones the formats' own documents show: Qwen 2.5's function-calling guide
(qwen.readthedocs.io, ``framework/function_call``: two ``<tool_call>`` blocks for the temperature
example), Mistral-7B-Instruct-v0.3's model card (``[TOOL_CALLS] [{"name": ..., "arguments": ...}]``), and
the v11 tokenizer's ``[TOOL_CALLS]name[ARGS]{...}`` that llama.cpp's Mistral parser reads.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from conformance.judge import judge_response
from conformance.request_info import RequestInfo
from conformance.sse import encode_data
from conformance.tool_formats.mistral import MARKER as MISTRAL_MARKER
from conformance.tool_formats.offered import OfferedTools
from proxy.normalizer import StreamNormalizer, normalize_body
from proxy.normalizer.repairs import Repairs
from proxy.normalizer.tool_text import ToolTextScanner, calls_in_text

TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("get_current_temperature", "get_temperature_date", "get_current_weather")
]

BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS}
NAMES = OfferedTools.from_body(BODY)
QWEN = (
    '<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA"}}\n'
    "</tool_call>\n"
    '<tool_call>\n{"name": "get_temperature_date", "arguments": {"location": "San Francisco, CA, USA", '
    '"date": "2024-10-01"}}\n</tool_call>'
)
MISTRAL_V3 = (
    '[TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"location": "Paris, France", '
    '"format": "celsius"}}]'
)
MISTRAL_V11 = '[TOOL_CALLS]get_current_weather[ARGS]{"location": "Paris, France"}'


def _found(text: str, offered: OfferedTools = NAMES) -> tuple[str | None, list[tuple[str, str]]] | None:
    """What ``calls_in_text`` takes out of ``text``, as (content, [(name, arguments)]); None: no call."""
    content, calls, _ = calls_in_text(text, offered)
    return (content, [(c.name, c.arguments) for c in calls]) if calls else None


def test_hermes_blocks_become_calls_and_the_text_around_them_stays() -> None:
    content, calls = _found("Let me check.\n" + QWEN, NAMES) or (None, [])
    assert content == "Let me check."
    assert calls == [
        ("get_current_temperature", '{"location": "San Francisco, CA, USA"}'),
        ("get_temperature_date", '{"location": "San Francisco, CA, USA", "date": "2024-10-01"}'),
    ]


@pytest.mark.parametrize("text", [MISTRAL_V3, MISTRAL_V11])
def test_mistral_answers_become_calls(text: str) -> None:
    content, calls = _found(text, NAMES) or ("left", [])
    assert content is None
    assert [name for name, _ in calls] == ["get_current_weather"]
    assert json.loads(calls[0][1])["location"] == "Paris, France"


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',  # a function the request did not offer
        '<tool_call>{"name": "get_current_weather", "arguments": [1]}</tool_call>',  # arguments not an object
        '<tool_call>{"name": "get_current_weather", "arguments": {"a": 1}</tool_call>',  # not JSON
        '<tool_call>{"name": "get_current_weather", "arguments": {',  # cut inside the call
        'The tag <tool_call> starts a call; {"name": "x"} is its body.',
        "[TOOL_CALLS] not a call",
        'Use [TOOL_CALLS] like this: [{"name": "get_current_weather", "arguments": {}}]',  # not at the start
    ],
)
def test_text_that_is_not_unambiguously_a_call_is_left(text: str) -> None:
    assert _found(text, NAMES) is None


def test_a_whole_call_whose_close_never_came_is_a_call() -> None:
    """The answer ended right after the call's JSON: a server that took ``</tool_call>`` as a stop
    string, or a model that ended its turn there; the call is whole (llama.cpp's Hermes parser, and the
    bundled backend's, read it so)."""
    assert _found('<tool_call>{"name": "get_current_weather"}') == (None, [("get_current_weather", "{}")])


def test_without_tools_nothing_is_repaired() -> None:
    assert _found(QWEN, OfferedTools()) is None


def _scan(pieces: list[str]) -> tuple[str, list[tuple[str, str]]]:
    scanner = ToolTextScanner(NAMES)
    out: list[str] = []
    calls: list[tuple[str, str]] = []
    for piece in pieces:
        text, found = scanner.feed(piece)
        out.append(text)
        calls += [(c.name, c.arguments) for c in found]
    text, found = scanner.finish()
    return "".join(out) + text, calls + [(c.name, c.arguments) for c in found]


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_the_scanner_finds_markers_split_over_tokens(size: int) -> None:
    for text in ("Let me check.\n" + QWEN, MISTRAL_V3, MISTRAL_V11):
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        whole = _found(text, NAMES)
        assert whole is not None
        content, calls = _scan(pieces)
        assert calls == whole[1]
        assert content.strip() == (whole[0] or "")


def test_the_scanner_lets_text_through_as_it_comes_and_gives_back_a_failed_block() -> None:
    scanner = ToolTextScanner(NAMES)
    assert scanner.feed("Hello ") == ("Hello ", [])
    assert scanner.feed("<tool") == ("", [])  # might begin a marker: held
    assert scanner.feed('_call>{"name": "nope", "arguments": {}}') == ("", [])
    text, calls = scanner.feed("</tool_call> and more")
    assert calls == []
    assert text == '<tool_call>{"name": "nope", "arguments": {}}</tool_call> and more'
    assert scanner.feed(" <tool_call>") == (" <tool_call>", [])  # given up: the rest passes as it is


def test_an_unfinished_block_at_the_end_is_content() -> None:
    assert _scan(["Hi ", "<tool_call>{"]) == ("Hi <tool_call>{", [])


@pytest.mark.parametrize(
    ("first", "piece"),
    [("<tool_call>", "a"), ("[TOOL_CALLS]", "a"), ("", " "), ("Hello ", "a")],
    ids=["unclosed block", "mistral answer", "white space", "plain text"],
)
def test_each_piece_is_joined_to_no_more_than_a_markers_length_of_held_text(first: str, piece: str) -> None:
    """Issue 32: a ``<tool_call>`` that never closed, streamed as 200,000 one-character deltas, cost
    9.65 s of the proxy's CPU against 2.49 s for plain text: each piece was joined to all the scanner
    held, and that searched again (so too a Mistral answer and leading white space). Counted, not timed:
    the characters of held text each piece is joined to, through the piece's own ``+`` (a str
    subclass's ``__radd__`` runs before ``str``'s concatenation). Here at most a marker's length a piece;
    joined to all that was held, 20,000 pieces came to some 200,000,000."""
    joined = [0]

    class Piece(str):
        __slots__ = ()

        def __radd__(self, held: str) -> str:
            joined[0] += len(held)
            return str.__add__(held, self)

    scanner = ToolTextScanner(NAMES)
    count = 20_000
    out = [scanner.feed(first)[0]]
    out += [scanner.feed(Piece(piece))[0] for _ in range(count)]
    out.append(scanner.finish()[0])
    assert "".join(out) == first + piece * count  # no call in it: the text, whole, as it came
    assert joined[0] <= len(MISTRAL_MARKER) * count


def test_a_block_held_over_many_pieces_closes_and_the_rest_of_its_piece_is_read() -> None:
    """The close, split over pieces, and what follows it in the close's piece: more blocks, text."""
    block = '<tool_call>{"name": "get_current_weather", "arguments": {"a": "' + "x" * 500 + '"}}</tool_call>'
    close = len(block) - 5  # inside "</tool_call>"
    pieces = ["Hi ", *block[:close], block[close:] + "\n" + block + " bye <tool", "_call"]
    content, calls = _scan(pieces)
    assert content == "Hi  bye <tool_call"  # (white space after the last block goes with the text after it)
    assert [name for name, _ in calls] == ["get_current_weather"] * 2


def _judged(raw: bytes, body: dict[str, Any], content_type: str) -> list[str]:
    """The suite's errors on the proxy's answer (a call repaired out of text is an OpenAI call)."""
    request = {"method": "POST", "path": "/v1/chat/completions", "body": body}
    verdict = judge_response(raw, request=request, status=200, headers={"content-type": content_type})
    return [f"{f.rule}: {f.message}" for f in verdict.errors]


def _body(content: str, body: dict[str, Any]) -> tuple[dict[str, Any], Repairs]:
    upstream = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 40, "total_tokens": 45},
    }
    repairs = Repairs()
    return normalize_body(upstream, RequestInfo.from_body("chat", body), repairs=repairs), repairs


def test_a_body_with_calls_as_text_gets_tool_calls_and_finish_reason_tool_calls() -> None:
    out, repairs = _body(QWEN, BODY)
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    calls = choice["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_current_temperature", "get_temperature_date"]
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls)
    assert json.loads(calls[1]["function"]["arguments"])["date"] == "2024-10-01"
    assert repairs["Q79"] == 2
    assert _judged(json.dumps(out).encode(), BODY, "application/json") == []


@pytest.mark.parametrize(
    "body", [{**BODY, "tool_choice": "none"}, {k: v for k, v in BODY.items() if k != "tools"}]
)
def test_a_body_is_left_as_it_came_without_tools_or_with_tool_choice_none(body: dict[str, Any]) -> None:
    out, repairs = _body(QWEN, body)
    assert out["choices"][0]["message"]["content"] == QWEN
    assert "tool_calls" not in out["choices"][0]["message"]
    assert "Q79" not in repairs


def _stream(pieces: list[str], body: dict[str, Any]) -> tuple[list[dict[str, Any]], Repairs]:
    normalizer = StreamNormalizer(RequestInfo.from_body("chat", {**body, "stream": True}))
    out: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
        chunk = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
        out += normalizer.feed_payload(chunk)
    final = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    final["choices"] = [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    out += normalizer.feed_payload(final)
    normalizer.upstream_done = True
    out += normalizer.close()
    return out, normalizer.repairs


@pytest.mark.parametrize("text", ["Let me check.\n" + QWEN, MISTRAL_V3, MISTRAL_V11])
def test_a_stream_with_calls_as_text_streams_tool_calls(text: str) -> None:
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)]
    chunks, repairs = _stream(pieces, BODY)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    content = "".join(d.get("content") or "" for d in deltas)
    calls = [call for d in deltas for call in d.get("tool_calls", ())]
    expected = _found(text, NAMES)
    assert expected is not None
    assert content.strip() == (expected[0] or "")
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == expected[1]
    assert [c["index"] for c in calls] == list(range(len(calls)))
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert repairs["Q79"] == len(calls)
    raw = b"".join(encode_data(json.dumps(c).encode()) for c in chunks) + b"data: [DONE]\n\n"
    assert _judged(raw, {**BODY, "stream": True}, "text/event-stream") == []


def test_a_stream_without_tools_passes_the_text_as_it_came() -> None:
    pieces = [QWEN[i : i + 5] for i in range(0, len(QWEN), 5)]
    chunks, repairs = _stream(pieces, {k: v for k, v in BODY.items() if k != "tools"})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == QWEN
    assert not any("tool_calls" in d for d in deltas)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert "Q79" not in repairs


DEEP = "[" * 1000 + "]" * 1000
"""Arguments nested 1,000 deep: json.loads raised RecursionError on them, which answered a 500 "internal
error in the proxy", or cut a stream already under way with no error event and no [DONE] (issue 32)."""


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "get_current_weather", "arguments": {"a": ' + DEEP + "}}</tool_call>",
        '[TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"a": ' + DEEP + "}}]",
        '[TOOL_CALLS]get_current_weather[ARGS]{"a": ' + DEEP + "}",
    ],
    ids=["hermes", "mistral-v3", "mistral-v11"],
)
def test_a_call_nested_past_what_json_reads_stays_text(text: str) -> None:
    assert _found(text, NAMES) is None
    out, repairs = _body(text, BODY)
    assert out["choices"][0]["message"]["content"] == text
    assert "Q79" not in repairs
    chunks, _ = _stream([text[i : i + 50] for i in range(0, len(text), 50)], BODY)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == text
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("size", [1, 3, 100])
def test_white_space_before_a_block_that_does_not_parse_is_given_back_with_it(size: int) -> None:
    """Layout before a call goes with the call: out of the content where it is one, back where not."""
    text = 'Hi\n\n<tool_call>{"name": "nope", "arguments": {}}</tool_call>\n and more'
    assert _scan([text[i : i + size] for i in range(0, len(text), size)]) == (text, [])
    good = '\n<tool_call>{"name": "get_current_weather", "arguments": {}}</tool_call>\n'
    assert _scan([good[i : i + size] for i in range(0, len(good), size)]) == (
        "",
        [("get_current_weather", "{}")],
    )


@pytest.mark.parametrize(
    "opening",
    ['<tool_call>{"name": "get_current_weather", "arguments": {"a": "', '{"name": "get_current_weather"', ""],
    ids=["open block", "leading call", "white space"],
)
def test_what_is_held_for_a_call_is_bounded_and_then_goes_out_as_it_came(
    opening: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upstream's call (or white space before one) that never ends does not grow the proxy's memory
    without bound: past ``MOST_HELD`` characters, what was held goes out as the text it was, the rest as
    it comes, and the markup is counted as unparsed."""
    from proxy.normalizer import tool_text

    monkeypatch.setattr(tool_text, "MOST_HELD", 1000)
    scanner = ToolTextScanner(NAMES)
    out = [scanner.feed(opening)[0]]
    out += [scanner.feed(" " * 10)[0] for _ in range(150)]
    assert len("".join(out)) > 1000  # released past the bound, not held to the end
    out.append(scanner.finish()[0])
    assert "".join(out) == opening + " " * 1500  # nothing lost
    assert scanner.unparsed is bool(opening)  # a call that opened (white space opens none)
