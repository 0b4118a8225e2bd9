"""What every tool-call format shares: parsed calls, the format interface, JSON scanning helpers.

A format knows three things about one model family (llama.cpp's common/chat.cpp keeps the same three per
format): how its output marks a call (``markers``, used to stop streaming content and as the lazy
grammar's trigger), how to read calls out of the text (``parse``), and the grammar that makes the model
write a valid call (``grammar``). Parsing never raises: text that does not hold a whole call stays
content, so a model that answers in prose is still answered.
"""

from __future__ import annotations

import json
import secrets
import string
from dataclasses import dataclass, field
from typing import Any

from backend.requests import Tool, ToolChoice
from conformance.generic_tools import decode_json_at

__all__ = ["GrammarPlan", "ParsedCall", "ParsedOutput", "ToolFormat", "arguments_text", "decode_json_at"]


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str
    """The arguments as a JSON text (OpenAI sends ``function.arguments`` as a string)."""
    id: str | None = None
    """The id the model wrote itself (Mistral's), else None: the server makes one."""


@dataclass(slots=True)
class ParsedOutput:
    content: str
    calls: list[ParsedCall] = field(default_factory=list)


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


def arguments_text(value: Any) -> str | None:
    """A call's arguments as OpenAI's JSON string: an object is dumped, a string holding an object is
    kept (some models quote them); anything else is no arguments at all."""
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        found = decode_json_at(value, 0)
        if found is not None and isinstance(found[0], dict) and not value[found[1] :].strip():
            return value.strip()
    return None


def call_from_object(obj: Any, *, arguments_keys: tuple[str, ...] = ("arguments",)) -> ParsedCall | None:
    """``{"name": ..., "arguments": {...}}`` (or another arguments key) -> a call; None if not one."""
    if not isinstance(obj, dict):
        return None
    if obj.get("type") == "function" and isinstance(obj.get("function"), dict):
        obj = obj["function"]  # OpenAI's own shape, which some fine-tunes copy
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    for key in arguments_keys:
        if key in obj:
            arguments = arguments_text(obj[key])
            if arguments is None:
                return None
            call_id = obj.get("id")
            return ParsedCall(name, arguments, call_id if isinstance(call_id, str) else None)
    return ParsedCall(name, "{}")


class ToolFormat:
    """The interface one format module implements (see the module docstring)."""

    name: str = ""
    markers: tuple[str, ...] = ()
    """Text that opens a call; content streams until one shows up."""
    leading_only: bool = False
    """Whether a call can only open the answer (Llama 3.x JSON, the generic format): then the whole
    answer is held until it is clear whether it is a call."""
    whole_json: bool = False
    """Whether every answer is one JSON document (the generic format): nothing streams as content."""

    def parse(self, text: str, *, final: bool) -> ParsedOutput:
        """Calls in ``text`` and the content around them; with ``final`` False only whole calls count."""
        raise NotImplementedError

    def grammar(
        self, tools: list[Tool], choice: ToolChoice, parallel: bool, reply: dict[str, Any] | None
    ) -> GrammarPlan | None:
        """The grammar for this request (None: generate freely). ``reply`` is the response_format schema."""
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
