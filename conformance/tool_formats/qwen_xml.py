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

from typing import Any

from conformance.tool_formats._marker_scan import OPEN, MarkerSyntax, Outcome, TagReader
from conformance.tool_formats._scanning import Finder, skip_space
from conformance.tool_formats.base import ParsedCall, Schemas, parameter_schema, typed_value

__all__ = ["QwenXml"]

BLOCK_OPEN = "<tool_call>"
BLOCK_CLOSE = "</tool_call>"
FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
_LOST_BRACKET = "function="
_PARAMETER_OPEN = "<parameter="
_PARAMETER_CLOSE = "</parameter>"
_MAX_NAME = 256  # a name or key longer than this is no tag: stop looking for its ">" there


class QwenXml(MarkerSyntax):
    name = "qwen-xml"
    markers = (BLOCK_OPEN, FUNCTION_OPEN)
    ends = (BLOCK_CLOSE, FUNCTION_CLOSE)

    def ends_of(self, marker: str) -> tuple[str, ...]:
        # A block ends at its close, not at its function's (a stream read at ``</function>`` would find
        # the block not yet whole); a bare function, at its own close.
        return (BLOCK_CLOSE,) if marker == BLOCK_OPEN else (FUNCTION_CLOSE,)

    def reader(self, text: str, schemas: Schemas | None, final: bool) -> _Reader:
        return _Reader(text, schemas)

    def needles(self) -> tuple[str, ...]:
        return (*self.markers, BLOCK_CLOSE)  # a cut stray close may still join a bare call


class _Reader(TagReader):
    """One text's scan: the tags found once (Finder), and where a block that did not parse ends."""

    def __init__(self, text: str, schemas: Schemas | None) -> None:
        super().__init__(text, schemas)
        self.blocks = Finder(text, BLOCK_OPEN)
        self.block_ends = Finder(text, BLOCK_CLOSE)
        self.bare = Finder(text, FUNCTION_OPEN)
        self.function_ends = Finder(text, FUNCTION_CLOSE)
        self.value_ends = Finder(text, _PARAMETER_CLOSE)
        # A <function= inside a block that did not parse is that block's markup, not a bare call: it
        # stays content with the block (never a call guessed out of a broken one).
        self.guard = 0

    def next_marker(self, pos: int) -> int | None:
        found = [at for at in (self.blocks.next(pos), self.bare.next(max(pos, self.guard))) if at is not None]
        return min(found) if found else None

    def attempt(self, start: int) -> Outcome:
        if self.text.startswith(BLOCK_OPEN, start):
            return self._block(start)
        return self._bare(start)

    def _block(self, start: int) -> Outcome:
        return self.enclosed(start, BLOCK_OPEN, BLOCK_CLOSE, self.block_ends, self._lenient_function)

    def failed(self, end: int) -> None:
        self.guard = max(self.guard, end)

    def _lenient_function(self, i: int, stop: int) -> ParsedCall | None:
        return self._function(i, stop, lenient=True)

    def _bare(self, start: int) -> Outcome:
        close = self.function_ends.next(start)
        if close is None:
            return OPEN
        end = close + len(FUNCTION_CLOSE)
        self.reached = start + len(FUNCTION_OPEN)
        call = self._function(start, end, lenient=False)
        if call is None:
            return Outcome(self.reached)
        after = skip_space(self.text, end)
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
        return self.named_call(name, i, stop, self._parameters)

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
