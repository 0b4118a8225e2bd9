"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: ``{"name": ..., "parameters": {...}}``, maybe after a python tag.

Read by the shared syntax (conformance/tool_formats/llama3.py). Detected by the ``ipython`` role header
in the template, as llama.cpp's common/chat.cpp does. One call per answer (the Llama 3.x templates render
one).
"""

from __future__ import annotations

import re
from typing import Any

from backend.requests import Tool, ToolChoice
from backend.tool_formats.base import GrammarPlan, ToolFormat
from backend.tool_formats.grammar import CALL_RULE, allowed_tools, call_schema, literal, one_of, schema_rules
from conformance.tool_formats.llama3 import PYTHON_TAG
from conformance.tool_formats.llama3 import Llama3 as Llama3Syntax

__all__ = ["Llama3"]


class Llama3(Llama3Syntax, ToolFormat):
    def grammar(
        self, tools: list[Tool], choice: ToolChoice, parallel: bool, reply: dict[str, Any] | None
    ) -> GrammarPlan | None:
        if choice.mode == "none":
            return None
        schema = one_of([call_schema(t, arguments_key="parameters") for t in allowed_tools(tools, choice)])
        gbnf = f"root ::= {literal(PYTHON_TAG)}? {CALL_RULE}\n" + schema_rules(schema)
        if choice.mode != "auto":
            return GrammarPlan(gbnf)
        # Lazy: from the python tag, or from a '{"name"' that opens the answer.
        trigger = r"^\s*(" + re.escape(PYTHON_TAG) + r'|\{\s*"name")[\s\S]*$'
        return GrammarPlan(gbnf, (trigger,))
