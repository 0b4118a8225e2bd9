"""Qwen3-Coder and Qwen 3.5: XML calls, one ``<function=...>`` in each ``<tool_call>`` block.

What a model writes (its chat template renders the calls of earlier turns the same way)::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

Parallel calls are blocks in a row; text may come before, between and after them. Where the facts
come from:

- the templates of Qwen3-Coder-30B-A3B-Instruct and Qwen3.5 (each value on lines of its own between
  ``<parameter=KEY>`` and ``</parameter>``; a value that is no string written as JSON);
- llama.cpp's ``common_chat_parse_qwen3_coder_xml`` (common/chat-parser.cpp: scope ``<tool_call>``,
  tool ``<function=`` ... ``>``, key ``<parameter=`` ... ``>``, value end ``</parameter>``, tool end
  ``</function>``, scope end ``</tool_call>``), read by the generic ``parse_xml_tool_calls`` of
  common/chat-parser-xml-toolcall.cpp, which allows white space between the tags;
- tests/test-chat.cpp, the Qwen3-Coder and Qwen3.5-4B cases (``<tool_call>\\n<function=special_function>
  \\n<parameter=arg1>\\n1\\n</parameter>\\n</function>\\n</tool_call>`` -> ``{"arg1": 1}``).

A value is text; the offered function's schema types it (``typed_value``: ``5`` is a number, unless the
schema says string), as llama.cpp decides. The newline the template puts on each side of a value is
layout and is taken off; llama.cpp strips all white space around a value (``trim_raw_argval``), which
would also eat a code value's indentation, so only the one newline goes here.

Two degenerate forms are read besides, both seen from these models in the wild:

- ``function=NAME>`` in a block, its ``<`` lost (a token skipped; the name still stands between the
  ``=`` and the ``>``, so nothing is guessed);
- a ``<function=...>...</function>`` with no ``<tool_call>`` around it (llama.cpp's PR 16755 notes the
  model "occasionally stops prefixing tool calls with the proper ``<tool_call>``"); a ``</tool_call>``
  right after it is its stray close and goes with it. llama.cpp itself reads neither.

A block must hold exactly one such function and nothing else: Hermes's JSON body
(``<tool_call>{"name": ...}</tool_call>``, conformance/tool_formats/hermes.py) is no call here.
"""

from __future__ import annotations

import json
from typing import Any

from conformance.tool_formats._scan import (
    NAME,
    OPEN,
    Finder,
    Outcome,
    parameter_schema,
    read,
    skip_space,
)
from conformance.tool_formats.base import CallSyntax, ParsedCall, ParsedOutput, Schemas, typed_value

__all__ = ["QwenXml"]

BLOCK_OPEN = "<tool_call>"
BLOCK_CLOSE = "</tool_call>"
FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
_LOST_BRACKET = "function="
_PARAMETER_OPEN = "<parameter="
_PARAMETER_CLOSE = "</parameter>"
_MAX_NAME = 256  # a name or key longer than this is no tag: stop looking for its ">" there


class QwenXml(CallSyntax):
    name = "qwen-xml"
    markers = (BLOCK_OPEN, FUNCTION_OPEN)
    ends = (BLOCK_CLOSE, FUNCTION_CLOSE)

    def ends_of(self, marker: str) -> tuple[str, ...]:
        # A block ends at its close, not at its function's (a stream read at ``</function>`` would find
        # the block not yet whole); a bare function, at its own close.
        return (BLOCK_CLOSE,) if marker == BLOCK_OPEN else (FUNCTION_CLOSE,)

    leading_only = False

    def parse(self, text: str, *, final: bool, schemas: Schemas | None = None) -> ParsedOutput:
        reader = _Reader(text, schemas)
        return read(
            text,
            final=final,
            next_marker=reader.next_marker,
            attempt=reader.attempt,
            needles=(*self.markers, BLOCK_CLOSE),  # a cut stray close may still join a bare call
        )


class _Reader:
    """One text's scan: the tags found once (Finder), and where a block that did not parse ends."""

    def __init__(self, text: str, schemas: Schemas | None) -> None:
        self.text = text
        self.schemas = schemas
        self.blocks = Finder(text, BLOCK_OPEN)
        self.block_ends = Finder(text, BLOCK_CLOSE)
        self.bare = Finder(text, FUNCTION_OPEN)
        self.function_ends = Finder(text, FUNCTION_CLOSE)
        self.value_ends = Finder(text, _PARAMETER_CLOSE)
        # A <function= inside a block that did not parse is that block's markup, not a bare call: it
        # stays content with the block (never a call guessed out of a broken one).
        self.guard = 0
        # How far the current attempt read before it failed: a marker before there is markup of the
        # block that failed (it would be read again, and fail again, at every nested marker: quadratic).
        self.reached = 0

    def next_marker(self, pos: int) -> int | None:
        found = [at for at in (self.blocks.next(pos), self.bare.next(max(pos, self.guard))) if at is not None]
        return min(found) if found else None

    def attempt(self, start: int) -> Outcome:
        if self.text.startswith(BLOCK_OPEN, start):
            return self._block(start)
        return self._bare(start)

    def _block(self, start: int) -> Outcome:
        body = start + len(BLOCK_OPEN)
        close = self.block_ends.next(body)
        if close is None:
            return OPEN
        end = close + len(BLOCK_CLOSE)
        self.reached = body
        call = self._function(body, close, lenient=True)
        if call is None:
            self.guard = max(self.guard, end)
            return Outcome(self.reached)  # a block nested in it after that may still be whole
        return Outcome(end, (call,))

    def _bare(self, start: int) -> Outcome:
        close = self.function_ends.next(start)
        if close is None:
            return OPEN
        end = close + len(FUNCTION_CLOSE)
        self.reached = start + len(FUNCTION_OPEN)
        call = self._function(start, end, lenient=False)
        if call is None:
            return Outcome(self.reached)
        after = skip_space(self.text, end, len(self.text))
        if self.text.startswith(BLOCK_CLOSE, after):
            end = after + len(BLOCK_CLOSE)
        return Outcome(end, (call,))

    def _function(self, i: int, stop: int, *, lenient: bool) -> ParsedCall | None:
        """The one function in ``text[i:stop]`` (white space around it allowed), or None."""
        text = self.text
        i = skip_space(text, i, stop)
        if text.startswith(FUNCTION_OPEN, i, stop):
            i += len(FUNCTION_OPEN)
        elif lenient and text.startswith(_LOST_BRACKET, i, stop):
            i += len(_LOST_BRACKET)
        else:
            return None
        name, i = _tag_value(text, i, stop)
        if name is None or not NAME.fullmatch(name):
            return None
        arguments = self._parameters(name, i, stop)
        if arguments is None:
            return None
        return ParsedCall(name, json.dumps(arguments, ensure_ascii=False))

    def _parameters(self, name: str, i: int, stop: int) -> dict[str, Any] | None:
        """The parameters from ``i`` through ``</function>``, which only white space may follow."""
        text = self.text
        arguments: dict[str, Any] = {}
        while True:
            i = self.reached = skip_space(text, i, stop)
            if text.startswith(FUNCTION_CLOSE, i, stop):
                break
            if not text.startswith(_PARAMETER_OPEN, i, stop):
                return None
            key, i = _tag_value(text, i + len(_PARAMETER_OPEN), stop)
            close = self.value_ends.next(i, stop)
            if not key or close is None:
                return None
            value = _unwrap(text[i:close])
            arguments[key] = typed_value(value, parameter_schema(self.schemas, name, key))
            i = close + len(_PARAMETER_CLOSE)
        if skip_space(text, i + len(FUNCTION_CLOSE), stop) != stop:
            return None
        return arguments


def _tag_value(text: str, i: int, stop: int) -> tuple[str | None, int]:
    """``NAME`` of ``<function=NAME>`` / ``<parameter=NAME>`` from ``i`` (after the ``=``), and the
    index after its ``>``; None where no ``>`` closes it on its line."""
    close = text.find(">", i, min(stop, i + _MAX_NAME))
    if close < 0:
        return None, i
    value = text[i:close].strip()
    if not value or "\n" in value or "<" in value:
        return None, i
    return value, close + 1


def _unwrap(value: str) -> str:
    """A value without the one newline the template writes on each side of it."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value
