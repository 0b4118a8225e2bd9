"""IBM Granite 3.x: ``<|tool_call|>[{"name": ..., "arguments": {...}}, ...]``.

Read by the shared syntax (conformance/tool_formats/granite.py). Detected by ``<|tool_call|>`` in the
template (llama.cpp's common_chat_templates_apply_jinja also asks for the ``elif thinking`` of Granite
3.2+; Granite 3.0 / 3.1 templates write the same calls without it). The grammar is
common_chat_params_init_granite's: the marker, then a JSON array of call objects (one under a named
function or without parallel calls); lazy under ``auto`` from the marker.
"""

from __future__ import annotations

import re

from backend.requests import Tool
from backend.tool_formats.base import ToolFormat
from backend.tool_formats.grammar import CALL_RULE, call_schema, literal, one_of, repeated, schema_rules
from conformance.tool_formats.granite import MARKER
from conformance.tool_formats.granite import Granite as GraniteSyntax

__all__ = ["Granite"]


class Granite(GraniteSyntax, ToolFormat):
    triggers = (re.escape(MARKER),)

    def calls_grammar(self, tools: list[Tool], *, many: bool, lazy: bool) -> str:
        schema = one_of([call_schema(t) for t in tools])
        items = repeated(CALL_RULE, many, '"," space')
        return f'root ::= {literal(MARKER)} space "[" space {items} space "]"\n' + schema_rules(schema)
