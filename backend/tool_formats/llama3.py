"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: ``{"name": ..., "parameters": {...}}``, maybe after a python tag.

Read by the shared syntax (conformance/tool_formats/llama3.py). Detected by the ``ipython`` role header
in the template, as llama.cpp's common/chat.cpp does. One call per answer (the Llama 3.x templates render
one).
"""

from __future__ import annotations

import re

from backend.requests import Tool
from backend.tool_formats.base import ToolFormat
from backend.tool_formats.grammar import CALL_RULE, call_schema, literal, one_of, schema_rules
from conformance.tool_formats.llama3 import PYTHON_TAG
from conformance.tool_formats.llama3 import Llama3 as Llama3Syntax

__all__ = ["Llama3"]


class Llama3(Llama3Syntax, ToolFormat):
    # Lazy: from the python tag, or from a '{"name"' that opens the answer.
    triggers = (r"^\s*(" + re.escape(PYTHON_TAG) + r'|\{\s*"name")[\s\S]*$',)

    def calls_grammar(self, tools: list[Tool], *, many: bool, lazy: bool) -> str:
        # One call whatever ``many`` says: the Llama 3.x templates render one.
        schema = one_of([call_schema(t, arguments_key="parameters") for t in tools])
        return f"root ::= {literal(PYTHON_TAG)}? {CALL_RULE}\n" + schema_rules(schema)
