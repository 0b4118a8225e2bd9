"""Hermes 2 Pro / 3, Qwen 2.5 / 3: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

Read by the shared syntax (conformance/tool_formats/hermes.py). Detected, as llama.cpp's common/chat.cpp
does, by ``<tool_call>`` in the chat template. The grammar, lazy under ``auto`` (it starts at
``<tool_call>``), forces the tags and a call that fits one of the tools.
"""

from __future__ import annotations

import re

from backend.requests import Tool
from backend.tool_formats.base import ToolFormat
from backend.tool_formats.grammar import (
    CALL_RULE,
    OPTIONAL_NEWLINE,
    call_schema,
    literal,
    one_of,
    repeated,
    schema_rules,
)
from conformance.tool_formats.hermes import CLOSE, OPEN
from conformance.tool_formats.hermes import Hermes as HermesSyntax

__all__ = ["Hermes"]


class Hermes(HermesSyntax, ToolFormat):
    triggers = (re.escape(OPEN),)

    def calls_grammar(self, tools: list[Tool], *, many: bool, lazy: bool) -> str:
        schema = one_of([call_schema(t) for t in tools])
        # The tags on lines of their own, as Hermes and Qwen templates write them (a newline before the
        # closing tag refused, a token that wrote it broke the grammar mid-piece).
        one = f"{literal(OPEN)} {OPTIONAL_NEWLINE} {CALL_RULE} {OPTIONAL_NEWLINE} {literal(CLOSE)}"
        root = f"root ::= {repeated('tagged-call', many, OPTIONAL_NEWLINE)}\n"
        return root + f"tagged-call ::= {one}\n" + schema_rules(schema)
