"""DeepSeek V3 / R1 and V3.1: calls in a ``<｜tool▁calls▁begin｜>`` ... ``<｜tool▁calls▁end｜>`` section.

Read by the shared syntax (conformance/tool_formats/deepseek.py), which takes both forms. Which one the
grammar writes follows the template, as llama.cpp's common/chat.cpp picks its handler: a template with
V3.1's ``message['prefix'] is defined and message['prefix'] and thinking`` gets
``common_chat_params_init_deepseek_v3_1``'s ``NAME<｜tool▁sep｜>{json}``; any other template holding
``<｜tool▁calls▁begin｜>`` (R1, V3, the R1 distills) gets ``common_chat_params_init_deepseek_r1``'s
``function<｜tool▁sep｜>NAME\\n```json\\n{json}```<｜tool▁call▁end｜>``. As there, the section opens on
the real token or the misspellings the R1 distills write (then all is constrained), each call's
``<｜tool▁call▁begin｜>`` is optional, and the grammar is lazy under ``auto`` from the opening.
"""

# ruff: noqa: RUF002 -- DeepSeek's tokens are spelled with full-width bars (U+FF5C).
from __future__ import annotations

import re

from backend.requests import Tool
from backend.tool_formats.base import ToolFormat
from backend.tool_formats.grammar import literal, parameters_of, value_rules
from conformance.tool_formats.deepseek import (
    CALL_BEGIN,
    CALL_END,
    CALLS_BEGIN_VARIANTS,
    CALLS_END,
    SEP,
)
from conformance.tool_formats.deepseek import DeepSeek as DeepSeekSyntax

__all__ = ["V3_1_MARK", "DeepSeek"]

V3_1_MARK = "message['prefix'] is defined and message['prefix'] and thinking"
"""What llama.cpp's common_chat_templates_apply_jinja looks for to tell V3.1's template from R1's."""


class DeepSeek(DeepSeekSyntax, ToolFormat):
    triggers = ("(?:" + "|".join(re.escape(m) for m in CALLS_BEGIN_VARIANTS) + ")",)

    def __init__(self, *, v3_1: bool = False) -> None:
        self.v3_1 = v3_1
        self.name = "deepseek-v3.1" if v3_1 else "deepseek-r1"

    def calls_grammar(self, tools: list[Tool], *, many: bool, lazy: bool) -> str:
        rules, args = value_rules([parameters_of(t) for t in tools], "args")
        calls = [self._call(t.name, rule) for t, rule in zip(tools, args, strict=True)]
        opening = " | ".join(literal(m) for m in CALLS_BEGIN_VARIANTS)
        repeat = "+" if many else ""
        return f"root ::= ( {opening} ) ( {' | '.join(calls)} ){repeat} {literal(CALLS_END)} space\n" + rules

    def _call(self, name: str, args: str) -> str:
        if self.v3_1:
            head = literal(name + SEP)
            return f"( {literal(CALL_BEGIN)} )? {head} {args} {literal(CALL_END)}"
        head = literal(f"function{SEP}{name}\n```json\n")
        return f'( {literal(CALL_BEGIN)} )? {head} {args} "```" {literal(CALL_END)}'
