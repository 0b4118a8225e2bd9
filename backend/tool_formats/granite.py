"""IBM Granite 3.x: ``<|tool_call|>[{"name": ..., "arguments": {...}}, ...]``.

Read by the shared syntax (conformance/tool_formats/granite.py). Detected by ``<|tool_call|>`` in the
template (llama.cpp's common_chat_templates_apply_jinja also asks for the ``elif thinking`` of Granite
3.2+; Granite 3.0 / 3.1 templates write the same calls without it). The grammar is
common_chat_params_init_granite's: the marker, then a JSON array of call objects (one under a named
function or without parallel calls); lazy under ``auto`` from the marker.
"""

from __future__ import annotations

import re
from typing import Any

from backend.requests import Tool, ToolChoice
from backend.tool_formats.base import GrammarPlan, ToolFormat
from backend.tool_formats.grammar import CALL_RULE, allowed_tools, call_schema, literal, one_of, schema_rules
from conformance.tool_formats.granite import MARKER
from conformance.tool_formats.granite import Granite as GraniteSyntax

__all__ = ["Granite"]


class Granite(GraniteSyntax, ToolFormat):
    def grammar(
        self, tools: list[Tool], choice: ToolChoice, parallel: bool, reply: dict[str, Any] | None
    ) -> GrammarPlan | None:
        if choice.mode == "none":
            return None
        schema = one_of([call_schema(t) for t in allowed_tools(tools, choice)])
        many = parallel and choice.mode != "named"
        items = f'{CALL_RULE} ( "," space {CALL_RULE} )*' if many else CALL_RULE
        gbnf = f'root ::= {literal(MARKER)} space "[" space {items} space "]"\n' + schema_rules(schema)
        lazy = choice.mode == "auto"
        return GrammarPlan(gbnf, (re.escape(MARKER),) if lazy else ())
