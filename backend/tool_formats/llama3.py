"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: ``{"name": ..., "parameters": {...}}``, maybe after a python tag.

Meta's prompt-format page for Llama 3.1 shows custom tools answered as a bare JSON object with
``name`` and ``parameters`` (3.2 adds ``"type": "function"`` in front), ended by ``<|eot_id|>``; the
built-in tools come after ``<|python_tag|>`` as ``brave_search.call(query="...")``. A call can only open
the answer, so the answer is held until its first characters show whether it is one. Detected by the
``ipython`` role header in the template, as llama.cpp's common/chat.cpp does. One call per answer (the
Llama 3.x templates render one).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from backend.requests import Tool, ToolChoice
from backend.tool_formats.base import (
    GrammarPlan,
    ParsedCall,
    ParsedOutput,
    ToolFormat,
    call_from_object,
    decode_json_at,
)
from backend.tool_formats.grammar import CALL_RULE, allowed_tools, call_schema, literal, one_of, schema_rules

__all__ = ["Llama3"]

PYTHON_TAG = "<|python_tag|>"
_BUILTIN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\.call\((.*)\)\s*$", re.DOTALL)


def _builtin_call(text: str) -> ParsedCall | None:
    """``brave_search.call(query="...")`` -> a call with keyword arguments as JSON."""
    match = _BUILTIN.match(text)
    if match is None:
        return None
    try:
        node = ast.parse(f"f({match.group(2)})", mode="eval").body
        if not isinstance(node, ast.Call) or node.args:
            return None
        arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
    except (SyntaxError, ValueError):
        return None
    return ParsedCall(match.group(1), json.dumps(arguments, ensure_ascii=False))


class Llama3(ToolFormat):
    name = "llama3"
    markers = (PYTHON_TAG, "{")
    leading_only = True

    def parse(self, text: str, *, final: bool) -> ParsedOutput:
        body = text.lstrip()
        tagged = body.startswith(PYTHON_TAG)
        if tagged:
            body = body[len(PYTHON_TAG) :]
        calls: list[ParsedCall] = []
        pos = 0
        while True:
            found = decode_json_at(body, pos)
            call = call_from_object(found[0], arguments_keys=("parameters", "arguments")) if found else None
            if found is None or call is None:
                break
            calls.append(call)
            pos = found[1]
            sep = re.compile(r"\s*;?\s*").match(body, pos)
            pos = sep.end() if sep is not None else pos
        rest = body[pos:].replace("<|eom_id|>", "").replace("<|eot_id|>", "").strip()
        if calls and not rest:
            return ParsedOutput("", calls)
        if tagged and not calls and final:
            builtin = _builtin_call(body)
            if builtin is not None:
                return ParsedOutput("", [builtin])
        if calls and not final:
            return ParsedOutput("", calls)  # more may follow
        return ParsedOutput(text if final else "")

    def grammar(
        self, tools: list[Tool], choice: ToolChoice, parallel: bool, reply: dict[str, Any] | None
    ) -> GrammarPlan | None:
        if choice.mode == "none":
            return None
        schema = one_of([call_schema(t, arguments_key="parameters") for t in allowed_tools(tools, choice)])
        gbnf = f"root ::= {literal(PYTHON_TAG)}? {CALL_RULE}\n" + schema_rules(schema)
        if choice.mode != "auto":
            return GrammarPlan(gbnf)
        # Lazy: from the python tag, or from a '{"name"' that opens the answer.
        trigger = r"^\s*(" + re.escape(PYTHON_TAG) + r'|\{\s*"name")[\s\S]*$'
        return GrammarPlan(gbnf, (trigger,))
