"""gpt-oss harmony: a call is a ``commentary`` (or ``analysis``) message addressed ``to=functions.NAME``.

Read by the shared syntax (conformance/tool_formats/harmony.py). Detected by ``<|channel|>`` in the
template (models/templates/openai-gpt-oss-120b.jinja), as llama.cpp's common_chat_templates_apply_jinja
does. The grammar is common_chat_params_init_gpt_oss's, the recipient after the channel
(``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{json}``, as the template renders
an earlier call) or before it (``<|start|>assistant to=functions.NAME<|channel|>commentary
json<|message|>{json}``), then the ``<|call|>`` that ends a call message (a stop token in gpt-oss's
vocabulary; optional here as there). One call per message, one message: the grammar ends with it.

Lazy under ``auto``, on llama.cpp's triggers: ``<|channel|>commentary to`` (or ``analysis``) and
``<|start|>assistant to``. Forced (``required`` or a named function), the answer may first think in an
``analysis`` message (gpt-oss always does), then the call: unlike llama.cpp, no commentary preamble, and
the recipient before the channel only after ``<|start|>assistant``, as the shared syntax reads it.
"""

from __future__ import annotations

from backend.requests import Tool
from backend.tool_formats.base import ToolFormat
from backend.tool_formats.grammar import literal, parameters_of, text_without, value_rules
from conformance.tool_formats.harmony import CALL, CHANNEL, MESSAGE, START
from conformance.tool_formats.harmony import Harmony as HarmonySyntax

__all__ = ["Harmony"]

_CHANNEL = f'{literal(CHANNEL)} ( "commentary" | "analysis" )'
_CONSTRAINT = f'( " " {literal("<|constrain|>")} "json" | " json" )?'


class Harmony(HarmonySyntax, ToolFormat):
    triggers = (r"<\|channel\|>(?:commentary|analysis) to", r"<\|start\|>assistant to")

    def calls_grammar(self, tools: list[Tool], *, many: bool, lazy: bool) -> str:
        # One call whatever ``many`` says: a call message ends the answer.
        rules, args = value_rules([parameters_of(t) for t in tools], "args")
        heads = [literal(" to=functions." + t.name) for t in tools]
        tails = [f"{_CONSTRAINT} {literal(MESSAGE)} {rule} ( {literal(CALL)} )?" for rule in args]
        in_channel = " | ".join(f"{head} {tail}" for head, tail in zip(heads, tails, strict=True))
        in_role = " | ".join(f"{head} {_CHANNEL} {tail}" for head, tail in zip(heads, tails, strict=True))
        call = f"{literal(START + 'assistant')} ( {in_role} | channel-call ) | channel-call"
        rules = f"channel-call ::= {_CHANNEL} ( {in_channel} )\n" + rules
        if lazy:
            return f"root ::= {call}\n" + rules
        thinking = f"{literal(CHANNEL + 'analysis' + MESSAGE)} not-end {literal('<|end|>')}"
        return f"root ::= ( {thinking} )? ( {call} )\n" + text_without("not-end", "<|end|>") + rules
