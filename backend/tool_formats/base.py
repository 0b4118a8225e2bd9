"""What every tool-call format shares: parsed calls, the format interface, JSON scanning helpers.

A format knows three things about one model family (llama.cpp's common/chat.cpp keeps the same three per
format): how its output marks a call (``markers``, used to stop streaming content and as the lazy
grammar's trigger), how to read calls out of the text (``parse``), and the grammar that makes the model
write a valid call (``grammar``). Parsing never raises: text that does not hold a whole call stays
content, so a model that answers in prose is still answered.
"""

from __future__ import annotations

import copy
import secrets
import string
from dataclasses import dataclass
from typing import Any

from backend.requests import Tool, ToolChoice
from backend.tool_formats.grammar import allowed_tools, many_calls
from conformance.tool_formats.base import (
    CallSyntax,
    ParsedCall,
    ParsedOutput,
    Schemas,
    arguments_text,
    call_from_object,
    decode_json_at,
)

__all__ = [
    "GrammarPlan",
    "ParsedCall",
    "ParsedOutput",
    "ToolFormat",
    "arguments_text",
    "call_from_object",
    "decode_json_at",
]


@dataclass(frozen=True, slots=True)
class GrammarPlan:
    """A GBNF grammar and, for a lazy one, the regexes whose match switches it on (llama.cpp's
    ``llama_sampler_init_grammar_lazy_patterns``: the grammar reads the text from the first capture
    group, or from the match's start)."""

    gbnf: str
    triggers: tuple[str, ...] = ()

    @property
    def lazy(self) -> bool:
        return bool(self.triggers)


class ToolFormat(CallSyntax):
    """The interface one format module implements (see the module docstring): a syntax's reading
    (conformance/tool_formats, shared with the proxy and the judge) and the grammar that writes it."""

    whole_json: bool = False
    """Whether every answer is one JSON document (the generic format): nothing streams as content."""
    schemas: Schemas | None = None
    """(A format bound to a request's tools) each function's parameters: how values a syntax writes as
    text are typed (Qwen3-Coder's ``"5"`` stays a string where the parameter is one)."""

    callable: tuple[str, ...] = ()
    """(A format bound to a request) the functions its choice lets a call be of."""
    forced = False
    """(A format bound to a request) whether its choice forces a call (``required``, a named one)."""

    def bound(self, tools: list[Tool], choice: ToolChoice) -> ToolFormat:
        """This format for one request: reading its answer with its tools' schemas, and the functions
        its choice allows."""
        bound = copy.copy(self)
        bound.schemas = {tool.name: tool.parameters for tool in tools}
        bound.callable = tuple(tool.name for tool in allowed_tools(tools, choice))
        bound.forced = choice.mode in ("required", "named")
        return bound

    def read(self, text: str, *, final: bool) -> ParsedOutput:
        """``parse`` with the request's schemas."""
        return self.parse(text, final=final, schemas=self.schemas)

    triggers: tuple[str, ...] = ()
    """The regexes that switch the grammar on under ``auto`` (lazy: the model may answer in prose);
    forced (``required``, a named function) the grammar holds from the first token."""

    def grammar(
        self, tools: list[Tool], choice: ToolChoice, parallel: bool, reply: dict[str, Any] | None
    ) -> GrammarPlan | None:
        """The grammar for this request (None: generate freely). ``reply`` is the response_format schema.

        What every format's grammar shares, as llama.cpp's common_chat_params_init_* share it: none
        under ``none``; the calls of the allowed tools only; lazy, from ``triggers``, under ``auto``."""
        if choice.mode == "none":
            return None
        lazy = choice.mode == "auto"
        gbnf = self.calls_grammar(allowed_tools(tools, choice), many=many_calls(choice, parallel), lazy=lazy)
        return GrammarPlan(gbnf, self.triggers if lazy else ())

    def calls_grammar(self, tools: list[Tool], *, many: bool, lazy: bool) -> str:
        """The GBNF (its ``root`` first) of the calls to ``tools``: several where ``many``, ``lazy`` where
        it starts at a trigger rather than at the answer's first token."""
        raise NotImplementedError

    def partial_content(self, text: str) -> str | None:
        """The reply written so far, for a format that wraps its reply (the generic ``response``)."""
        return None

    def new_call_id(self) -> str:
        return "call_" + secrets.token_hex(12)


def alnum_id(length: int = 9) -> str:
    """Mistral's templates refuse call ids that are not exactly 9 letters and digits."""
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))
