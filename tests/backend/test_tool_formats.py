"""Each tool-call parser on outputs its model family really writes, as published by the family's makers
(or recorded by llama.cpp's own tests), streamed and whole; and the format picked from the template."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from backend.tool_formats import (
    Generic,
    Hermes,
    Llama3,
    Mistral,
    ParsedCall,
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
