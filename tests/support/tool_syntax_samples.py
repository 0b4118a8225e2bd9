# ruff: noqa: RUF001  (DeepSeek's tokens are written with full-width bars: the text as the model writes it)
"""One model answer per tool-call syntax the project reads (conformance/tool_formats/catalog.py): prose
before, two calls of the offered functions, prose after where the format lets a model write it. Written
as each family's template and llama.cpp's tests/test-chat.cpp show them (the syntax modules cite the
sources); shared by the proxy's, the clients' and the judge's tests of calls left as text (issue 34)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["CALLS", "SAMPLES", "TOOLS", "Sample"]

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The local time in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
]

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_weather", {"city": "Paris", "days": 2}),
    ("get_time", {"city": "Tokyo"}),
]
"""The calls every sample holds, in order (Llama 3.x's joined by ``;``, harmony's in two messages)."""

_W, _T = (json.dumps(arguments) for _, arguments in CALLS)
_FENCE = "```"


@dataclass(frozen=True, slots=True)
class Sample:
    syntax: str
    text: str
    content: str
    """The content left once the calls are taken out."""


SAMPLES: tuple[Sample, ...] = (
    Sample(
        "hermes",
        "Let me look.\n"
        f'<tool_call>\n{{"name": "get_weather", "arguments": {_W}}}\n</tool_call>\n'
        f'<tool_call>\n{{"name": "get_time", "arguments": {_T}}}\n</tool_call>',
        "Let me look.",
    ),
    Sample(
        "qwen-xml",
        "Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=get_time>\n<parameter=city>\nTokyo\n</parameter>\n</function>\n</tool_call>",
        "Let me look.",
    ),
    Sample(
        "glm",
        "Let me look.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>\n"
        "<tool_call>get_time\n<arg_key>city</arg_key>\n<arg_value>Tokyo</arg_value>\n</tool_call>",
        "Let me look.",
    ),
    Sample(
        "mistral",
        f"[TOOL_CALLS]get_weather[ARGS]{_W}[TOOL_CALLS]get_time[ARGS]{_T}",
        "",
    ),
    Sample(
        "granite",
        f'Let me look.<|tool_call|>[{{"name": "get_weather", "arguments": {_W}}}, '
        f'{{"name": "get_time", "arguments": {_T}}}]',
        "Let me look.",
    ),
    Sample(
        "deepseek",
        "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        f"{_FENCE}json\n{_W}\n{_FENCE}<｜tool▁call▁end｜>\n"
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
        f"{_FENCE}json\n{_T}\n{_FENCE}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "Let me look.",
    ),
    Sample(
        "kimi",
        "Let me look.<|tool_calls_section_begin|>"
        f"<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{_W}<|tool_call_end|>"
        f"<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{_T}<|tool_call_end|>"
        "<|tool_calls_section_end|>",
        "Let me look.",
    ),
    Sample(
        "harmony",
        "<|channel|>analysis<|message|>The user wants the weather; call the tool.<|end|>"
        f"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{_W}"
        f"<|call|><|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>"
        f"{_T}<|call|>",
        "",
    ),
    Sample(
        "gemma",
        "Let me look.<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:2}"
        "<end_function_call><start_function_call>call:get_time{city:<escape>Tokyo<escape>}"
        "<end_function_call>",
        "Let me look.",
    ),
    Sample(
        "llama3",
        f'{{"name": "get_weather", "parameters": {_W}}}; {{"name": "get_time", "parameters": {_T}}}',
        "",
    ),
)
