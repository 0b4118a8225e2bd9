"""Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "..."}]`` and the newer
``[TOOL_CALLS]name[ARGS]{...}``.

Mistral 7B Instruct v0.3 and Mistral Nemo answer one ``[TOOL_CALLS]`` followed by a JSON array of calls,
each with a 9-character ``id`` their templates insist on (``raise_exception`` otherwise), so calls made
here get such ids. Magistral / Ministral 3 / Devstral 2 write ``[TOOL_CALLS]`` before each call, then the
name, ``[ARGS]`` and the arguments object (llama.cpp's tests/test-chat.cpp). Detected by ``[TOOL_CALLS]``
in the template. The grammar (lazy under ``auto``) writes the array form.
"""

from __future__ import annotations

import re
from typing import Any

from backend.requests import Tool, ToolChoice
from backend.tool_formats.base import (
    GrammarPlan,
    ParsedCall,
    ParsedOutput,
    ToolFormat,
    alnum_id,
    arguments_text,
    call_from_object,
    decode_json_at,
)
from backend.tool_formats.grammar import CALL_RULE, allowed_tools, call_schema, literal, one_of, schema_rules

__all__ = ["Mistral"]

MARKER = "[TOOL_CALLS]"
_NAMED = re.compile(r"\s*([A-Za-z0-9_.-]+)(?:\[CALL_ID\]([A-Za-z0-9]+))?\[ARGS\]")


class Mistral(ToolFormat):
    name = "mistral"
    markers = (MARKER,)

    def new_call_id(self) -> str:
        return alnum_id()

    def parse(self, text: str, *, final: bool) -> ParsedOutput:
        start = text.find(MARKER)
        if start < 0:
            return ParsedOutput(text if final else "")
        calls: list[ParsedCall] = []
        pos = start
        while text.startswith(MARKER, pos):
            found = _calls_at(text, pos + len(MARKER))
            if found is None:
                break
            more, pos = found
            calls += more
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
        rest = text[pos:].replace("</s>", "").strip()
        if calls and (not rest or not final):
            return ParsedOutput(text[:start].strip(), calls)
        if final:
            return ParsedOutput(text)
        return ParsedOutput(text[:start])

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


def _calls_at(text: str, pos: int) -> tuple[list[ParsedCall], int] | None:
    """The calls written after one marker at ``pos`` and where they end: the v11 tokenizer's
    ``name[ARGS]{...}`` (a ``[CALL_ID]`` between), or earlier ones' JSON array (or object) of calls;
    None where none is whole."""
    named = _NAMED.match(text, pos)
    if named is not None:
        found = decode_json_at(text, named.end())
        arguments = arguments_text(found[0]) if found is not None else None
        if found is None or arguments is None:
            return None
        return [ParsedCall(named.group(1), arguments, named.group(2))], found[1]
    found = decode_json_at(text, pos)
    items = found[0] if found is not None else None
    items = [items] if isinstance(items, dict) else items
    parsed = [call_from_object(item) for item in items] if isinstance(items, list) else [None]
    if found is None or not parsed or any(c is None for c in parsed):
        return None
    return [c for c in parsed if c is not None], found[1]
