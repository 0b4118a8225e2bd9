"""Hermes 2 Pro / 3, Qwen 2.5 / 3: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

Read by the shared syntax (conformance/tool_formats/hermes.py). Detected, as llama.cpp's common/chat.cpp
does, by ``<tool_call>`` in the chat template. The grammar, lazy under ``auto`` (it starts at
``<tool_call>``), forces the tags and a call that fits one of the tools.
"""

from __future__ import annotations

import re
from typing import Any

from backend.requests import Tool, ToolChoice
from backend.tool_formats.base import GrammarPlan, ToolFormat
from backend.tool_formats.grammar import CALL_RULE, allowed_tools, call_schema, literal, one_of, schema_rules
from conformance.tool_formats.hermes import CLOSE, OPEN
from conformance.tool_formats.hermes import Hermes as HermesSyntax

__all__ = ["Hermes"]


class Hermes(HermesSyntax, ToolFormat):
    def grammar(
        self, tools: list[Tool], choice: ToolChoice, parallel: bool, reply: dict[str, Any] | None
    ) -> GrammarPlan | None:
        if choice.mode == "none":
            return None
        schema = one_of([call_schema(t) for t in allowed_tools(tools, choice)])
        # The tags on lines of their own, as Hermes and Qwen templates write them (a newline before the
        # closing tag refused, a token that wrote it broke the grammar mid-piece).
        one = f'{literal(OPEN)} "\\n"? {CALL_RULE} "\\n"? {literal(CLOSE)}'
        many = parallel and choice.mode != "named"
        root = 'root ::= tagged-call ( "\\n"? tagged-call )*\n' if many else "root ::= tagged-call\n"
        gbnf = root + f"tagged-call ::= {one}\n" + schema_rules(schema)
        lazy = choice.mode == "auto"
        return GrammarPlan(gbnf, (re.escape(OPEN),) if lazy else ())
