"""FunctionGemma: ``<start_function_call>call:NAME{key:<escape>text<escape>,n:5}<end_function_call>``.

Read by the shared syntax (conformance/tool_formats/gemma.py, which cites Google's FunctionGemma guide
and the published template of google/functiongemma-270m-it). Detected by ``<start_function_call>`` in the
template. llama.cpp has no grammar for it (nor a parser), so this one is written from the template's
``format_argument``: a string is ``<escape>text<escape>``, a number or boolean as JSON writes it, a
mapping ``{key:value,...}`` with bare keys, a sequence ``[value,...]``. The arguments follow the schema's
``properties`` (the required ones first, each once; then each other one at most once), scalars held to
their schema (a string to its ``enum``); a nested mapping or sequence is any FunctionGemma value (its
schema is not followed). Lazy under ``auto`` from the call's marker.
"""

from __future__ import annotations

import re
from typing import Any

from backend.requests import Tool
from backend.tool_formats.base import ToolFormat
from backend.tool_formats.grammar import literal, parameters_of, repeated, text_without, value_rules
from conformance.tool_formats.gemma import CALL_BEGIN, CALL_END, ESCAPE
from conformance.tool_formats.gemma import Gemma as GemmaSyntax

__all__ = ["Gemma"]

_NESTED = (
    f"fg-text-value ::= {literal(ESCAPE)} fg-text {literal(ESCAPE)}\n"
    "fg-key ::= [A-Za-z_] [A-Za-z0-9_]*\n"
    'fg-scalar ::= "true" | "false" | "null" | "-"? [0-9]+ ( "." [0-9]+ )?\n'
    "fg-value ::= fg-text-value | fg-scalar | fg-map | fg-list\n"
    'fg-map ::= "{" ( fg-key ":" fg-value ( "," fg-key ":" fg-value )* )? "}"\n'
    'fg-list ::= "[" ( fg-value ( "," fg-value )* )? "]"\n'
)
"""Any FunctionGemma value, for arguments whose schema is a mapping or a sequence, or unknown."""


def _value(schema: Any, scalars: dict[int, str]) -> str:
    """The GBNF of one argument's value (``scalars``: the JSON rules of the schemas that need one)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "string":
        enum = schema.get("enum")
        if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            return f"{literal(ESCAPE)} ( {' | '.join(literal(v) for v in enum)} ) {literal(ESCAPE)}"
        return "fg-text-value"
    return scalars.get(id(schema), "fg-value")


def _scalar(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") in ("integer", "number", "boolean")


def _arguments(parameters: dict[str, Any], scalars: dict[int, str]) -> str:
    """The GBNF of a call's arguments inside its braces."""
    properties = parameters.get("properties")
    if not isinstance(properties, dict) or not properties:
        return '( fg-key ":" fg-value ( "," fg-key ":" fg-value )* )?'
    required = [k for k in properties if k in set(parameters.get("required") or ())]
    optional = [k for k in properties if k not in required]
    item = {k: f"{literal(k + ':')} {_value(properties[k], scalars)}" for k in properties}
    if required:
        head = ' "," '.join(item[k] for k in required)
        return " ".join([head, *(f'( "," {item[k]} )?' for k in optional)])
    # No key is required: any of them, each where it comes (the parser reads them in any order).
    anyone = " | ".join(item[k] for k in optional)
    return f'( ( {anyone} ) ( "," ( {anyone} ) )* )?'


def _call(name: str, parameters: dict[str, Any], scalars: dict[int, str]) -> str:
    opening = literal(f"{CALL_BEGIN}call:{name}{{")
    return f"{opening} {_arguments(parameters, scalars)} {literal('}' + CALL_END)}"


class Gemma(GemmaSyntax, ToolFormat):
    triggers = (re.escape(CALL_BEGIN),)

    def calls_grammar(self, tools: list[Tool], *, many: bool, lazy: bool) -> str:
        parameters = [parameters_of(t) for t in tools]
        typed = [
            schema for p in parameters for schema in (p.get("properties") or {}).values() if _scalar(schema)
        ]
        rules, names = value_rules(typed, "fg-json") if typed else ("", [])
        scalars = dict(zip(map(id, typed), names, strict=True))
        calls = [_call(t.name, p, scalars) for t, p in zip(tools, parameters, strict=True)]
        root = f"root ::= {repeated('fg-call', many)}\n"
        return root + f"fg-call ::= {' | '.join(calls)}\n" + _NESTED + text_without("fg-text", ESCAPE) + rules
