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

from conformance.tool_formats.base import (
    CallSyntax,
    ParsedCall,
    ParsedOutput,
    Schemas,
    arguments_text,
    decode_json_at,
)

__all__ = ["Kimi"]

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_PREFIX = "functions."
_SPACE = " \t\r\n"


class Kimi(CallSyntax):
    """Kimi K2's ``<|tool_calls_section_begin|>`` section of ``functions.NAME:IDX`` calls."""

    name = "kimi"
    markers = (SECTION_BEGIN,)
    ends = (SECTION_END,)
    leading_only = False

    def parse(self, text: str, *, final: bool, schemas: Schemas | None = None) -> ParsedOutput:
        if not final:
            text = _without_partial_marker(text, SECTION_BEGIN)
        pieces: list[str] = []
        calls: list[ParsedCall] = []
        pos = 0
        while True:
            opened = text.find(SECTION_BEGIN, pos)
            if opened < 0:
                pieces.append(text[pos:])
                break
            body_at = opened + len(SECTION_BEGIN)
            close_at = text.find(SECTION_END, body_at)
            if close_at < 0:
                # Unclosed: verbatim at the answer's end; in a stream it may still close.
                pieces.append(text[pos:] if final else text[pos:opened])
                break
            end = close_at + len(SECTION_END)
            found = _read_calls(text[body_at:close_at])
            pieces.append(text[pos:opened] if found else text[pos:end])
            calls.extend(found)
            # A section that does not parse is skipped whole, never rescanned: linear time.
            pos = end
        content = "".join(pieces)
        if calls:
            content = content.strip()
        elif not final:
            content = content.rstrip()  # may be the layout before a call still to come
        return ParsedOutput(content, calls)


def _without_partial_marker(text: str, marker: str) -> str:
    """``text`` less a tail that may be the start of ``marker`` still arriving."""
    for cut in range(max(0, len(text) - len(marker) + 1), len(text)):
        if marker.startswith(text[cut:]):
            return text[:cut]
    return text


def _read_calls(body: str) -> list[ParsedCall]:
    """The calls of a section's body, or none if anything in it is not a whole call."""
    calls: list[ParsedCall] = []
    pos = _skip_space(body, 0)
    while pos < len(body):
        found = _read_call(body, pos)
        if found is None:
            return []
        calls.append(found[0])
        pos = _skip_space(body, found[1])
    return calls


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
    after = _skip_space(body, found[1])
    if arguments is None or not body.startswith(CALL_END, after):
        return None
    return ParsedCall(name, arguments, call_id), after + len(CALL_END)


def _name_of(call_id: str) -> str | None:
    """``functions.NAME:IDX`` -> NAME; None for an id of another shape."""
    head, colon, index = call_id.rpartition(":")
    name = head.removeprefix(_PREFIX)
    if not colon or not (index.isascii() and index.isdigit()) or not name:
        return None
    if any(char in _SPACE or char in "<>" for char in name):
        return None
    return name


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _SPACE:
        pos += 1
    return pos
