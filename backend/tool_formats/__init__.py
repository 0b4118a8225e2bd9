"""Tool-call formats: one module per model family, picked from the chat template as llama.cpp does.

llama.cpp's common/chat.cpp (and its docs/function-calling.md) picks a format by looking for its markers
in the template's source; templates that show none get the generic JSON format. The same rule here:
``<tool_call>`` -> Hermes/Qwen, ``[TOOL_CALLS]`` -> Mistral, an ``ipython`` header -> Llama 3.x JSON,
anything else -> generic.
"""

from __future__ import annotations

from backend.tool_formats.base import GrammarPlan, ParsedCall, ParsedOutput, ToolFormat
from backend.tool_formats.generic import Generic
from backend.tool_formats.hermes import Hermes
from backend.tool_formats.llama3 import Llama3
from backend.tool_formats.mistral import Mistral
from backend.tool_formats.stream import ToolCallStream

__all__ = [
    "Generic",
    "GrammarPlan",
    "Hermes",
    "Llama3",
    "Mistral",
    "ParsedCall",
    "ParsedOutput",
    "ToolCallStream",
    "ToolFormat",
    "detect_format",
]


def detect_format(template_source: str | None) -> ToolFormat:
    source = template_source or ""
    if "<tool_call>" in source:
        return Hermes()
    if "[TOOL_CALLS]" in source:
        return Mistral()
    if "<|start_header_id|>" in source and "ipython" in source:
        return Llama3()
    return Generic()
