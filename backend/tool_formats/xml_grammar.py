"""The grammar of calls whose arguments are written one by one as text between tags (Qwen3-Coder's
``<parameter=KEY>VALUE</parameter>``, GLM's ``<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>``).

As llama.cpp's ``build_grammar_xml_tool_call`` (common/chat-parser-xml-toolcall.cpp) writes it: the
arguments in the order of the schema's ``properties``, each required one once and each other one at most
once; a value whose schema is a string is any text without the closing tag (the shared parsers keep
it a string), any other value the JSON its schema allows. Parameters with no ``properties`` to follow
are any keys with text values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from backend.requests import Tool
from backend.tool_formats.grammar import (
    OPTIONAL_NEWLINE,
    literal,
    parameters_of,
    repeated,
    text_without,
    value_rules,
)

__all__ = ["XmlArguments", "xml_blocks", "xml_calls"]


@dataclass(frozen=True, slots=True)
class XmlArguments:
    """How one argument is written: ``before(KEY)``, its value, then ``after``."""

    before: Callable[[str], str]
    """The literal text before a value, the key in it."""
    any_key: str
    """GBNF for the text before a value when the key is free (``<parameter=`` KEY ``>\\n``)."""
    after: str
    """The text after a value (its closing tag), which a string value may not hold."""
    trailer: str = ""
    """GBNF for the layout after the closing tag (GLM-4.5's newline)."""


def _is_text(schema: Any) -> bool:
    """A value the shared parsers keep as text: a schema of type string alone (``typed_value``)."""
    return isinstance(schema, dict) and schema.get("type") == "string" and "enum" not in schema


def xml_calls(tools: list[Tool], form: XmlArguments, head: Callable[[str], str]) -> tuple[list[str], str]:
    """For each tool, the GBNF of its call body (``head(NAME)`` then its arguments), and the rules they
    use."""
    parameters = [parameters_of(t) for t in tools]
    properties = [p.get("properties") if isinstance(p.get("properties"), dict) else None for p in parameters]
    typed = [
        schema
        for props in properties
        if props is not None
        for schema in props.values()
        if not _is_text(schema)
    ]
    rules, value_rule = value_rules(typed, "xml-value") if typed else ("", [])
    values = iter(value_rule)
    bodies = []
    for tool, params, props in zip(tools, parameters, properties, strict=True):
        if props is None:
            bodies.append(
                f"{head(tool.name)} ( {form.any_key} xml-text {literal(form.after)} {form.trailer} )*"
            )
            continue
        required = set(params.get("required") or ())
        parts = []
        for key, schema in props.items():
            value = "xml-text" if _is_text(schema) else next(values)
            part = f"( {form.before(key)} {value} {literal(form.after)} {form.trailer} )"
            parts.append(part if key in required else part + "?")
        bodies.append(" ".join([head(tool.name), *parts]))
    return bodies, text_without("xml-text", form.after) + rules


def xml_blocks(
    tools: list[Tool], form: XmlArguments, head: Callable[[str], str], close: str, many: bool
) -> str:
    """The grammar of calls written as blocks (``head(NAME)``, the arguments, then ``close``), several
    where ``many`` with a newline between two or none."""
    bodies, rules = xml_calls(tools, form, head)
    block = f"( {' | '.join(bodies)} ) {literal(close)}"
    return f"root ::= {repeated('block', many, OPTIONAL_NEWLINE)}\nblock ::= {block}\n" + rules
