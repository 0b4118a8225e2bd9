"""Qwen3-Coder and Qwen 3.5: ``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n
</function>\\n</tool_call>``.

Read by the shared syntax (conformance/tool_formats/qwen_xml.py). Detected, before Hermes (both open a
call with ``<tool_call>``), by ``<tool_call>``, ``<function=`` and ``<parameter=`` in the template, as
llama.cpp's common_chat_templates_apply_jinja does. The grammar is the one
common_chat_params_init_qwen3_coder_xml builds (its ``xml_tool_call_format``: the newlines the template
writes around each tag), a value being text or JSON by its schema (backend/tool_formats/xml_grammar.py);
lazy under ``auto`` from ``<tool_call>``.
"""

from __future__ import annotations

import re

from backend.requests import Tool
from backend.tool_formats.base import ToolFormat
from backend.tool_formats.grammar import literal
from backend.tool_formats.xml_grammar import XmlArguments, xml_blocks
from conformance.tool_formats.qwen_xml import BLOCK_CLOSE, BLOCK_OPEN
from conformance.tool_formats.qwen_xml import QwenXml as QwenXmlSyntax

__all__ = ["QwenXml"]

_FORM = XmlArguments(
    before=lambda key: literal(f"<parameter={key}>\n"),
    any_key='"<parameter=" [A-Za-z_] [A-Za-z0-9_.-]* ">\\n"',
    after="\n</parameter>\n",
)


class QwenXml(QwenXmlSyntax, ToolFormat):
    triggers = (re.escape(BLOCK_OPEN),)

    def calls_grammar(self, tools: list[Tool], *, many: bool, lazy: bool) -> str:
        return xml_blocks(
            tools,
            _FORM,
            lambda name: literal(f"{BLOCK_OPEN}\n<function={name}>\n"),
            f"</function>\n{BLOCK_CLOSE}",
            many,
        )
