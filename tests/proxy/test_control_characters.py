"""Raw control characters inside tool-call arguments' strings are escaped (Q82): llama-cpp-python's
recorded answers (tests/data/transcripts/tools/llama-cpp-python-control-character*) come out with
arguments a client can parse, and arguments that were JSON already come out unchanged however a stream
cut them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from conformance.request_info import RequestInfo
from conformance.transcript import load_transcript
from proxy.normalizer import normalize_body
from proxy.normalizer.control_characters import ArgumentStrings
from proxy.normalizer.repairs import Repairs
from tests.proxy.test_normalizer import events, judged, normalize_stream

TOOLS = Path(__file__).parents[1] / "data" / "transcripts" / "tools"

VALID = [
    '{"location":"Paris"}',
    '{ "a": "say \\"hi\\"\\n", "b": [1, "\\\\", {"c": "\\u0007"}], "d": "x\\\\"}',
    '{\n\t"multi": "line",\r\n "e": ""\n}',
]


def _cut(text: str, at: tuple[int, ...]) -> list[str]:
    bounds = (0, *at, len(text))
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def _escaped(fragments: list[str]) -> str:
    strings = ArgumentStrings()
    return "".join(strings.escape(f) for f in fragments)


@pytest.mark.parametrize("text", VALID)
def test_json_arguments_are_unchanged_wherever_a_stream_cuts_them(text: str) -> None:
    for first in range(len(text) + 1):
        for second in range(first, len(text) + 1):
            assert _escaped(_cut(text, (first, second))) == text


@pytest.mark.parametrize(
    ("sent", "meant"),
    [
        ('{"location": "Paris\n"}', {"location": "Paris\n"}),
        ('{"a": "\t\\"x\x01", "b":\n"\r\x1f"}', {"a": '\t"x\x01', "b": "\r\x1f"}),
        ('{"a": "\\\\\n"}', {"a": "\\\n"}),  # an escaped backslash, then a raw newline
        ('{"a": "x\\\ny"}', {"a": "x\\\ny"}),  # a backslash before a raw newline (a line continuation)
    ],
)
def test_control_characters_inside_strings_are_escaped_wherever_a_stream_cuts_them(
    sent: str, meant: dict[str, Any]
) -> None:
    with pytest.raises(json.JSONDecodeError, match=r"control character|escape"):
        json.loads(sent)
    for first in range(len(sent) + 1):
        for second in range(first, len(sent) + 1):
            assert json.loads(_escaped(_cut(sent, (first, second)))) == meant


def test_a_fragment_with_nothing_to_escape_is_returned_as_it_is() -> None:
    fragment = '{"location": "Par'
    assert ArgumentStrings().escape(fragment) is fragment


def _recorded(name: str) -> tuple[dict[str, Any], bytes]:
    transcript = load_transcript(TOOLS / name)
    assert transcript.request is not None
    return transcript.request["body"], transcript.read_body()


def test_llama_cpp_python_stream_with_a_raw_newline_in_its_arguments() -> None:
    body, raw = _recorded("llama-cpp-python-control-character-stream.sse")
    assert "tool-arguments-json" in {f.rule for f in judged(200, raw, "chat", body).errors}
    status, out, repairs = normalize_stream(raw, "chat", body)
    assert judged(status, out, "chat", body).errors == []
    fragments = [f for c in events(out) for f in c["choices"][0]["delta"].get("tool_calls") or ()]
    assert json.loads("".join(f["function"]["arguments"] for f in fragments)) == {"location": "https\n"}
    assert repairs["Q82"] == 1


def test_llama_cpp_python_body_with_a_raw_newline_in_its_arguments() -> None:
    body, raw = _recorded("llama-cpp-python-control-character.sse")
    assert "tool-arguments-json" in {f.rule for f in judged(200, raw, "chat", body).errors}
    repairs = Repairs()
    out = normalize_body(json.loads(raw), RequestInfo.from_body("chat", body), repairs=repairs)
    assert judged(200, json.dumps(out).encode(), "chat", body).errors == []
    call = out["choices"][0]["message"]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"location": "Paris\n"}
    assert repairs["Q82"] == 1
