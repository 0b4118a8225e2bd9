"""GBNF for tool calls: one JSON Schema for the calls, converted by llama-cpp-python, wrapped in markers.

Each format describes its call object as a JSON Schema (a ``const`` name and the tool's parameters, one
``anyOf`` branch per allowed tool) and the converter writes the JSON rules; the format then wraps the
converter's ``root`` in its own markers (``<tool_call>...</tool_call>``, ``[TOOL_CALLS][...]``). Strict
tools (and ``response_format``) must be enforceable whole (400 otherwise, see backend.schema_support);
other tools' parameters lose the keywords the converter would ignore anyway.
"""

from __future__ import annotations

import re
from typing import Any

from backend.request_errors import RequestError
from backend.requests import Tool, ToolChoice
from backend.schema_support import enforceable, normalized, unsupported
from conformance.schema_refs import definitions_prefix, hoisted, localized

__all__ = [
    "OPTIONAL_NEWLINE",
    "allowed_tools",
    "call_schema",
    "literal",
    "many_calls",
    "one_of",
    "parameters_of",
    "repeated",
    "schema_rules",
    "text_without",
    "value_rules",
]

CALL_RULE = "tool-call"
OPTIONAL_NEWLINE = '"\\n"?'
"""GBNF for the newline a template may write between two calls or around a tag, or leave out."""


def allowed_tools(tools: list[Tool], choice: ToolChoice) -> list[Tool]:
    """The tools the grammar lets the model call: the named one, those ``allowed_tools`` lists, or all."""
    if choice.mode == "named":
        return [t for t in tools if t.name == choice.name]
    return [t for t in tools if choice.allowed is None or t.name in choice.allowed]


def many_calls(choice: ToolChoice, parallel: bool) -> bool:
    """Whether the model may write several calls: ``parallel_tool_calls`` asks for them, and no one
    function is named (a named choice is one call to it)."""
    return parallel and choice.mode != "named"


def repeated(item: str, many: bool, separator: str = "") -> str:
    """``item``, or with ``many`` one or more of them, ``separator`` (GBNF) between each two."""
    if not many:
        return item
    following = f"{separator} {item}" if separator else item
    return f"{item} ( {following} )*"


def _parameters(tool: Tool) -> dict[str, Any]:
    """The tool's parameters as the call schema embeds them: their definitions made the tool's own
    (schema_support.localized), cut to what a grammar enforces unless the tool is strict."""
    return localized(_checked(tool, normalized(tool.parameters)), definitions_prefix(tool.name))


def _checked(tool: Tool, parameters: Any) -> dict[str, Any]:
    if tool.strict:
        problem = unsupported(parameters)
        if problem is not None:
            raise RequestError(
                f"'tools': the strict function {tool.name!r} has a parameters schema this server cannot "
                f"enforce: {problem}",
                "tools",
                code="unsupported_schema",
            )
        return dict(parameters)
    cleaned = enforceable(parameters)
    return cleaned if isinstance(cleaned, dict) else {"type": "object"}


def call_schema(
    tool: Tool, *, arguments_key: str = "arguments", extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``{"name": <const>, <arguments_key>: <parameters>}``, both required, name first."""
    properties: dict[str, Any] = {"name": {"const": tool.name}, arguments_key: _parameters(tool)}
    required = ["name", arguments_key]
    for key, schema in (extra or {}).items():
        properties[key] = schema
        required.append(key)
    return {"type": "object", "properties": properties, "required": required}


def one_of(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def schema_rules(schema: dict[str, Any], rule: str = CALL_RULE) -> str:
    """The converter's rules for ``schema`` with its ``root`` renamed to ``rule`` (to be wrapped)."""
    from backend.grammars import converted

    gbnf = converted(hoisted(schema), "tools")
    return re.sub(r"^root ::=", f"{rule} ::=", gbnf, flags=re.MULTILINE)


def literal(text: str) -> str:
    """A GBNF string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def parameters_of(tool: Tool) -> dict[str, Any]:
    """The tool's parameters schema as its grammar enforces it (see ``call_schema``)."""
    return _parameters(tool)


def value_rules(schemas: list[dict[str, Any]], prefix: str) -> tuple[str, list[str]]:
    """Rules for several JSON values written apart (each tool's arguments after its own markers, each
    argument of an XML call), from one conversion so the converter's shared rules (``space``,
    ``string``) are written once: the values become the properties ``PREFIX-0``, ``PREFIX-1``... of one
    object, and each one's rule is read off the converter's ``"\\"KEY\\"" space ":" space RULE`` line."""
    keys = [f"{prefix}-{i}" for i in range(len(schemas))]
    wrapper = {"type": "object", "properties": dict(zip(keys, schemas, strict=True))}
    gbnf = schema_rules(wrapper, rule=f"{prefix}-all")
    rules = []
    for key in keys:
        line = re.search(
            r'^\S+ ::= "\\"' + re.escape(key) + r'\\"" space ":" space (\S+)$', gbnf, re.MULTILINE
        )
        if line is None:  # the converter's layout changed: fail loudly, never write a wrong grammar
            raise RuntimeError(f"no rule for {key} in the converted grammar")
        rules.append(line.group(1))
    return gbnf, rules


def text_without(name: str, end: str) -> str:
    """A rule ``name`` for any text that does not hold ``end`` (a value written as text up to its closing
    tag, as llama.cpp's ``not-end`` rule of common_chat_params_init_gpt_oss writes it): each branch
    matches a prefix of ``end`` followed by a character that breaks it."""
    branches = [f"[^{_char_class(end[0])}]"]
    branches += [f"{literal(end[:k])} [^{_char_class(end[k])}]" for k in range(1, len(end))]
    return f"{name} ::= ( {' | '.join(branches)} )*\n"


def _char_class(char: str) -> str:
    return "\\" + char if char in "]^\\-" else char
