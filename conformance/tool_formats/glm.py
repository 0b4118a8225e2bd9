"""GLM 4.5, 4.6 and 4.7: ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>``.

What a model writes (its chat template renders the calls of earlier turns the same way)::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    <arg_key>days</arg_key>
    <arg_value>3</arg_value>
    </tool_call>

Where the facts come from:

- the GLM-4.5 / GLM-4.6 chat templates: ``<tool_call>{{ name }}`` and a newline, then per argument
  ``<arg_key>{{ k }}</arg_key>\\n<arg_value>{{ v }}</arg_value>\\n`` (a string as it is, anything else
  ``tojson``), then ``</tool_call>``; GLM-4.7's template writes no newlines there at all
  (``<tool_call>NAME<arg_key>...``), so white space between the tags is layout either way;
- llama.cpp's ``common_chat_parse_glm_4_5`` (common/chat-parser.cpp: tool ``<tool_call>``, key
  ``<arg_key>`` ... ``</arg_key>``, then ``<arg_value>``, value end ``</arg_value>``, tool end
  ``</tool_call>``; the name is the text before the first ``<arg_key>``, stripped), read by
  ``parse_xml_tool_calls`` in common/chat-parser-xml-toolcall.cpp;
- tests/test-chat.cpp, the GLM 4.5 cases (``\\n<tool_call>special_function\\n<arg_key>arg1</arg_key>
  \\n<arg_value>1</arg_value>\\n</tool_call>`` -> ``{"arg1": 1}``; ``complex_function`` with a string,
  an integer, a bool and a float; ``web_search`` whose string value holds quotes).

A value is text; the offered function's schema types it (``typed_value``), as llama.cpp reads a value
that parses as JSON as JSON. The value is kept as written (llama.cpp's GLM form trims nothing).

The body must be a name and argument pairs only: Qwen's ``<function=`` body or Hermes's JSON body
(which share ``<tool_call>``) is no call here, so the syntaxes can be tried in turn.
"""

from __future__ import annotations

from typing import Any

from conformance.tool_formats._marker_scan import MarkerSyntax, Outcome, TagReader
from conformance.tool_formats._scanning import Finder, skip_space
from conformance.tool_formats.base import ParsedCall, Schemas, parameter_schema, typed_value

__all__ = ["Glm"]

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_KEY_OPEN = "<arg_key>"
_KEY_CLOSE = "</arg_key>"
_VALUE_OPEN = "<arg_value>"
_VALUE_CLOSE = "</arg_value>"


class Glm(MarkerSyntax):
    name = "glm"
    markers = (OPEN_TAG,)
    ends = (CLOSE_TAG,)

    def reader(self, text: str, schemas: Schemas | None, final: bool) -> _Reader:
        return _Reader(text, schemas)


class _Reader(TagReader):
    def __init__(self, text: str, schemas: Schemas | None) -> None:
        super().__init__(text, schemas)
        self.opens = Finder(text, OPEN_TAG)
        self.closes = Finder(text, CLOSE_TAG)
        self.key_opens = Finder(text, _KEY_OPEN)
        self.key_closes = Finder(text, _KEY_CLOSE)
        self.value_closes = Finder(text, _VALUE_CLOSE)

    def next_marker(self, pos: int) -> int | None:
        return self.opens.next(pos)

    def attempt(self, start: int) -> Outcome:
        return self.enclosed(start, OPEN_TAG, CLOSE_TAG, self.closes, self._call)

    def _call(self, i: int, stop: int) -> ParsedCall | None:
        """The call in ``text[i:stop]``: a name, then argument pairs; None if it is anything else."""
        first_key = self.key_opens.next(i, stop)
        name_end = stop if first_key is None else first_key
        name = self.text[i:name_end].strip() if name_end - i <= 256 else ""
        return self.named_call(name, name_end, stop, self._arguments)

    def _arguments(self, name: str, i: int, stop: int) -> dict[str, Any] | None:
        text = self.text
        arguments: dict[str, Any] = {}
        while (i := skip_space(text, i, stop)) < stop:
            self.reached = i
            if not text.startswith(_KEY_OPEN, i, stop):
                return None
            key_close = self.key_closes.next(i, stop)
            if key_close is None:
                return None
            key = text[i + len(_KEY_OPEN) : key_close].strip() if key_close - i <= 256 else ""
            i = skip_space(text, key_close + len(_KEY_CLOSE), stop)
            if not key or "<" in key or not text.startswith(_VALUE_OPEN, i, stop):
                return None
            value_close = self.value_closes.next(i, stop)
            if value_close is None:
                return None
            value = text[i + len(_VALUE_OPEN) : value_close]
            arguments[key] = typed_value(value, parameter_schema(self.schemas, name, key))
            i = value_close + len(_VALUE_CLOSE)
        return arguments
