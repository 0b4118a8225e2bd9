"""Hermes 2 Pro / 3, Qwen 2.5 / 3: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

One tag pair per call, several in a row for parallel calls; the JSON inside has ``name`` and
``arguments`` in either order (Hermes 2 Pro's model card shows ``arguments`` first). Detected, as
llama.cpp's common/chat.cpp does, by ``<tool_call>`` in the chat template. The grammar, lazy under
``auto`` (it starts at ``<tool_call>``), forces the tags and a call that fits one of the tools.
"""

from __future__ import annotations

import re
from typing import Any

from backend.requests import Tool, ToolChoice
from backend.tool_formats.base import GrammarPlan, ParsedOutput, ToolFormat, call_from_object, decode_json_at
from backend.tool_formats.grammar import CALL_RULE, allowed_tools, call_schema, literal, one_of, schema_rules

__all__ = ["Hermes"]

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class Hermes(ToolFormat):
    name = "hermes"
    markers = (OPEN,)

    def parse(self, text: str, *, final: bool) -> ParsedOutput:
        out = ParsedOutput("")
        pos = 0
        while True:
            start = text.find(OPEN, pos)
            if start < 0:
                out.content += text[pos:]
                break
            found = decode_json_at(text, start + len(OPEN))
            call = call_from_object(found[0]) if found is not None else None
            if found is None or call is None:
                # Not (yet) a whole call: a stream waits for more, the final text keeps it as content.
                out.content += text[pos:] if final else text[pos:start]
                break
            end = found[1]
            closing = re.compile(r"\s*" + re.escape(CLOSE)).match(text, end)
            if closing is None and not (final and not text[end:].strip()):
                out.content += text[pos:] if final else text[pos:start]
                break
            out.content += text[pos:start]
            out.calls.append(call)
            pos = closing.end() if closing is not None else len(text)
        out.content = out.content.strip() if out.calls else out.content
        return out

    def grammar(
        self, tools: list[Tool], choice: ToolChoice, parallel: bool, reply: dict[str, Any] | None
    ) -> GrammarPlan | None:
        if choice.mode == "none":
            return None
        schema = one_of([call_schema(t) for t in allowed_tools(tools, choice)])
        # The tags on lines of their own, as Hermes and Qwen templates write them (a newline before the
        # closing tag refused, a token that wrote it broke the grammar mid-piece).
        one = f'{literal(OPEN)} "\\n"? {CALL_RULE} "\\n"? {literal(CLOSE)}'
        many = parallel and choice.mode != "named"
        root = 'root ::= tagged-call ( "\\n"? tagged-call )*\n' if many else "root ::= tagged-call\n"
        gbnf = root + f"tagged-call ::= {one}\n" + schema_rules(schema)
        lazy = choice.mode == "auto"
        return GrammarPlan(gbnf, (re.escape(OPEN),) if lazy else ())
