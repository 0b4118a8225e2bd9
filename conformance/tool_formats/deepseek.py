"""DeepSeek V3 / R1 and V3.1 tool calls: a section of calls between full-width-bar markers.

Facts, from llama.cpp (ggml-org/llama.cpp): common/chat.cpp ``common_chat_parse_deepseek_r1`` and
``common_chat_parse_deepseek_v3_1_content`` (later common/chat-parsers/deepseek-v3-1.cpp, a PEG parser
with the same markers), the R1 and V3.1 cases of tests/test-chat.cpp, and the template
models/templates/deepseek-ai-DeepSeek-V3.1.jinja:

- a section opens with ``<｜tool▁calls▁begin｜>`` (the bars are U+FF5C, the spaces U+2581); llama.cpp
  also opens it on the misspellings R1 distills write: ``<｜tool_calls_begin｜>``, ``<｜tool calls begin｜>``,
  ``<｜tool\\_calls\\_begin｜>`` (backslashes and all) and ``<｜tool▁calls｜>``;
- it closes with ``<｜tool▁calls▁end｜>``; each call inside ends with ``<｜tool▁call▁end｜>``;
- V3 / R1 write a call as
  ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``;
- V3.1 writes ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``;
- both of llama.cpp's call patterns take ``<｜tool▁call▁begin｜>`` as optional, so a call after
  ``<｜tool▁calls｜>`` may lack it.

What this module does differently, and why: a section counts only when it closes and holds nothing but
whole calls with white space between them (llama.cpp passes stray text inside a section on as
content; here such a section stays content verbatim, as nothing in it is guessed). Reasoning
(``<think>``) is not this module's business: it stays in the text it is given.
"""

# ruff: noqa: RUF001, RUF002 -- DeepSeek's tokens are spelled with full-width bars (U+FF5C).
from __future__ import annotations

import re

from conformance.tool_formats._scanning import skip_space
from conformance.tool_formats._sections import SectionSyntax, calls_in
from conformance.tool_formats.base import ParsedCall, Schemas, arguments_text, decode_json_at

__all__ = ["DeepSeek"]

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
# The variants llama.cpp's tool_calls_begin regex accepts besides the real token.
CALLS_BEGIN_VARIANTS = (
    CALLS_BEGIN,
    "<｜tool_calls_begin｜>",
    "<｜tool calls begin｜>",
    "<｜tool\\_calls\\_begin｜>",
    "<｜tool▁calls｜>",
)
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_R1_HEAD = "function" + SEP
_R1_FENCE = "```json\n"


class DeepSeek(SectionSyntax):
    """DeepSeek V3 / R1 (```json fenced) and V3.1 (bare JSON) calls in a ``tool▁calls`` section."""

    name = "deepseek"
    markers = CALLS_BEGIN_VARIANTS
    ends = (CALLS_END,)
    opening = re.compile("|".join(re.escape(marker) for marker in CALLS_BEGIN_VARIANTS))

    def calls(self, body: str, schemas: Schemas | None) -> list[ParsedCall]:
        return calls_in(body, _read_call)


def _read_call(body: str, pos: int) -> tuple[ParsedCall, int] | None:
    if body.startswith(CALL_BEGIN, pos):
        pos += len(CALL_BEGIN)
    if body.startswith(_R1_HEAD, pos):
        found = _read_fenced_call(body, pos + len(_R1_HEAD))
        if found is not None:
            return found
    return _read_bare_call(body, pos)


def _read_fenced_call(body: str, pos: int) -> tuple[ParsedCall, int] | None:
    """V3 / R1: ``NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>`` (after ``function<｜tool▁sep｜>``)."""
    newline = body.find("\n", pos)
    if newline < 0 or not body.startswith(_R1_FENCE, newline + 1):
        return None
    name = body[pos:newline].strip()
    found = _read_arguments(body, newline + 1 + len(_R1_FENCE))
    if not name or found is None:
        return None
    arguments, after = found
    after = skip_space(body, after)
    if not body.startswith("```", after):
        return None
    return _closed(ParsedCall(name, arguments), body, after + 3)


def _read_bare_call(body: str, pos: int) -> tuple[ParsedCall, int] | None:
    """V3.1: ``NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``; llama.cpp's name is ``[^\\n<]+``."""
    sep = body.find(SEP, pos)
    if sep < 0:
        return None
    name = body[pos:sep].strip()
    found = _read_arguments(body, sep + len(SEP))
    if not name or "\n" in name or "<" in name or found is None:
        return None
    return _closed(ParsedCall(name, found[0]), body, found[1])


def _closed(call: ParsedCall, body: str, pos: int) -> tuple[ParsedCall, int] | None:
    pos = skip_space(body, pos)
    if not body.startswith(CALL_END, pos):
        return None
    return call, pos + len(CALL_END)


def _read_arguments(body: str, pos: int) -> tuple[str, int] | None:
    """A JSON object's text at ``pos`` and the index after it; anything but an object is no call."""
    found = decode_json_at(body, pos)
    if found is None or not isinstance(found[0], dict):
        return None
    arguments = arguments_text(found[0])
    return None if arguments is None else (arguments, found[1])
