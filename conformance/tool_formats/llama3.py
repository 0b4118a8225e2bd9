"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: ``{"name": ..., "parameters": {...}}``, maybe after a python tag.

Meta's prompt-format page for Llama 3.1 shows custom tools answered as a bare JSON object with ``name``
and ``parameters`` (3.2 adds ``"type": "function"`` in front), ended by ``<|eot_id|>``; the built-in tools
come after ``<|python_tag|>`` as ``brave_search.call(query="...")``. A call can only open the answer, so
the answer is held until its first characters show whether it is one. Several calls are separated by
``;`` where a model writes more than one (the Llama 3.x templates render one).
"""

from __future__ import annotations

import ast
import json
import re

from conformance.tool_formats.base import (
    CallSyntax,
    ParsedCall,
    ParsedOutput,
    Schemas,
    call_from_object,
    decode_json_at,
)

__all__ = ["PYTHON_TAG", "Llama3"]

PYTHON_TAG = "<|python_tag|>"
_BUILTIN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\.call\((.*)\)\s*$", re.DOTALL)
_SEPARATOR = re.compile(r"\s*;?\s*")
_OBJECT_OPEN = re.compile(r"\{\s*")
_FIRST_KEYS = ('"name"', '"type"')
"""A call object's first key (3.1 writes ``name`` first, 3.2 ``type``): an object that opens with
another key is an answer in JSON, not a call."""


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
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return ParsedCall(match.group(1), json.dumps(arguments, ensure_ascii=False))


class Llama3(CallSyntax):
    name = "llama3"
    markers = (PYTHON_TAG, "{")
    leading_only = True

    def opens_answer(self, lead: str) -> bool | None:
        if lead.startswith(PYTHON_TAG):
            return True
        if PYTHON_TAG.startswith(lead):
            return None
        opened = _OBJECT_OPEN.match(lead)
        if opened is None:
            return False
        key = lead[opened.end() :]
        if any(key.startswith(first) for first in _FIRST_KEYS):
            return True
        return None if any(first.startswith(key) for first in _FIRST_KEYS) else False

    def parse(self, text: str, *, final: bool, schemas: Schemas | None = None) -> ParsedOutput:
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
            sep = _SEPARATOR.match(body, pos)
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
