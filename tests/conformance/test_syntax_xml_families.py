"""Qwen XML, GLM and Granite call syntaxes (conformance/tool_formats/): the model outputs their templates
and llama.cpp's tests/test-chat.cpp write, read into calls and content, whole and streamed."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from conformance.tool_formats.base import CallSyntax, ParsedCall
from conformance.tool_formats.glm import Glm
from conformance.tool_formats.granite import Granite
from conformance.tool_formats.qwen_xml import QwenXml

QWEN = QwenXml()
GLM = Glm()
GRANITE = Granite()

SCHEMAS: dict[str, Any] = {
    "special_function": {"type": "object", "properties": {"arg1": {"type": "integer"}}},
    "get_weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "zip": {"type": "string"},
            "metric": {"type": "boolean"},
            "where": {"type": "object"},
        },
    },
}


def arguments(call: ParsedCall) -> Any:
    return json.loads(call.arguments)


# ---------------------------------------------------------------------------------------------- Qwen
# test-chat.cpp's Qwen3-Coder / Qwen3.5 case, as the template writes it
QWEN_ONE = (
    "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>"
)
QWEN_TWO = (
    "I'll look both up.\n"
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>\n"
    "Both are on their way."
)


def test_qwen_one_call() -> None:
    out = QWEN.parse(QWEN_ONE, final=True, schemas=SCHEMAS)
    assert out.calls == [ParsedCall("special_function", '{"arg1": 1}')]
    assert out.content == ""


def test_qwen_two_calls_with_text_around() -> None:
    out = QWEN.parse(QWEN_TWO, final=True, schemas=SCHEMAS)
    assert [c.name for c in out.calls] == ["get_weather", "special_function"]
    assert arguments(out.calls[0]) == {"city": "Paris", "days": 3}
    assert out.content == "I'll look both up.\n\nBoth are on their way."


def test_qwen_typed_values() -> None:
    text = (
        "<tool_call>\n<function=get_weather>\n"
        "<parameter=zip>\n75001\n</parameter>\n"
        "<parameter=metric>\ntrue\n</parameter>\n"
        '<parameter=where>\n{"lat": 48.8, "tags": ["a"]}\n</parameter>\n'
        "<parameter=days>\n2.5\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    out = QWEN.parse(text, final=True, schemas=SCHEMAS)
    assert arguments(out.calls[0]) == {
        "zip": "75001",  # a number's look, but the schema says string
        "metric": True,
        "where": {"lat": 48.8, "tags": ["a"]},
        "days": 2.5,
    }
    # no schema: what reads as JSON is JSON, the rest a string
    untyped = QWEN.parse(text.replace("get_weather", "other"), final=True, schemas=SCHEMAS)
    assert arguments(untyped.calls[0])["zip"] == 75001


def test_qwen_value_keeps_its_own_lines() -> None:
    code = "def f():\n    return 1\n"
    text = f"<tool_call>\n<function=write>\n<parameter=code>\n{code}\n</parameter>\n</function>\n</tool_call>"
    out = QWEN.parse(text, final=True)
    assert arguments(out.calls[0]) == {"code": code}


def test_qwen_degenerate_forms() -> None:
    lost_bracket = (
        "<tool_call>\nfunction=finish>\n<parameter=summary>\nDone.\n</parameter>\n</function>\n</tool_call>"
    )
    assert QWEN.parse(lost_bracket, final=True).calls == [ParsedCall("finish", '{"summary": "Done."}')]
    bare = (
        "Now:\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>\nok"
    )
    out = QWEN.parse(bare, final=True, schemas=SCHEMAS)
    assert out.calls == [ParsedCall("special_function", '{"arg1": 1}')]
    assert out.content == "Now:\n\nok"


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',  # Hermes
        "<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",  # GLM
        "The model writes <tool_call> tags when it calls a tool.",
        # unclosed
        "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>",
        "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n</function>\nand more\n</tool_call>",
        "<tool_call>\n<function=>\n</function>\n</tool_call>",
        "<tool_call>\n<function=two words>\n</function>\n</tool_call>",
        "see <function=f> in the docs",
    ],
)
def test_qwen_not_calls_stay_content(text: str) -> None:
    out = QWEN.parse(text, final=True)
    assert out.calls == []
    assert out.content == text


def test_qwen_nested_block_after_junk() -> None:
    text = "<tool_call> oops <tool_call>\n<function=f>\n</function>\n</tool_call>"
    out = QWEN.parse(text, final=True)
    assert out.calls == [ParsedCall("f", "{}")]
    assert out.content == "<tool_call> oops"


def test_qwen_bare_function_inside_a_broken_block_is_no_call() -> None:
    text = "<tool_call>\njunk\n<function=f>\n</function>\n</tool_call>"
    assert QWEN.parse(text, final=True).calls == []


# ----------------------------------------------------------------------------------------------- GLM
# test-chat.cpp's GLM 4.5 cases; GLM 4.7's template writes no newlines between the tags
GLM_ONE = "\n<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>"
GLM_COMPLEX = (
    "<tool_call>complex_function\n"
    "<arg_key>name</arg_key>\n<arg_value>John Doe</arg_value>\n"
    "<arg_key>age</arg_key>\n<arg_value>30</arg_value>\n"
    "<arg_key>active</arg_key>\n<arg_value>true</arg_value>\n"
    "<arg_key>score</arg_key>\n<arg_value>95.5</arg_value>\n"
    "</tool_call>"
)
GLM_TWO = (
    "Hello, world!\nWhat's up?\n"
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n"
    "<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>"
    "Checking."
)


def test_glm_one_call() -> None:
    out = GLM.parse(GLM_ONE, final=True, schemas=SCHEMAS)
    assert out.calls == [ParsedCall("special_function", '{"arg1": 1}')]
    assert out.content == ""


def test_glm_complex_values() -> None:
    out = GLM.parse(GLM_COMPLEX, final=True)
    assert arguments(out.calls[0]) == {"name": "John Doe", "age": 30, "active": True, "score": 95.5}


def test_glm_quoted_string_value() -> None:
    text = (
        "<tool_call>web_search\n<arg_key>query</arg_key>\n"
        '<arg_value>"From Zero" Linkin Park album tracklist complete songs</arg_value>\n'
        "<arg_key>limit</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
    )
    out = GLM.parse(text, final=True)
    assert arguments(out.calls[0]) == {
        "query": '"From Zero" Linkin Park album tracklist complete songs',
        "limit": 3,
    }


def test_glm_two_calls_with_text_around() -> None:
    out = GLM.parse(GLM_TWO, final=True, schemas=SCHEMAS)
    assert [c.name for c in out.calls] == ["get_weather", "special_function"]
    assert arguments(out.calls[0]) == {"city": "Paris", "days": 3}
    assert out.content == "Hello, world!\nWhat's up?\n\nChecking."


def test_glm_typed_values() -> None:
    text = (
        "<tool_call>get_weather<arg_key>zip</arg_key><arg_value>75001</arg_value>"
        "<arg_key>metric</arg_key><arg_value>false</arg_value>"
        '<arg_key>where</arg_key><arg_value>{"lat": 1}</arg_value></tool_call>'
    )
    out = GLM.parse(text, final=True, schemas=SCHEMAS)
    assert arguments(out.calls[0]) == {"zip": "75001", "metric": False, "where": {"lat": 1}}


def test_glm_call_without_arguments() -> None:
    assert GLM.parse("<tool_call>get_time\n</tool_call>", final=True).calls == [ParsedCall("get_time", "{}")]


@pytest.mark.parametrize(
    "text",
    [
        QWEN_ONE,  # Qwen's body
        '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',  # Hermes
        "I can use <tool_call> to call a tool.",
        "<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n",  # unclosed
        "<tool_call>f\n<arg_key>a</arg_key>\n</tool_call>",  # a key without its value
        "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\nstray\n</tool_call>",
        "<tool_call>just some words</tool_call>",
        "<tool_call></tool_call>",
    ],
)
def test_glm_not_calls_stay_content(text: str) -> None:
    out = GLM.parse(text, final=True)
    assert out.calls == []
    assert out.content == text


# ------------------------------------------------------------------------------------------- Granite
# test-chat.cpp's Granite case
GRANITE_ONE = '<|tool_call|>[{"name": "special_function", "arguments": {"arg1": 1}}]'
GRANITE_TWO = (
    "Let me look.<|tool_call|>"
    '[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
    '{"name": "special_function", "arguments": {"arg1": 1}}]'
)


def test_granite_one_call() -> None:
    out = GRANITE.parse(GRANITE_ONE, final=True)
    assert out.calls == [ParsedCall("special_function", '{"arg1": 1}')]
    assert out.content == ""


def test_granite_two_calls_with_text_around() -> None:
    out = GRANITE.parse(GRANITE_TWO + "\n(after)", final=True)
    assert [c.name for c in out.calls] == ["get_weather", "special_function"]
    assert arguments(out.calls[0]) == {"city": "Paris", "days": 3}
    assert out.content == "Let me look.\n\n(after)"


def test_granite_string_arguments_holding_an_object() -> None:
    text = '<|tool_call|>[{"name": "f", "arguments": "{\\"a\\": 1}"}]'
    assert GRANITE.parse(text, final=True).calls == [ParsedCall("f", '{"a": 1}')]


@pytest.mark.parametrize(
    "text",
    [
        '<|tool_call|>[{"name": "f", "arguments": 5}]',
        '<|tool_call|>[{"name": "f", "arguments": [1]}]',
        '<|tool_call|>[{"name": "", "arguments": {}}]',
        '<|tool_call|>[{"name": "f", "arguments": {}}, 3]',
        '<|tool_call|>{"name": "f", "arguments": {}}',
        "<|tool_call|>[]",
        '<|tool_call|>[{"name": "f", "arguments": {',
        "The <|tool_call|> token starts a call.",
    ],
)
def test_granite_not_calls_stay_content(text: str) -> None:
    out = GRANITE.parse(text, final=True)
    assert out.calls == []
    assert out.content == text


def test_granite_marker_and_ends() -> None:
    assert GRANITE.markers == ("<|tool_call|>",)
    assert GRANITE.ends == ()
    assert QWEN.markers[0] == GLM.markers[0] == "<tool_call>"
    assert [s.leading_only for s in (QWEN, GLM, GRANITE)] == [False, False, False]


# ----------------------------------------------------------------------------------------- streaming
@pytest.mark.parametrize(
    ("syntax", "text"),
    [(QWEN, QWEN_TWO), (GLM, GLM_TWO), (GRANITE, GRANITE_TWO), (GLM, GLM_COMPLEX + "\nok")],
    ids=["qwen", "glm", "granite", "glm-complex"],
)
def test_every_prefix_is_a_prefix_of_the_answer(syntax: CallSyntax, text: str) -> None:
    whole = syntax.parse(text, final=True, schemas=SCHEMAS)
    assert whole.calls
    for cut in range(len(text) + 1):
        part = syntax.parse(text[:cut], final=False, schemas=SCHEMAS)
        assert whole.content.startswith(part.content), (cut, part.content)
        assert part.calls == whole.calls[: len(part.calls)], cut
    assert syntax.parse(text, final=False, schemas=SCHEMAS).calls == whole.calls


def test_stream_holds_an_unfinished_call_and_a_cut_marker() -> None:
    assert QWEN.parse("Sure.\n<tool_call>\n<function=f>\n<parameter=a>\n1", final=False).content == "Sure."
    assert QWEN.parse("Sure. <tool_c", final=False).content == "Sure."
    assert GLM.parse("Sure. <tool_call>f\n<arg_key>a", final=False).content == "Sure."
    assert GRANITE.parse('Sure.<|tool_call|>[{"name": "f"', final=False).content == "Sure."
    # at the end an unfinished call is content, verbatim
    assert GLM.parse("Sure. <tool_call>f\n<arg_key>a", final=True).content == "Sure. <tool_call>f\n<arg_key>a"


# ------------------------------------------------------------------------------------------- hostile
HOSTILE = [
    "<tool_call>\n" * 10_000,
    "<tool_call>\n<function=f>\n" + "<parameter=a>\n" * 10_000 + "</function>\n</tool_call>",
    "<tool_call>\n<function=f>\n" + "<parameter=a>\nx\n</parameter>\n" * 10_000 + "junk</tool_call>",
    "<tool_call>f\n" + "<arg_key>a</arg_key>\n<arg_value>x</arg_value>\n" * 10_000 + "junk</tool_call>",
    "<tool_call>" * 5_000 + "</tool_call>" * 5_000,
    "<function=" * 10_000 + "</function>",
    '<|tool_call|>["' + " <|tool_call|>[" * 10_000,
    "<|tool_call|>" + "[" * 100_000,
    "<tool_call>\n<function=f>\n<parameter=a>\n"
    + "x" * 1_000_000
    + "\n</parameter>\n</function>\n</tool_call>",
    "<tool_call><tool_call>\n<function=f>\n</function>\n</tool_call></tool_call>",
]


@pytest.mark.parametrize("syntax", [QWEN, GLM, GRANITE], ids=["qwen", "glm", "granite"])
def test_hostile_text_never_raises_and_stays_fast(syntax: CallSyntax) -> None:
    for text in HOSTILE:
        for final in (True, False):
            started = time.monotonic()
            out = syntax.parse(text, final=final, schemas={"f": "not a schema"})
            assert time.monotonic() - started < 2.0, text[:40]
            assert isinstance(out.content, str)
            if final and not out.calls:
                assert out.content == text


def test_huge_value_is_read_whole() -> None:
    out = QWEN.parse(HOSTILE[8], final=True)
    assert len(arguments(out.calls[0])["a"]) == 1_000_000
