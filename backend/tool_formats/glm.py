"""GLM 4.5 / 4.6 / 4.7: ``<tool_call>NAME\\n<arg_key>KEY</arg_key>\\n<arg_value>VALUE</arg_value>\\n...
</tool_call>``.

Read by the shared syntax (conformance/tool_formats/glm.py). Detected, before Hermes (both open a call
with ``<tool_call>``), by ``<arg_key>`` and ``<arg_value>`` in the template (llama.cpp's
common_chat_templates_apply_jinja also asks for ``[gMASK]<sop>``). The grammar is the one
common_chat_params_init_glm_4_5 builds (its ``xml_tool_call_format``; the newlines between tags optional,
as GLM-4.7's template writes none), a value being text or JSON by its schema
(backend/tool_formats/xml_grammar.py); lazy under ``auto`` from ``<tool_call>``.
"""

from __future__ import annotations

import re

from backend.requests import Tool
from backend.tool_formats.base import ToolFormat
from backend.tool_formats.grammar import literal
from backend.tool_formats.xml_grammar import XmlArguments, xml_blocks
from conformance.tool_formats.glm import CLOSE_TAG, OPEN_TAG
from conformance.tool_formats.glm import Glm as GlmSyntax

__all__ = ["Glm"]

_FORM = XmlArguments(
    before=lambda key: f'{literal(f"<arg_key>{key}</arg_key>")} "\\n"? "<arg_value>"',
    any_key='"<arg_key>" [A-Za-z_] [A-Za-z0-9_.-]* "</arg_key>" "\\n"? "<arg_value>"',
    after="</arg_value>",
    trailer='"\\n"?',
)


class Glm(GlmSyntax, ToolFormat):
    triggers = (re.escape(OPEN_TAG),)

    def calls_grammar(self, tools: list[Tool], *, many: bool, lazy: bool) -> str:
        return xml_blocks(tools, _FORM, lambda name: f'{literal(OPEN_TAG + name)} "\\n"?', CLOSE_TAG, many)
