"""FunctionGemma (Google, Dec 2025) tool calls:
``<start_function_call>call:NAME{key:value,...}<end_function_call>``.

Facts: Google's FunctionGemma guide (ai.google.dev/gemma/docs/functiongemma, "Formatting and best
practices": six control tokens, every string value wrapped in the single ``<escape>`` token,
``<start_function_response>`` an extra stop sequence) and the published chat template of
google/functiongemma-270m-it, which writes a call as ``'<start_function_call>call:' + name + '{'``, then
``key:format_argument(value, escape_keys=False)`` joined by ``,`` in ``dictsort`` order, then
``'}<end_function_call>'``. Its ``format_argument``: a string is ``<escape>text<escape>``, a boolean
``true``/``false``, a mapping ``{key:value,...}`` (keys bare), a sequence ``[value,...]``, anything else
as Python prints it (numbers). Gemma 4's template keeps the same shape with ``<|"|>`` for the quote.

llama.cpp's hand-written parsers (common/chat.cpp, common/chat-parser*.cpp, at the versions read) have
no FunctionGemma parser, so nothing here comes from llama.cpp; vLLM's functiongemma_tool_parser reads
the same markers (and only ``<escape>`` values).

How values are read: an ``<escape>``-wrapped value is a string, always; a bare value is typed by
``typed_value`` with its parameter's schema (``schemas[NAME]``, then ``properties`` / ``items`` for
nested ones), so ``5`` is a number unless the schema says string. Keys are bare, or ``<escape>``-wrapped
as the template's declarations write them. White space around keys, values and markers is skipped
(fine-tunes write ``, `` between pairs). A call counts only when its whole ``{...}`` reads and the end
marker follows; otherwise its markup stays content verbatim. Gemma 3's python-style ``tool_code`` blocks
are not read here (no authoritative description of their grammar was found).
"""

from __future__ import annotations

import re
from typing import Any

from conformance.tool_formats._scanning import SPACE, skip_space
from conformance.tool_formats._sections import SectionSyntax
from conformance.tool_formats.base import ParsedCall, Schemas, arguments_text, typed_value

__all__ = ["Gemma"]

CALL_BEGIN = "<start_function_call>"
CALL_END = "<end_function_call>"
ESCAPE = "<escape>"
_CALL = "call:"
_BARE_END = re.compile(r"[,}\]]")
_MAX_DEPTH = 64
"""Deeper nesting is no call: it keeps hostile text from exhausting the stack."""


class Gemma(SectionSyntax):
    """FunctionGemma's ``<start_function_call>call:NAME{...}<end_function_call>``: a section is one call."""

    name = "gemma"
    markers = (CALL_BEGIN,)
    ends = (CALL_END,)
    opening = re.compile(re.escape(CALL_BEGIN))

    def calls(self, body: str, schemas: Schemas | None) -> list[ParsedCall]:
        call = _read_call(body, schemas or {})
        return [call] if call else []


def _read_call(body: str, schemas: Schemas) -> ParsedCall | None:
    """``call:NAME{...}`` (the text between the markers) -> a call, or None."""
    pos = skip_space(body, 0)
    if not body.startswith(_CALL, pos):
        return None
    brace = body.find("{", pos)
    name = body[pos + len(_CALL) : brace].strip()
    if brace < 0 or not name or any(char in SPACE or char in "<>{}:," for char in name):
        return None
    try:
        found = _mapping(body, brace, schemas.get(name), 0)
    except RecursionError:  # defensive: _MAX_DEPTH keeps well below the limit
        return None
    if found is None or skip_space(body, found[1]) != len(body):
        return None
    arguments = arguments_text(found[0])
    return None if arguments is None else ParsedCall(name, arguments)


def _value(text: str, pos: int, schema: Any, depth: int) -> tuple[Any, int] | None:
    pos = skip_space(text, pos)
    if text.startswith(ESCAPE, pos):
        return _escaped(text, pos)
    if text.startswith("{", pos):
        return _mapping(text, pos, schema, depth + 1)
    if text.startswith("[", pos):
        return _sequence(text, pos, schema, depth + 1)
    return _bare(text, pos, schema)


def _escaped(text: str, pos: int) -> tuple[str, int] | None:
    """``<escape>text<escape>``: a string, whatever it holds."""
    start = pos + len(ESCAPE)
    end = text.find(ESCAPE, start)
    return None if end < 0 else (text[start:end], end + len(ESCAPE))


def _bare(text: str, pos: int, schema: Any) -> tuple[Any, int] | None:
    """A value without quotes (a number, ``true``): typed by its schema, up to ``,`` ``}`` or ``]``."""
    stop = _BARE_END.search(text, pos)
    end = stop.start() if stop else len(text)
    raw = text[pos:end].strip()
    if not raw or ESCAPE in raw:
        return None
    return typed_value(raw, schema), end


def _mapping(text: str, pos: int, schema: Any, depth: int) -> tuple[dict[str, Any], int] | None:
    """``{key:value,...}`` starting at ``text[pos] == "{"``."""
    if depth > _MAX_DEPTH:
        return None
    properties = schema.get("properties") if isinstance(schema, dict) else None
    result: dict[str, Any] = {}
    pos = skip_space(text, pos + 1)
    if text.startswith("}", pos):
        return result, pos + 1
    while True:
        key = _key(text, pos)
        if key is None:
            return None
        sub = properties.get(key[0]) if isinstance(properties, dict) else None
        found = _value(text, key[1], sub, depth)
        if found is None:
            return None
        result[key[0]] = found[0]
        pos = skip_space(text, found[1])
        if not text.startswith(",", pos):
            return (result, pos + 1) if text.startswith("}", pos) else None
        pos = skip_space(text, pos + 1)


def _key(text: str, pos: int) -> tuple[str, int] | None:
    """A key and the index after its ``:``; bare (as calls write it) or ``<escape>``-wrapped."""
    if text.startswith(ESCAPE, pos):
        found = _escaped(text, pos)
        if found is None:
            return None
        key, colon = found[0], skip_space(text, found[1])
    else:
        colon = text.find(":", pos)
        key = text[pos:colon].strip()
        if colon < 0 or not key or any(char in "{}[],<>" for char in key):
            return None
    return (key, colon + 1) if text.startswith(":", colon) else None


def _sequence(text: str, pos: int, schema: Any, depth: int) -> tuple[list[Any], int] | None:
    """``[value,...]`` starting at ``text[pos] == "["``."""
    if depth > _MAX_DEPTH:
        return None
    items = schema.get("items") if isinstance(schema, dict) else None
    result: list[Any] = []
    pos = skip_space(text, pos + 1)
    if text.startswith("]", pos):
        return result, pos + 1
    while True:
        found = _value(text, pos, items, depth)
        if found is None:
            return None
        result.append(found[0])
        pos = skip_space(text, found[1])
        if not text.startswith(",", pos):
            return (result, pos + 1) if text.startswith("]", pos) else None
        pos = skip_space(text, pos + 1)
