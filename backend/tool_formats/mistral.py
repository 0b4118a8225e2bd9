"""Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "..."}]`` and the newer
``[TOOL_CALLS]name[ARGS]{...}``.

Read by the shared syntax (conformance/tool_formats/mistral.py). Mistral 7B Instruct v0.3 and Mistral
Nemo insist on 9-character call ids (``raise_exception`` in their templates otherwise), so calls made here
get such ids. Detected by ``[TOOL_CALLS]`` in the template. The grammar (lazy under ``auto``) writes the
array form.
"""

from __future__ import annotations

import re
from typing import Any

from backend.requests import Tool, ToolChoice
from backend.tool_formats.base import GrammarPlan, ToolFormat, alnum_id
from backend.tool_formats.grammar import CALL_RULE, allowed_tools, call_schema, literal, one_of, schema_rules
from conformance.tool_formats.mistral import MARKER
from conformance.tool_formats.mistral import Mistral as MistralSyntax

__all__ = ["Mistral"]


class Mistral(MistralSyntax, ToolFormat):
    def new_call_id(self) -> str:
        return alnum_id()

    def grammar(
        self, tools: list[Tool], choice: ToolChoice, parallel: bool, reply: dict[str, Any] | None
    ) -> GrammarPlan | None:
        if choice.mode == "none":
            return None
        id_schema = {"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}
        schema = one_of([call_schema(t, extra={"id": id_schema}) for t in allowed_tools(tools, choice)])
        many = parallel and choice.mode != "named"
        items = f'{CALL_RULE} ( "," space-sep {CALL_RULE} )*' if many else CALL_RULE
        gbnf = f'root ::= {literal(MARKER)} " "? "[" {items} "]"\nspace-sep ::= " "?\n' + schema_rules(schema)
        lazy = choice.mode == "auto"
        return GrammarPlan(gbnf, (re.escape(MARKER),) if lazy else ())
