"""A body of many values read in steps (conformance/json_steps.py): what ``json`` reads, in steps of one
item each, and chosen for request bodies with many values only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance import json_steps, jsoncodec
from conformance.api_errors import InvalidRequest
from conformance.request_validation import parse_json_object

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30,
)


class _Counting(json.JSONDecoder):
    """A decoder whose C scanner notes the span of text each call reads."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[int] = []
        scan = vars(self)["scan_once"]  # the C scanner json_steps calls (untyped in the stubs)

        def counted(text: str, at: int) -> tuple[Any, int]:
            value, end = scan(text, at)
            self.spans.append(end - at)
            return value, end

        vars(self)["scan_once"] = counted


@settings(max_examples=100)
@given(_JSON, st.sampled_from(["", " ", "\n\t "]), st.sampled_from([4, 9, 64, json_steps.WINDOW]))
def test_reads_what_json_reads(value: Any, space: str, window: int) -> None:
    # Windows of a few characters cut every kind of value (a number at a window's end among them).
    text = json.dumps(value, indent=2 if space else None) + space
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(json_steps, "WINDOW", window)
        assert json_steps.loads_in_steps(space + text, json.JSONDecoder()) == json.loads(space + text)


@pytest.mark.parametrize(
    "text",
    ['{"a": [1, 2', '{"a": 1,}', '{"a" 1}', "[1 2]", '{"a": [1,]}', '{"a": 1} x', "", "{1: 2}", '{"a": tru}'],
)
def test_errors_are_json_s_own_with_the_same_place(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as standard:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as stepped:
        json_steps.loads_in_steps(text, json.JSONDecoder())
    assert (stepped.value.lineno, stepped.value.colno) == (standard.value.lineno, standard.value.colno)


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "input": [{"role": "user", "content": "hi"}] * 5000},
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}] * 5000}]},
        {"model": "m", "input": [{"role": "user", "content": "long " * 2000}] * 3},
    ],
    ids=["many-items", "one-message-of-many-parts", "long-strings"],
)
def test_no_step_reads_more_than_a_window_but_a_string(
    body: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(json_steps, "WINDOW", 4096)
    decoder = _Counting()
    assert json_steps.loads_in_steps(json.dumps(body), decoder) == body
    strings = {len(json.dumps(value)) for value in ("long " * 2000,)}
    assert all(span <= 4096 or span in strings for span in decoder.spans)
    assert len(decoder.spans) >= 5000 or body["input"][0]["content"].startswith("long")


def test_nesting_past_the_limit_is_too_deep_at_any_level() -> None:
    deep = "[" * (jsoncodec.MAX_DEPTH - 1) + "]" * (jsoncodec.MAX_DEPTH - 1)
    # The body and its array are two levels: one more than MAX_DEPTH in all.
    with pytest.raises(jsoncodec.TooDeep):
        json_steps.loads_in_steps('{"a": [' + deep + "]}", json.JSONDecoder())
    fits = "[" * (jsoncodec.MAX_DEPTH - 2) + "]" * (jsoncodec.MAX_DEPTH - 2)
    assert json_steps.loads_in_steps('{"a": [' + fits + "]}", json.JSONDecoder())["a"]


def test_a_request_of_many_values_is_read_in_steps_with_the_same_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    many = {"model": "m", "input": [{"role": "user", "content": "hi"}] * (json_steps.MANY_VALUES + 1)}
    raw = json.dumps(many).encode()
    assert json_steps.worth_steps(raw)
    read: list[str] = []
    real = json_steps.loads_in_steps

    def noted(text: str, decoder: json.JSONDecoder) -> Any:
        read.append("steps")
        return real(text, decoder)

    monkeypatch.setattr(json_steps, "loads_in_steps", noted)
    assert parse_json_object(raw) == many
    assert read == ["steps"]
    for bad, words in ((raw[:-1], "line 1, column"), (raw.replace(b'"hi"', b"NaN", 1), "not valid JSON")):
        with pytest.raises(InvalidRequest) as refused:
            parse_json_object(bad)
        assert words in refused.value.message
    # A long prompt of few values is no such body: orjson reads it at once.
    assert not json_steps.worth_steps(json.dumps({"input": "word, " * 1000}).encode())


def test_failed_reads_of_long_containers_stop_at_the_walk_depth(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each long container walked costs failed reads of a window first; a chain of them 40 deep cost
    # that at every level (a read-only review: some 8 G characters for a 16 MB body of such chains).
    monkeypatch.setattr(json_steps, "WINDOW", 1024)
    failed: list[int] = []

    class Noting(json.JSONDecoder):
        def __init__(self) -> None:
            super().__init__()
            scan = vars(self)["scan_once"]

            def noted(text: str, at: int) -> tuple[Any, int]:
                try:
                    return scan(text, at)  # type: ignore[no-any-return]
                except (StopIteration, json.JSONDecodeError):
                    failed.append(at)
                    raise

            vars(self)["scan_once"] = noted

    chain = "[" * 40 + ",".join(["1"] * 5000) + "]" * 40
    body = json_steps.loads_in_steps('{"a": ' + chain + "}", Noting())
    assert body == {"a": json.loads(chain)}
    assert len(failed) <= 2 * json_steps.WALK_DEPTH + 2


def test_a_body_of_many_values_with_a_byte_order_mark_is_read_as_json_reads_it() -> None:
    many = {"input": [{"role": "user", "content": "hi"}] * (json_steps.MANY_VALUES + 1)}
    raw = json.dumps(many).encode()
    assert parse_json_object(b"\xef\xbb\xbf" + raw) == many
    assert parse_json_object(json.dumps(many).encode("utf-16")) == many
