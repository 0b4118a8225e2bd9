"""Each tool-call parser on outputs its model family really writes, as published by the family's makers
(or recorded by llama.cpp's own tests), streamed and whole; and the format picked from the template."""

# ruff: noqa: RUF001 -- DeepSeek's tokens are spelled with full-width bars (U+FF5C).

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from backend.requests import Tool, ToolChoice
from backend.tool_formats import (
    DeepSeek,
    Gemma,
    Generic,
    Glm,
    Granite,
    Harmony,
    Hermes,
    Kimi,
    Llama3,
    Mistral,
    ParsedCall,
    QwenXml,
    ToolCallStream,
    ToolFormat,
    detect_format,
)
from backend.tool_formats.stream import CallFragment


@dataclass(frozen=True)
class Recorded:
    source: str
    fmt: ToolFormat
    output: str
    calls: list[tuple[str, dict[str, object]]]
    content: str = ""


RECORDED = [
    Recorded(
        "https://huggingface.co/NousResearch/Hermes-2-Pro-Llama-3-8B (model card, function calling example)",
        Hermes(),
        '<tool_call>\n{"arguments": {"symbol": "TSLA"}, "name": "get_stock_fundamentals"}\n</tool_call>',
        [("get_stock_fundamentals", {"symbol": "TSLA"})],
    ),
    Recorded(
        "https://qwen.readthedocs.io/en/latest/framework/function_call.html (Qwen2.5, parallel calls)",
        Hermes(),
        '<tool_call>\n{"name": "get_current_temperature", "arguments": '
        '{"location": "San Francisco, CA, USA"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "get_temperature_date", "arguments": {"location": "San Francisco, CA, USA", "date": '
        '"2024-10-01"}}\n</tool_call>',
        [
            ("get_current_temperature", {"location": "San Francisco, CA, USA"}),
            ("get_temperature_date", {"location": "San Francisco, CA, USA", "date": "2024-10-01"}),
        ],
    ),
    Recorded(
        "https://github.com/ggml-org/llama.cpp/blob/master/tests/test-chat.cpp (Hermes 2 Pro: text, a call)",
        Hermes(),
        "Hello, world!\nWhat's up?"
        '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
        [("special_function", {"arg1": 1})],
        "Hello, world!\nWhat's up?",
    ),
    Recorded(
        "https://www.llama.com/docs/model-cards-and-prompt-formats/llama3_1/ (JSON based tool calling)",
        Llama3(),
        '{"name": "get_current_conditions", '
        '"parameters": {"location": "San Francisco, CA", "unit": "Fahrenheit"}}',
        [("get_current_conditions", {"location": "San Francisco, CA", "unit": "Fahrenheit"})],
    ),
    Recorded(
        "https://www.llama.com/docs/model-cards-and-prompt-formats/llama3_1/ (built-in tool, brave_search)",
        Llama3(),
        '<|python_tag|>brave_search.call(query="current weather in Menlo Park, California")',
        [("brave_search", {"query": "current weather in Menlo Park, California"})],
    ),
    Recorded(
        "https://github.com/ggml-org/llama.cpp/blob/master/tests/test-chat.cpp (Mistral Nemo Instruct 2407)",
        Mistral(),
        '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]',
        [("special_function", {"arg1": 1})],
    ),
    Recorded(
        "https://huggingface.co/mistralai/Mistral-7B-Instruct-v0.3 (function calling with mistral_inference)",
        Mistral(),
        '[TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"location": "Paris, France", "format": '
        '"celsius"}}]',
        [("get_current_weather", {"location": "Paris, France", "format": "celsius"})],
    ),
    Recorded(
        "https://github.com/ggml-org/llama.cpp/blob/master/tests/test-chat.cpp (Ministral 3 / Magistral)",
        Mistral(),
        '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}'
        '[TOOL_CALLS]special_function_with_opt[ARGS]{"arg1": 1, "arg2": 2}',
        [("special_function", {"arg1": 1}), ("special_function_with_opt", {"arg1": 1, "arg2": 2})],
    ),
    Recorded(
        "https://github.com/ggml-org/llama.cpp/blob/b4800/tests/test-chat.cpp (generic format, a call)",
        Generic(),
        '{\n  "tool_call": {\n    "name": "special_function",\n'
        '    "arguments": {\n      "arg1": 1\n    }\n  }\n}',
        [("special_function", {"arg1": 1})],
    ),
    Recorded(
        "https://github.com/ggml-org/llama.cpp/blob/b4800/tests/test-chat.cpp (generic format, parallel)",
        Generic(),
        '{"tool_calls": [{"name": "special_function", "arguments": {"arg1": 1}}, '
        '{"name": "python", "arguments": {"code": "print(\'hey\')"}}]}',
        [("special_function", {"arg1": 1}), ("python", {"code": "print('hey')"})],
    ),
    Recorded(
        "https://github.com/ggml-org/llama.cpp/blob/b4800/tests/test-chat.cpp (generic format, a reply)",
        Generic(),
        '{\n  "response": "Hello, world!\\nWhat\'s up?"\n}',
        [],
        "Hello, world!\nWhat's up?",
    ),
]


def _calls(calls: list[ParsedCall]) -> list[tuple[str, object]]:
    return [(c.name, json.loads(c.arguments)) for c in calls]


def _joined(fragments: list[CallFragment]) -> list[tuple[str, object]]:
    """Fragments joined as the SDKs join them: by index, the name from the first one."""
    calls: dict[int, list[str]] = {}
    for f in fragments:
        if f.name is not None:
            assert f.index not in calls
            assert f.index == len(calls)
            calls[f.index] = [f.name, ""]
        else:
            calls[f.index][1] += f.arguments
    return [(name, json.loads(arguments)) for name, arguments in calls.values()]


@pytest.mark.parametrize("case", RECORDED, ids=lambda c: f"{c.fmt.name}:{c.source[8:40]}")
def test_recorded_output_parses_whole(case: Recorded) -> None:
    parsed = case.fmt.parse(case.output, final=True)
    assert _calls(parsed.calls) == case.calls
    assert parsed.content == case.content


@pytest.mark.parametrize("case", RECORDED, ids=lambda c: f"{c.fmt.name}:{c.source[8:40]}")
@pytest.mark.parametrize("step", [1, 3, 7])
def test_recorded_output_parses_streamed_and_no_call_leaks_into_content(case: Recorded, step: int) -> None:
    stream = ToolCallStream(type(case.fmt)())
    content, calls = "", []
    for i in range(0, len(case.output), step):
        text, new = stream.feed(case.output[i : i + step])
        content += text
        calls += new
    text, new = stream.finish()
    assert _joined(calls + new) == case.calls
    assert content + text == case.content


def test_prose_streams_as_content_and_a_marker_prefix_is_held_back() -> None:
    stream = ToolCallStream(Hermes())
    assert stream.feed("The answer <tool") == ("The answer ", [])
    assert stream.feed("kit> is here") == ("<toolkit> is here", [])
    assert stream.finish() == ("", [])


def test_prose_that_only_looks_like_a_call_stays_content() -> None:
    for fmt, text in [
        (Llama3(), "Sure! {not json"),
        (Llama3(), '{"no_name": 1}'),
        (Hermes(), "<tool_call>not json</tool_call>"),
        (Mistral(), "[TOOL_CALLS] oops"),
        (Generic(), "plain words"),
    ]:
        parsed = fmt.parse(text, final=True)
        assert (parsed.content, parsed.calls) == (text, [])


def test_mistral_call_ids_fit_its_templates() -> None:
    ids = {Mistral().new_call_id() for _ in range(20)}
    assert all(len(i) == 9 and i.isalnum() for i in ids)
    assert len(ids) == 20
    assert Hermes().new_call_id().startswith("call_")


@pytest.mark.parametrize(
    ("template", "name"),
    [
        ("{% for tool in tools %}{{ tool | tojson }}{% endfor %}<tool_call>", "hermes"),
        ("{{ '[AVAILABLE_TOOLS]' }}{{ '[TOOL_CALLS]' }}", "mistral"),
        ("<|start_header_id|>ipython<|end_header_id|>", "llama3"),
        ("{{ bos_token }}<start_of_turn>user", "generic"),
        (None, "generic"),
    ],
)
def test_format_is_detected_from_the_template(template: str | None, name: str) -> None:
    assert detect_format(template).name == name


def test_generic_calls_stream_one_by_one_and_survive_a_cut() -> None:
    stream = ToolCallStream(Generic())
    assert stream.feed('{"tool_calls": [{"name": "a", "arguments": {"x"') == (
        "",
        [CallFragment(0, "a", ""), CallFragment(0, None, '{"x"')],
    )
    assert stream.feed(": 1}}, {") == ("", [CallFragment(0, None, ": 1}")])
    assert stream.feed('"name": "b", "arguments": {}}, {"name": "c", "argu') == (
        "",
        [CallFragment(1, "b", ""), CallFragment(1, None, "{}")],
    )
    assert stream.finish() == ("", [])  # cut by max_tokens before the third call's arguments


def test_arguments_stream_as_they_are_written() -> None:
    stream = ToolCallStream(Hermes())
    pieces = [
        "<tool_call>\n",
        '{"name": "f", ',
        '"arguments": {"q": "a',
        ' } b"',
        ', "n": [1, {}]',
        "}}\n</tool_call>",
    ]
    out = [stream.feed(p) for p in pieces] + [stream.finish()]
    assert out == [
        ("", []),
        ("", []),
        ("", [CallFragment(0, "f", ""), CallFragment(0, None, '{"q": "a')]),
        ("", [CallFragment(0, None, ' } b"')]),
        ("", [CallFragment(0, None, ', "n": [1, {}]')]),
        ("", [CallFragment(0, None, "}")]),
        ("", []),
    ]


def test_generic_reply_streams_as_written_and_survives_a_cut() -> None:
    stream = ToolCallStream(Generic())
    out = [stream.feed(p)[0] for p in ['{"resp', 'onse": "Hel', "lo \\u00e", '9t\\u00e9 \\"x', '\\" and']]
    assert out == ["", "Hel", "lo ", 'été "x', '" and']
    assert stream.finish() == ("", [])
    assert Generic().parse('{"response": "cut \\u00', final=True).content == "cut "


def test_a_generic_call_cut_off_is_read_whole_as_it_streamed_not_as_its_envelope() -> None:
    # A whole answer that max_tokens cut inside the call's arguments: the call with its arguments so far
    # (the answer finishes "length", as OpenAI's cut call), as the stream gave it; the envelope's JSON
    # was the message's text, which a client showed.
    cut = '{ "tool_call": {"name": "get_weather", "arguments": {"city'
    parsed = Generic().parse(cut, final=True)
    assert parsed.content == ""
    assert parsed.calls == [ParsedCall("get_weather", '{"city')]
    stream = ToolCallStream(Generic())
    streamed = [stream.feed(cut), stream.finish()]
    assert [f for _, fragments in streamed for f in fragments] == [
        CallFragment(0, "get_weather", ""),
        CallFragment(0, None, '{"city'),
    ]
    assert Generic().parse('{ "tool_call": {"na', final=True).content == '{ "tool_call": {"na'  # no name yet


def test_a_generic_call_cut_before_its_arguments_is_the_call_its_name_or_choice_tells() -> None:
    """As the proxy's JSON-output calls (conformance.generic_tools.cut_call_name): black-box testing found
    a forced call cut at 3 tokens shown as its envelope's text."""
    weather, time = Tool("get_weather", None, {"type": "object"}), Tool("get_time", None, {"type": "object"})
    forced = Generic().bound([weather, time], ToolChoice("named", "get_time"))
    assert forced.read('{"tool_call": {"', final=True).calls == [ParsedCall("get_time", "")]
    auto = Generic().bound([weather, time], ToolChoice())
    assert auto.read('{"tool_call": {"name": "get_w', final=True).calls == [ParsedCall("get_weather", "")]
    many = Generic().bound([weather, time], ToolChoice("required"))
    assert many.read('{"tool_calls": [{"name": "get_t', final=True).calls == [ParsedCall("get_time", "")]
    # Which call, or whether a call at all, not told yet: the text it was.
    assert auto.read('{"', final=True).content == '{"'
    # Arguments begun: as far as they came, as the stream gave them (found by review: read as none).
    cut = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Par'
    assert many.read(cut, final=True).calls == [ParsedCall("get_weather", '{"city": "Par')]
    # Under allowed_tools the name is told among the tools allowed, not all of them.
    allowed = Generic().bound([weather, time], ToolChoice("auto", allowed=("get_time",)))
    assert allowed.read('{"tool_call": {"name": "get_', final=True).calls == [ParsedCall("get_time", "")]
    assert many.read('{"tool_call": {"name": "get_', final=True).content == '{"tool_call": {"name": "get_'


# ---- the families beyond Hermes, Mistral and Llama 3: detection, and grammars that write what parses ----

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}
ARGUMENTS = {"city": "Paris", "days": 3}


@dataclass(frozen=True)
class Family:
    fmt: ToolFormat
    template: str
    """A snippet of the family's chat template that holds the markers llama.cpp detects it by."""
    call: str
    """A call to get_weather(city="Paris", days=3) as the family writes it."""


FAMILIES = [
    Family(
        DeepSeek(v3_1=True),
        "{%- if message['prefix'] is defined and message['prefix'] and thinking %}<｜tool▁calls▁begin｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        '{"city": "Paris", "days": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    ),
    Family(
        DeepSeek(),
        "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>'}}",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city": "Paris", "days": 3}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    ),
    Family(
        Kimi(),
        "<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|tool_calls_section_begin|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Paris", "days": 3}<|tool_call_end|><|tool_calls_section_end|>',
    ),
    Family(
        Granite(),
        "{%- elif thinking %}{{- '<|tool_call|>' + tool_calls | tojson }}",
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
    ),
    Family(
        Harmony(),
        "{{- '<|start|>assistant<|channel|>commentary to=functions.' + name }}",
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city": "Paris", "days": 3}<|call|>',
    ),
    Family(
        QwenXml(),
        "<tool_call>\n<function={{ name }}>\n<parameter={{ key }}>\n",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
    ),
    Family(
        Gemma(),
        "{{- '<start_function_call>call:' + function['name'] + '{' -}}",
        "<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>",
    ),
    Family(
        Glm(),
        "[gMASK]<sop><tool_call>{{ name }}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value>",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
    ),
]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A synthetic model's vocabulary, loaded alone: grammars are checked over its byte tokens."""
    ll = pytest.importorskip("llama_cpp")
    from backend.synthetic import SyntheticSpec, write_synthetic

    path = write_synthetic(tmp_path_factory.mktemp("vocab") / "vocab.gguf", SyntheticSpec())
    params = ll.llama_model_default_params()
    params.vocab_only = True
    model = ll.llama_model_load_from_file(str(path).encode(), params)
    assert model
    yield ll.llama_model_get_vocab(model)
    ll.llama_model_free(model)


def _accepts(vocab: Any, gbnf: str, text: str) -> bool:
    """Whether the grammar takes ``text`` whole (fed byte by byte) and may end after it."""
    import llama_cpp as ll

    from backend.lazy_grammar import _fits, grammar_sampler
    from backend.synthetic import vocabulary

    tokens = vocabulary()[0]
    grammar = grammar_sampler(vocab, gbnf)
    assert grammar, "the grammar does not parse"
    try:
        for byte in text.encode():
            token = tokens.index(f"<0x{byte:02X}>")
            if not _fits(grammar, token):
                return False
            ll.llama_sampler_accept(grammar, token)
        return _fits(grammar, ll.llama_vocab_eos(vocab))
    finally:
        ll.llama_sampler_free(grammar)


def _weather_tools() -> list[Tool]:
    return [Tool("get_time", None, {"type": "object"}), Tool("get_weather", None, WEATHER)]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.fmt.name)
def test_a_family_is_detected_from_its_template(family: Family) -> None:
    assert detect_format(family.template).name == family.fmt.name


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.fmt.name)
def test_a_familys_call_parses_back_whole_and_streamed(family: Family) -> None:
    parsed = family.fmt.parse(family.call, final=True, schemas={"get_weather": WEATHER})
    assert (parsed.content, _calls(parsed.calls)) == ("", [("get_weather", ARGUMENTS)])
    stream = ToolCallStream(family.fmt)
    content, fragments = "", list[CallFragment]()
    for i in range(0, len(family.call), 5):
        text, new = stream.feed(family.call[i : i + 5])
        content, fragments = content + text, fragments + new
    text, new = stream.finish()
    assert (content + text, _joined(fragments + new)) == ("", [("get_weather", ARGUMENTS)])


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.fmt.name)
@pytest.mark.parametrize(
    "choice", [ToolChoice("required"), ToolChoice("named", "get_weather")], ids=lambda c: c.mode
)
def test_a_forced_grammar_writes_the_familys_call(family: Family, choice: ToolChoice, vocab: Any) -> None:
    plan = family.fmt.grammar(_weather_tools(), choice, True, None)
    assert plan is not None
    assert not plan.lazy
    assert _accepts(vocab, plan.gbnf, family.call)
    other = family.call.replace("get_weather", "get_wether")
    assert not _accepts(vocab, plan.gbnf, other)  # only the offered functions
    assert not _accepts(vocab, plan.gbnf, family.call.replace("3", "three"))  # days is an integer
    assert family.fmt.grammar(_weather_tools(), ToolChoice("none"), True, None) is None


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.fmt.name)
def test_a_lazy_grammar_starts_at_the_familys_marker(family: Family, vocab: Any) -> None:
    plan = family.fmt.grammar(_weather_tools(), ToolChoice("auto"), True, None)
    assert plan is not None
    assert plan.lazy
    prose = "Let me look that up. "
    starts = [m.start() for t in plan.triggers if (m := re.search(t, prose + family.call))]
    assert starts == [len(prose)] or min(starts) == len(prose)
    assert not any(re.search(t, prose) for t in plan.triggers)
    assert _accepts(vocab, plan.gbnf, family.call)


def test_a_named_choice_writes_only_that_function(vocab: Any) -> None:
    tools = [Tool("get_time", None, {"type": "object"}), Tool("get_weather", None, WEATHER)]
    plan = Kimi().grammar(tools, ToolChoice("named", "get_time"), True, None)
    assert plan is not None
    call = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{}"
        "<|tool_call_end|><|tool_calls_section_end|>"
    )
    assert _accepts(vocab, plan.gbnf, call)
    assert not _accepts(vocab, plan.gbnf, FAMILIES[2].call)


def test_an_xml_string_value_is_any_text_without_its_closing_tag(vocab: Any) -> None:
    plan = QwenXml().grammar(_weather_tools(), ToolChoice("required"), False, None)
    assert plan is not None
    code = "if a < b:\n    print('<b>x</b>')"
    assert _accepts(vocab, plan.gbnf, FAMILIES[5].call.replace("Paris", code))
    assert not _accepts(vocab, plan.gbnf, FAMILIES[5].call.replace("Paris", "a\n</parameter>\nb"))


def test_harmony_forced_may_think_first(vocab: Any) -> None:
    plan = Harmony().grammar(_weather_tools(), ToolChoice("required"), False, None)
    assert plan is not None
    thought = "<|channel|>analysis<|message|>The user wants <b>weather</b>.<|end|><|start|>assistant"
    assert _accepts(vocab, plan.gbnf, thought + FAMILIES[4].call)
    parsed = Harmony().parse(thought + FAMILIES[4].call, final=True)
    assert _calls(parsed.calls) == [("get_weather", ARGUMENTS)]


def test_a_format_bound_to_a_requests_tools_types_text_values_by_their_schema() -> None:
    """A value a syntax writes as text is read by its parameter's type: ``"5"`` for a string parameter
    stays the string it was (unbound, it reads as the number 5)."""
    from backend.tool_formats.qwen_xml import QwenXml

    tool = Tool(
        "lookup",
        None,
        {"type": "object", "properties": {"zip": {"type": "string"}, "n": {"type": "integer"}}},
    )
    text = (
        "<tool_call>\n<function=lookup>\n<parameter=zip>\n5\n</parameter>\n"
        "<parameter=n>\n5\n</parameter>\n</function>\n</tool_call>"
    )
    (call,) = QwenXml().bound([tool], ToolChoice()).read(text, final=True).calls
    assert json.loads(call.arguments) == {"zip": "5", "n": 5}
    (unbound,) = QwenXml().read(text, final=True).calls
    assert json.loads(unbound.arguments) == {"zip": 5, "n": 5}
