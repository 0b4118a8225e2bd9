"""Kimi K2 tool calls: a section of calls, each named by the id the model writes (``functions.NAME:IDX``).

Facts, from llama.cpp (ggml-org/llama.cpp): common/chat.cpp ``common_chat_parse_kimi_k2`` (the
section, call and argument markers) and common/chat-parsers/kimi-k2.cpp (its PEG parser: a call is
``<|tool_call_begin|>functions.{name}:{counter}<|tool_call_argument_begin|>{json}<|tool_call_end|>``, the
counter any run of digits, the section required around the calls), the Kimi K2 cases of
tests/test-chat.cpp, and the templates models/templates/moonshotai-Kimi-K2.jinja and
Kimi-K2-Thinking.jinja, which write a call's ``id`` between the call and argument markers:

``<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>``

The id as written becomes the call's id; the name is the id less ``functions.`` and ``:IDX``.
Moonshot's own reference parser (its model card's tool-call guide) reads ``[\\w.]+:\\d+`` and white
space around the id, so the ``functions.`` prefix is taken as optional here and white space around the
id, arguments and markers is skipped; llama.cpp requires the prefix.

A section counts only when it closes and holds nothing but whole calls (llama.cpp's PEG parser asks the
same); otherwise it stays content verbatim. ``<think>`` reasoning is left in the text as given.
"""

from __future__ import annotations

import re

from conformance.tool_formats._scanning import SPACE, skip_space
from conformance.tool_formats._sections import SectionSyntax, calls_in
from conformance.tool_formats.base import ParsedCall, Schemas, arguments_text, decode_json_at

__all__ = ["Kimi"]

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_PREFIX = "functions."


class Kimi(SectionSyntax):
    """Kimi K2's ``<|tool_calls_section_begin|>`` section of ``functions.NAME:IDX`` calls."""

    name = "kimi"
    markers = (SECTION_BEGIN,)
    ends = (SECTION_END,)
    opening = re.compile(re.escape(SECTION_BEGIN))

    def calls(self, body: str, schemas: Schemas | None) -> list[ParsedCall]:
        return calls_in(body, _read_call)


def _read_call(body: str, pos: int) -> tuple[ParsedCall, int] | None:
    if not body.startswith(CALL_BEGIN, pos):
        return None
    id_at = pos + len(CALL_BEGIN)
    arguments_at = body.find(ARGUMENT_BEGIN, id_at)
    if arguments_at < 0:
        return None
    call_id = body[id_at:arguments_at].strip()
    name = _name_of(call_id)
    found = decode_json_at(body, arguments_at + len(ARGUMENT_BEGIN))
    if name is None or found is None or not isinstance(found[0], dict):
        return None
    arguments = arguments_text(found[0])
    after = skip_space(body, found[1])
    if arguments is None or not body.startswith(CALL_END, after):
        return None
    return ParsedCall(name, arguments, call_id), after + len(CALL_END)


def _name_of(call_id: str) -> str | None:
    """``functions.NAME:IDX`` -> NAME; None for an id of another shape."""
    head, colon, index = call_id.rpartition(":")
    name = head.removeprefix(_PREFIX)
    if not colon or not (index.isascii() and index.isdigit()) or not name:
        return None
    if any(char in SPACE or char in "<>" for char in name):
        return None
    return name
