"""Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "..."}]`` and the newer
``[TOOL_CALLS]name[ARGS]{...}``.

Mistral 7B Instruct v0.3 and Mistral Nemo answer one ``[TOOL_CALLS]`` followed by a JSON array of calls,
each with a 9-character ``id`` their templates insist on. Magistral / Ministral 3 / Devstral 2 (the v11
tokenizer on) write ``[TOOL_CALLS]`` before each call, then the name, ``[CALL_ID]`` and an id where they
write one, ``[ARGS]`` and the arguments object (llama.cpp's tests/test-chat.cpp). Text before the first
marker is content; anything but calls after it is not a Mistral answer.
"""

from __future__ import annotations

import re

from conformance.tool_formats.base import (
    CallSyntax,
    ParsedCall,
    ParsedOutput,
    Schemas,
    arguments_text,
    call_from_object,
    decode_json_at,
)

__all__ = ["MARKER", "Mistral"]

MARKER = "[TOOL_CALLS]"
_NAMED = re.compile(r"\s*([A-Za-z0-9_.-]+)(?:\[CALL_ID\]([A-Za-z0-9]+))?\[ARGS\]")


class Mistral(CallSyntax):
    name = "mistral"
    markers = (MARKER,)

    def parse(self, text: str, *, final: bool, schemas: Schemas | None = None) -> ParsedOutput:
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
