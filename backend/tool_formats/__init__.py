"""Tool-call formats: one module per model family, picked from the chat template as llama.cpp does.

llama.cpp's common/chat.cpp (``common_chat_templates_apply_jinja``) picks a format by looking for its
markers in the template's source, in a fixed order (the more specific before the more general: the XML
bodies of Qwen3-Coder and GLM before Hermes's JSON one, which all open with ``<tool_call>``); templates
that show none get the generic JSON format. :data:`DETECTION` is that order, one row per format, each
row the markers that must all be in the template (llama.cpp asks some families for more, e.g. Kimi's
``tool_declare`` turn; the markers here are the ones their calls are written with).
"""

# ruff: noqa: RUF001 -- DeepSeek's tokens are spelled with full-width bars (U+FF5C).
from __future__ import annotations

from collections.abc import Callable

from backend.tool_formats.base import GrammarPlan, ParsedCall, ParsedOutput, ToolFormat
from backend.tool_formats.deepseek import V3_1_MARK, DeepSeek
from backend.tool_formats.gemma import Gemma
from backend.tool_formats.generic import Generic
from backend.tool_formats.glm import Glm
from backend.tool_formats.granite import Granite
from backend.tool_formats.harmony import Harmony
from backend.tool_formats.hermes import Hermes
from backend.tool_formats.kimi import Kimi
from backend.tool_formats.llama3 import Llama3
from backend.tool_formats.mistral import Mistral
from backend.tool_formats.qwen_xml import QwenXml
from backend.tool_formats.stream import ToolCallStream

__all__ = [
    "DETECTION",
    "DeepSeek",
    "Gemma",
    "Generic",
    "Glm",
    "GrammarPlan",
    "Granite",
    "Harmony",
    "Hermes",
    "Kimi",
    "Llama3",
    "Mistral",
    "ParsedCall",
    "ParsedOutput",
    "QwenXml",
    "ToolCallStream",
    "ToolFormat",
    "detect_format",
]

DETECTION: tuple[tuple[tuple[str, ...], Callable[[], ToolFormat]], ...] = (
    ((V3_1_MARK,), lambda: DeepSeek(v3_1=True)),
    (("<｜tool▁calls▁begin｜>",), DeepSeek),
    (("<|tool_call|>",), Granite),
    (("<start_function_call>",), Gemma),
    (("<arg_key>", "<arg_value>"), Glm),
    (("<tool_call>", "<function=", "<parameter="), QwenXml),
    (("<tool_call>",), Hermes),
    (("<|channel|>",), Harmony),
    (("<|tool_calls_section_begin|>",), Kimi),
    (("<|start_header_id|>", "ipython"), Llama3),
    (("[TOOL_CALLS]",), Mistral),
)
"""(markers the template must all hold, the format) in llama.cpp's order; the first row that fits wins."""


def detect_format(template_source: str | None) -> ToolFormat:
    source = template_source or ""
    for markers, make in DETECTION:
        if all(marker in source for marker in markers):
            return make()
    return Generic()
