"""The token-family call syntaxes (DeepSeek, Kimi K2, gpt-oss harmony, FunctionGemma) on model outputs
written as their templates and llama.cpp's tests/test-chat.cpp cases write them."""

# ruff: noqa: RUF001 -- DeepSeek's tokens are spelled with full-width bars (U+FF5C).
from __future__ import annotations

import json

import pytest

from conformance.tool_formats.base import CallSyntax, ParsedCall, ParsedOutput
from conformance.tool_formats.deepseek import DeepSeek
from conformance.tool_formats.gemma import Gemma
from conformance.tool_formats.harmony import Harmony
from conformance.tool_formats.kimi import Kimi

FENCE = "```"


def _args(call: ParsedCall) -> object:
    return json.loads(call.arguments)


def _check_prefixes(syntax: CallSyntax, text: str) -> ParsedOutput:
    """Every prefix of a stream: content a prefix of the final content, calls a prefix of its calls."""
    whole = syntax.parse(text, final=True)
    for cut in range(len(text) + 1):
        part = syntax.parse(text[:cut], final=False)
        assert whole.content.startswith(part.content), (cut, part.content)
        assert part.calls == whole.calls[: len(part.calls)], cut
    assert syntax.parse(text, final=False).calls == whole.calls
    return whole


# --- DeepSeek ------------------------------------------------------------------------------------

DS_R1_CALL = (
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n"
    f'{FENCE}json\n{{"arg1": 1}}\n{FENCE}<｜tool▁call▁end｜>'
)
DS_V31_CALL = '<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": "Tokyo"}<｜tool▁call▁end｜>'


def test_deepseek_r1_one_call() -> None:
    out = DeepSeek().parse(f"<｜tool▁calls▁begin｜>{DS_R1_CALL}<｜tool▁calls▁end｜>", final=True)
    assert out.content == ""
    assert [(c.name, _args(c), c.id) for c in out.calls] == [("special_function", {"arg1": 1}, None)]


def test_deepseek_v31_one_call() -> None:
    out = DeepSeek().parse(f"<｜tool▁calls▁begin｜>{DS_V31_CALL}<｜tool▁calls▁end｜>", final=True)
    assert [(c.name, _args(c)) for c in out.calls] == [("get_time", {"city": "Tokyo"})]


@pytest.mark.parametrize(
    "begin", ["<｜tool_calls_begin｜>", "<｜tool calls begin｜>", "<｜tool\\_calls\\_begin｜>"]
)
def test_deepseek_begin_variants_llama_cpp_accepts(begin: str) -> None:
    out = DeepSeek().parse(f"{begin}{DS_R1_CALL}<｜tool▁calls▁end｜>", final=True)
    assert [c.name for c in out.calls] == ["special_function"]


def test_deepseek_short_begin_without_call_begin() -> None:
    # test-chat.cpp's R1 case with the short section marker and no call-begin marker.
    text = (
        "<｜tool▁calls｜>function<｜tool▁sep｜>special_function\n"
        f'{FENCE}json\n{{"arg1": 1}}\n{FENCE}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    out = DeepSeek().parse(text, final=True)
    assert [(c.name, _args(c)) for c in out.calls] == [("special_function", {"arg1": 1})]


def test_deepseek_two_calls_text_around_and_every_prefix() -> None:
    text = f"I will check.\n\n<｜tool▁calls▁begin｜>{DS_R1_CALL}\n{DS_V31_CALL}<｜tool▁calls▁end｜>\nDone."
    out = _check_prefixes(DeepSeek(), text)
    assert out.content == "I will check.\n\n\nDone."
    assert [c.name for c in out.calls] == ["special_function", "get_time"]


@pytest.mark.parametrize(
    "text",
    [
        "DeepSeek opens calls with <｜tool▁calls▁begin｜> and so on.",
        f"<｜tool▁calls▁begin｜>{DS_V31_CALL}",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>[1, 2]"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{bad}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜><｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        f"<｜tool▁calls▁begin｜>{DS_V31_CALL} stray<｜tool▁calls▁end｜>",
        "<｜tool▁calls▁begin｜><｜tool▁calls▁end｜>",
    ],
)
def test_deepseek_negatives_stay_content(text: str) -> None:
    out = DeepSeek().parse(text, final=True)
    assert out == ParsedOutput(text, [])


def test_deepseek_bad_section_stays_and_later_one_reads() -> None:
    bad = "<｜tool▁calls▁begin｜>nonsense<｜tool▁calls▁end｜>"
    out = DeepSeek().parse(f"{bad} then <｜tool▁calls▁begin｜>{DS_V31_CALL}<｜tool▁calls▁end｜>", final=True)
    assert out.content == f"{bad} then"
    assert [c.name for c in out.calls] == ["get_time"]


def test_deepseek_stream_holds_unclosed_section_and_partial_marker() -> None:
    assert DeepSeek().parse(f"Hi <｜tool▁calls▁begin｜>{DS_V31_CALL}", final=False) == ParsedOutput("Hi", [])
    assert DeepSeek().parse("Hi <｜tool▁ca", final=False).content == "Hi"


# --- Kimi K2 -------------------------------------------------------------------------------------

KIMI_CALL = (
    '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
)
KIMI_CALL2 = (
    '<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{"tz": "CET"}<|tool_call_end|>'
)


def test_kimi_one_call_id_and_name() -> None:
    out = Kimi().parse(f"<|tool_calls_section_begin|>{KIMI_CALL}<|tool_calls_section_end|>", final=True)
    assert out.content == ""
    assert [(c.name, _args(c), c.id) for c in out.calls] == [
        ("get_weather", {"city": "Paris"}, "functions.get_weather:0")
    ]


def test_kimi_two_calls_text_around_and_every_prefix() -> None:
    text = f"Let me look.<|tool_calls_section_begin|>{KIMI_CALL}\n{KIMI_CALL2}<|tool_calls_section_end|> ok"
    out = _check_prefixes(Kimi(), text)
    assert out.content == "Let me look. ok"
    assert [(c.name, c.id) for c in out.calls] == [
        ("get_weather", "functions.get_weather:0"),
        ("get_time", "functions.get_time:1"),
    ]


def test_kimi_large_counter_and_spaces_around_id() -> None:
    call = "<|tool_call_begin|> functions.f:5000000000 <|tool_call_argument_begin|> {} <|tool_call_end|>"
    out = Kimi().parse(f"<|tool_calls_section_begin|>{call}<|tool_calls_section_end|>", final=True)
    assert [(c.name, c.id, c.arguments) for c in out.calls] == [("f", "functions.f:5000000000", "{}")]


def test_kimi_id_without_functions_prefix_as_moonshots_parser_reads_it() -> None:
    call = '<|tool_call_begin|>search:3<|tool_call_argument_begin|>{"q": "x"}<|tool_call_end|>'
    out = Kimi().parse(f"<|tool_calls_section_begin|>{call}<|tool_calls_section_end|>", final=True)
    assert [(c.name, c.id) for c in out.calls] == [("search", "search:3")]


@pytest.mark.parametrize(
    "text",
    [
        "Kimi writes <|tool_calls_section_begin|> before its calls.",
        f"<|tool_calls_section_begin|>{KIMI_CALL}",
        '<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"x"'
        "<|tool_call_end|><|tool_calls_section_end|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f<|tool_call_argument_begin|>{}"
        "<|tool_call_end|><|tool_calls_section_end|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.:0<|tool_call_argument_begin|>{}"
        "<|tool_call_end|><|tool_calls_section_end|>",
        "<|tool_calls_section_begin|><|tool_calls_section_end|>",
    ],
)
def test_kimi_negatives_stay_content(text: str) -> None:
    assert Kimi().parse(text, final=True) == ParsedOutput(text, [])


# --- gpt-oss harmony -----------------------------------------------------------------------------

HARMONY_ANALYSIS = "<|channel|>analysis<|message|>User asks weather; call the tool.<|end|>"
HARMONY_CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"location":"Paris"}<|call|>'
)
HARMONY_CALL2 = (
    '<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{"tz":"CET"}<|call|>'
)


def test_harmony_one_call_drops_analysis() -> None:
    out = Harmony().parse(HARMONY_ANALYSIS + HARMONY_CALL, final=True)
    assert out.content == ""
    assert [(c.name, _args(c)) for c in out.calls] == [("get_weather", {"location": "Paris"})]


def test_harmony_recipient_before_channel() -> None:
    out = Harmony().parse(HARMONY_CALL2, final=True)
    assert [(c.name, _args(c)) for c in out.calls] == [("get_time", {"tz": "CET"})]


def test_harmony_first_message_without_start_and_call_at_answer_end_without_call_token() -> None:
    text = '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}'
    assert [c.name for c in Harmony().parse(text, final=True).calls] == ["f"]
    assert Harmony().parse(text, final=False).calls == []


def test_harmony_two_calls_final_text_and_every_prefix() -> None:
    text = (
        "Sure. "
        + HARMONY_ANALYSIS
        + "<|start|>assistant<|channel|>commentary<|message|>Checking both.<|end|>"
        + HARMONY_CALL
        + HARMONY_CALL2
    )
    out = _check_prefixes(Harmony(), text)
    assert out.content == "Sure. Checking both."
    assert [c.name for c in out.calls] == ["get_weather", "get_time"]


def test_harmony_final_channel_is_content_once_a_call_is_found() -> None:
    text = HARMONY_CALL + "<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>"
    assert Harmony().parse(text, final=True) == ParsedOutput(
        "It is sunny.", [ParsedCall("get_weather", '{"location": "Paris"}')]
    )


@pytest.mark.parametrize(
    "text",
    [
        HARMONY_ANALYSIS + "<|start|>assistant<|channel|>final<|message|>Paris is sunny.<|return|>",
        "A harmony message opens with <|channel|> or <|start|>.",
        "<|start|>assistant<|channel|>commentary to=functions.f json<|message|>[1, 2]<|call|>",
        "<|start|>assistant<|channel|>commentary to=functions.f json<|message|>{bad<|call|>",
        '<|start|>assistant<|channel|>commentary to=functions.f json<|message|>{"a":1} and<|call|>',
        '<|start|>assistant<|channel|>final to=functions.f json<|message|>{"a":1}<|call|>',
        "<|start|>assistant<|channel|>commentary to=functions.f json",
    ],
)
def test_harmony_negatives_stay_content(text: str) -> None:
    assert Harmony().parse(text, final=True) == ParsedOutput(text, [])


def test_harmony_broken_call_stays_verbatim_beside_a_good_one() -> None:
    bad = "<|start|>assistant<|channel|>commentary to=functions.f json<|message|>nope<|call|>"
    out = Harmony().parse(bad + HARMONY_CALL, final=True)
    assert out.content == bad
    assert [c.name for c in out.calls] == ["get_weather"]


def test_harmony_stream_holds_from_the_first_marker_until_a_call() -> None:
    assert Harmony().parse("Hello <|channel|>analysis<|message|>hm", final=False) == ParsedOutput("Hello", [])
    assert Harmony().parse("Hello <|chan", final=False).content == "Hello"


# --- FunctionGemma -------------------------------------------------------------------------------

GEMMA_CALL = (
    "<start_function_call>call:get_current_temperature{location:<escape>Paris<escape>,"
    "unit:<escape>celsius<escape>}<end_function_call>"
)
GEMMA_CALL2 = "<start_function_call>call:roll_die{sides:20}<end_function_call>"


def test_gemma_one_call() -> None:
    out = Gemma().parse(GEMMA_CALL, final=True)
    assert out.content == ""
    assert [(c.name, _args(c), c.id) for c in out.calls] == [
        ("get_current_temperature", {"location": "Paris", "unit": "celsius"}, None)
    ]


def test_gemma_two_calls_text_around_and_every_prefix() -> None:
    text = f"On it.\n{GEMMA_CALL}{GEMMA_CALL2}\nAnything else?"
    out = _check_prefixes(Gemma(), text)
    assert out.content == "On it.\n\nAnything else?"
    assert [(c.name, _args(c)) for c in out.calls] == [
        ("get_current_temperature", {"location": "Paris", "unit": "celsius"}),
        ("roll_die", {"sides": 20}),
    ]


def test_gemma_values_typed_by_schema() -> None:
    text = (
        "<start_function_call>call:f{code:5,n:5,flag:true,tags:[<escape>a<escape>,7],"
        "opts:{depth:2,name:<escape>x, y}<escape>},word:hello,quoted:<escape>5<escape>}<end_function_call>"
    )
    schemas = {
        "f": {
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "opts": {"type": "object", "properties": {"depth": {"type": "string"}}},
            },
        }
    }
    (call,) = Gemma().parse(text, final=True, schemas=schemas).calls
    assert _args(call) == {
        "code": "5",
        "n": 5,
        "flag": True,
        "tags": ["a", 7],
        "opts": {"depth": "2", "name": "x, y}"},
        "word": "hello",
        "quoted": "5",
    }


def test_gemma_empty_arguments_and_spaces() -> None:
    text = "<start_function_call>\ncall:pwd{}\n<end_function_call>"
    assert Gemma().parse(text, final=True).calls == [ParsedCall("pwd", "{}")]
    text = "<start_function_call>call:f{a:<escape>x<escape>, b: 2}<end_function_call>"
    assert _args(Gemma().parse(text, final=True).calls[0]) == {"a": "x", "b": 2}


@pytest.mark.parametrize(
    "text",
    [
        "FunctionGemma writes <start_function_call> before a call.",
        "<start_function_call>call:f{a:1}",
        "<start_function_call>call:f{a:<escape>open}<end_function_call>",
        "<start_function_call>call:f[1,2]<end_function_call>",
        "<start_function_call>call:{a:1}<end_function_call>",
        "<start_function_call>f{a:1}<end_function_call>",
        "<start_function_call>call:f{a:1} trailing<end_function_call>",
        "<start_function_call>call:f{a:1,}<end_function_call>",
        "<start_function_call>call:f{a:" + "[" * 200 + "1" + "]" * 200 + "}<end_function_call>",
    ],
)
def test_gemma_negatives_stay_content(text: str) -> None:
    assert Gemma().parse(text, final=True) == ParsedOutput(text, [])


def test_gemma_stream_holds_unclosed_call_and_partial_marker() -> None:
    assert Gemma().parse("Hi <start_function_call>call:f{a:1}", final=False) == ParsedOutput("Hi", [])
    assert Gemma().parse("Hi <start_func", final=False).content == "Hi"


# --- all of them ---------------------------------------------------------------------------------

SYNTAXES: list[CallSyntax] = [DeepSeek(), Kimi(), Harmony(), Gemma()]


@pytest.mark.parametrize("syntax", SYNTAXES, ids=lambda s: s.name)
def test_interface_facts(syntax: CallSyntax) -> None:
    assert syntax.name in {"deepseek", "kimi", "harmony", "gemma"}
    assert syntax.markers
    assert syntax.ends
    assert syntax.leading_only is False


@pytest.mark.parametrize("syntax", SYNTAXES, ids=lambda s: s.name)
def test_plain_text_is_content(syntax: CallSyntax) -> None:
    assert syntax.parse("Just an answer.", final=True) == ParsedOutput("Just an answer.", [])
    assert syntax.parse("", final=True) == ParsedOutput("", [])
    assert syntax.parse("", final=False) == ParsedOutput("", [])


@pytest.mark.parametrize("syntax", SYNTAXES, ids=lambda s: s.name)
def test_hostile_text_never_raises(syntax: CallSyntax) -> None:
    hostile = [marker * 2000 for marker in syntax.markers] + [
        "".join(syntax.markers + syntax.ends) * 500,
        syntax.markers[0] + "{" * 5000 + syntax.ends[0],
        syntax.markers[0] + '{"a": "' + "x" * 200_000,
        syntax.markers[0] + "[" * 5000,
    ]
    for text in hostile:
        for final in (True, False):
            out = syntax.parse(text, final=final)
            assert isinstance(out.content, str)
