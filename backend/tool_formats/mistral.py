"""Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "..."}]`` and the newer
``[TOOL_CALLS]name[ARGS]{...}``.

Read by the shared syntax (conformance/tool_formats/mistral.py). Mistral 7B Instruct v0.3 and Mistral
Nemo insist on 9-character call ids (``raise_exception`` in their templates otherwise), so calls made here
get such ids. Detected by ``[TOOL_CALLS]`` in the template. The grammar (lazy under ``auto``) writes the
array form.
"""

from __future__ import annotations

import re

from backend.requests import Tool
from backend.tool_formats.base import ToolFormat, alnum_id
from backend.tool_formats.grammar import CALL_RULE, call_schema, literal, one_of, repeated, schema_rules
from conformance.tool_formats.mistral import MARKER
from conformance.tool_formats.mistral import Mistral as MistralSyntax

__all__ = ["Mistral"]


class Mistral(MistralSyntax, ToolFormat):
    triggers = (re.escape(MARKER),)

    def new_call_id(self) -> str:
        return alnum_id()

    def calls_grammar(self, tools: list[Tool], *, many: bool, lazy: bool) -> str:
        id_schema = {"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}
        schema = one_of([call_schema(t, extra={"id": id_schema}) for t in tools])
        items = repeated(CALL_RULE, many, '"," space-sep')
        return f'root ::= {literal(MARKER)} " "? "[" {items} "]"\nspace-sep ::= " "?\n' + schema_rules(schema)
