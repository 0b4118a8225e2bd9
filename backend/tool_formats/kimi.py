"""Kimi K2: ``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>
{json}<|tool_call_end|><|tool_calls_section_end|>``.

Read by the shared syntax (conformance/tool_formats/kimi.py). Detected by ``<|tool_calls_section_begin|>``
in the template (llama.cpp's common_chat_templates_apply_jinja also asks for Kimi's ``tool_declare`` system
turn). The grammar follows common_chat_params_init_kimi_k2: the section, then per call the id
``functions.NAME:IDX`` (as the Kimi-K2 templates render an earlier call's id; the name constrained to
the allowed tools, the index any digits) and the arguments' JSON; lazy under ``auto`` from the section's
opening.
"""

from __future__ import annotations

import re

from backend.requests import Tool
from backend.tool_formats.base import ToolFormat
from backend.tool_formats.grammar import literal, parameters_of, value_rules
from conformance.tool_formats.kimi import ARGUMENT_BEGIN, CALL_BEGIN, CALL_END, SECTION_BEGIN, SECTION_END
from conformance.tool_formats.kimi import Kimi as KimiSyntax

__all__ = ["Kimi"]


class Kimi(KimiSyntax, ToolFormat):
    triggers = (re.escape(SECTION_BEGIN),)

    def calls_grammar(self, tools: list[Tool], *, many: bool, lazy: bool) -> str:
        rules, args = value_rules([parameters_of(t) for t in tools], "args")
        calls = [
            f"{literal(CALL_BEGIN + 'functions.' + t.name + ':')} [0-9]+ {literal(ARGUMENT_BEGIN)} {rule} "
            f"{literal(CALL_END)}"
            for t, rule in zip(tools, args, strict=True)
        ]
        return (
            f"root ::= {literal(SECTION_BEGIN)} ( {' | '.join(calls)} ){'+' if many else ''} "
            f"{literal(SECTION_END)}\n" + rules
        )
