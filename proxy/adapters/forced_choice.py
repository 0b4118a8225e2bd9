"""A forced ``tool_choice`` (``required``, a named function) served as a call by any upstream (issue 37,
Q86): the ways of asking for it, in order, less those the upstream is known to ignore.

An OpenAI-compatible server may read ``tool_choice`` and still answer text with ``finish_reason:
"stop"``: llama-cpp-python serves ``required`` as ``auto`` (Q80), llama-server reads only a string and,
without a tool-call template, builds no tool grammar at all (Q83), and a server neither adapter knows
may do either. Such an answer is never the client's (proxy/sources/forced_call.py holds it back and
judges it); the request is asked again, one way after another:

1. as the client asked it (what the adapter makes of it: llama-cpp-python's one tool named, Q80);
2. ``required`` with exactly one function tool as that function named (``{"type": "function",
   "function": {"name": ...}}``), which servers that enforce only a named choice honour (Q80);
3. as JSON output (tool_emulation.py): the functions described in a system turn and the answer's JSON
   Schema in ``response_format``, the one form of constrained output OpenAI-compatible servers share
   (llama-cpp-python gets it as ``json_object`` with the schema, structured_output.py). Only function
   tools go so, and for a named choice that function alone.

Each way that gave no call is learned (``UpstreamTraits.ignored_tool_choices``, ``schema_enforced``),
so the next forced request starts at the first way not known to fail; where none is left it is a 400
``unsupported_parameter`` naming ``tool_choice`` before anything is sent, as the adapters refuse other
requests an upstream would answer as not asked (tool_requests.py). An answer cut by its token limit
before any call (``finish_reason: "length"``) teaches nothing: the limit, not the upstream, ended it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from conformance.api_errors import APIError
from conformance.request import named_function

from ..upstream_traits import UpstreamTraits
from .tool_emulation import emulated_request
from .tool_requests import choice_as_tools, function_tools

__all__ = ["Attempt", "ForcedKind", "forced_attempts", "forced_kind", "not_honoured", "unhonoured_choice"]

ForcedKind = Literal["required", "named"]
Way = Literal["asked", "named", "json_output"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One way of asking for the forced call: its name and the body sent (before the adapter's call)."""

    way: Way
    body: dict[str, Any]
    names: tuple[str, ...] = ()
    """The functions a call may be of, where the body no longer says (``json_output``)."""

    def failed(self, traits: UpstreamTraits, kind: ForcedKind) -> None:
        """What an answer without a call teaches of the upstream."""
        if self.way == "json_output":
            traits.enforced_schema(False)
        else:
            traits.ignored_tool_choice(kind if self.way == "asked" else "named")


def forced_kind(body: dict[str, Any]) -> ForcedKind | None:
    """Whether a chat body forces a call: ``required`` (an ``allowed_tools`` choice in mode ``required``
    too) or a named function; None for any other choice, or without tools."""
    body = choice_as_tools(body)
    if not body.get("tools"):
        return None
    choice = body.get("tool_choice")
    if choice == "required":
        return "required"
    if isinstance(choice, dict) and choice.get("type") == "function" and named_function(choice):
        return "named"
    return None


def forced_attempts(traits: UpstreamTraits, body: dict[str, Any], kind: ForcedKind) -> list[Attempt]:
    """The ways to ask the upstream for ``body``'s forced call, in order, less those it is known to
    ignore (empty: none is left)."""
    ignored = traits.ignored_tool_choices
    attempts = [] if kind in ignored else [Attempt("asked", body)]
    asked = choice_as_tools(body)
    tools = function_tools(asked)
    if kind == "required" and tools is not None and len(tools) == 1 and "named" not in ignored:
        name = tools[0]["function"]["name"]
        named = {**asked, "tool_choice": {"type": "function", "function": {"name": name}}}
        attempts.append(Attempt("named", named))
    if tools and traits.schema_enforced is not False:
        chosen = named_function(asked.get("tool_choice")) if kind == "named" else None
        functions = [t for t in tools if chosen is None or t["function"]["name"] == chosen]
        if functions:
            names = tuple(t["function"]["name"] for t in functions)
            attempts.append(Attempt("json_output", emulated_request(asked, functions, required=True), names))
    return attempts


def _described(kind: ForcedKind) -> str:
    return "'required'" if kind == "required" else "naming a function"


def unhonoured_choice(kind: ForcedKind) -> APIError:
    """The 400 for a forced call on an upstream known to answer it without one, every way it was asked."""
    return APIError.make(
        f"tool_choice {_described(kind)} is not supported by this server: it answered such requests "
        "without a tool call, however the proxy asked for one (named, or as JSON output where only "
        "function tools are offered)",
        400,
        code="unsupported_parameter",
        param="tool_choice",
    )


def not_honoured(kind: ForcedKind) -> APIError:
    """The 502 for a forced call the upstream answered without one, every way the proxy asked for it."""
    return APIError.make(
        f"the upstream server did not honour tool_choice {_described(kind)}: it answered without a tool "
        "call, however the proxy asked for one",
        502,
        code="tool_choice_not_honoured",
        param="tool_choice",
    )
