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
from typing import Any

from backend.requests import Tool, ToolChoice
from backend.tool_formats.base import GrammarPlan, ToolFormat
from backend.tool_formats.grammar import allowed_tools, literal, parameters_of, value_rules
from conformance.tool_formats.kimi import ARGUMENT_BEGIN, CALL_BEGIN, CALL_END, SECTION_BEGIN, SECTION_END
from conformance.tool_formats.kimi import Kimi as KimiSyntax

__all__ = ["Kimi"]


class Kimi(KimiSyntax, ToolFormat):
    def grammar(
        self, tools: list[Tool], choice: ToolChoice, parallel: bool, reply: dict[str, Any] | None
    ) -> GrammarPlan | None:
        if choice.mode == "none":
            return None
        allowed = allowed_tools(tools, choice)
        rules, args = value_rules([parameters_of(t) for t in allowed], "args")
        calls = [
            f"{literal(CALL_BEGIN + 'functions.' + t.name + ':')} [0-9]+ {literal(ARGUMENT_BEGIN)} {rule} "
            f"{literal(CALL_END)}"
            for t, rule in zip(allowed, args, strict=True)
        ]
        many = "+" if parallel and choice.mode != "named" else ""
        gbnf = (
            f"root ::= {literal(SECTION_BEGIN)} ( {' | '.join(calls)} ){many} {literal(SECTION_END)}\n"
            + rules
        )
        lazy = choice.mode == "auto"
        return GrammarPlan(gbnf, (re.escape(SECTION_BEGIN),) if lazy else ())
