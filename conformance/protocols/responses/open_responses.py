"""The Open Responses profile: what its specification requires of a Response beyond OpenAI's own schema.

Open Responses (openresponses.org, specification 2026-04-24) is the definition of ``/v1/responses`` that
local servers and gateways are measured by; its public compliance suite validates every Response
snapshot (a body, and the ``response`` of ``response.created``, ``.in_progress``, ``.queued`` and the
terminal events) against its ``ResponseResource`` schema. Where that schema is stricter than OpenAI's
(schemas/response.json, which OpenAI's own recordings of 2025 pass), these rules say so:

- every field below is present (``null`` only where the type allows it): OpenAI's recordings leave out
  ``presence_penalty`` and ``frequency_penalty``; llama-server b11434's own ``/v1/responses`` left out
  ``incomplete_details``, ``previous_response_id``, ``instructions``, ``error`` and ``completed_at``;
- ``temperature``, ``top_p``, ``presence_penalty``, ``frequency_penalty`` are numbers and
  ``top_logprobs`` an integer ("the values that were used"): ``conformant serve`` echoed ``null`` and
  the suite failed all 9 of its tests (issue 38);
- each listed function tool has ``description`` and ``parameters`` (object or null) and ``strict``
  (boolean or null).

They run under the profile ``open-responses``: ``check`` judges a live server by it by default (the bar
its users measure it by), ``validate`` only when asked (``--profile open-responses``), so that OpenAI's
own recordings stay clean under the OpenAI profile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from conformance.rules.context import OPEN_RESPONSES_PROFILE, Context

__all__ = ["SPEC_VERSION", "response_fields"]

SPEC_VERSION = "2026-04-24"

_Check = Callable[[Any], bool]


def _string(value: Any) -> bool:
    return isinstance(value, str)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _boolean(value: Any) -> bool:
    return isinstance(value, bool)


def _object(value: Any) -> bool:
    return isinstance(value, Mapping)


def _array(value: Any) -> bool:
    return isinstance(value, list)


def _or_null(check: _Check) -> _Check:
    return lambda value: value is None or check(value)


def _tool_choice(value: Any) -> bool:
    return isinstance(value, str | Mapping)


_FIELDS: dict[str, tuple[_Check, str]] = {
    "id": (_string, "a string"),
    "object": (lambda v: v == "response", '"response"'),
    "created_at": (_integer, "an integer"),
    "completed_at": (_or_null(_integer), "an integer or null"),
    "status": (_string, "a string"),
    "incomplete_details": (_or_null(_object), "an object or null"),
    "model": (_string, "a string"),
    "previous_response_id": (_or_null(_string), "a string or null"),
    "instructions": (_or_null(_string), "a string or null"),
    "output": (_array, "an array"),
    "error": (_or_null(_object), "an object or null"),
    "tools": (_array, "an array"),
    "tool_choice": (_tool_choice, "a string or an object"),
    "truncation": (lambda v: v in ("auto", "disabled"), '"auto" or "disabled"'),
    "parallel_tool_calls": (_boolean, "a boolean"),
    "text": (_object, "an object"),
    "top_p": (_number, "a number"),
    "presence_penalty": (_number, "a number"),
    "frequency_penalty": (_number, "a number"),
    "top_logprobs": (_integer, "an integer"),
    "temperature": (_number, "a number"),
    "reasoning": (_or_null(_object), "an object or null"),
    "usage": (_or_null(_object), "an object or null"),
    "max_output_tokens": (_or_null(_integer), "an integer or null"),
    "max_tool_calls": (_or_null(_integer), "an integer or null"),
    "store": (_boolean, "a boolean"),
    "background": (_boolean, "a boolean"),
    "service_tier": (_string, "a string"),
    "safety_identifier": (_or_null(_string), "a string or null"),
    "prompt_cache_key": (_or_null(_string), "a string or null"),
}
"""``ResponseResource``'s fields, each required, and the type the spec gives it."""

_TOOL_FIELDS: dict[str, tuple[_Check, str]] = {
    "name": (_string, "a string"),
    "description": (_or_null(_string), "a string or null"),
    "parameters": (_or_null(_object), "an object or null"),
    "strict": (_or_null(_boolean), "a boolean or null"),
}
"""A ``function`` tool's fields as a Response lists it (``FunctionTool``)."""

_SHOWN = 6  # fields named in one finding; the rest are counted


def _wrong(fields: Mapping[str, tuple[_Check, str]], value: Mapping[str, Any]) -> list[str]:
    wrong = []
    for name, (check, wanted) in fields.items():
        if name not in value:
            wrong.append(f"{name} missing")
        elif not check(value[name]):
            wrong.append(f"{name} is {_kind(value[name])}, not {wanted}")
    return wrong


def _kind(value: Any) -> str:
    return (
        "null" if value is None else type(value).__name__.replace("dict", "object").replace("list", "array")
    )


def _listed(wrong: list[str]) -> str:
    shown = "; ".join(wrong[:_SHOWN])
    return shown if len(wrong) <= _SHOWN else f"{shown}; and {len(wrong) - _SHOWN} more"


def response_fields(ctx: Context, event: int | None, response: Mapping[str, Any], where: str) -> None:
    """A Response snapshot has every field of the Open Responses ``ResponseResource``, typed as it says
    (see the module's docstring); only under the ``open-responses`` profile."""
    if ctx.profile != OPEN_RESPONSES_PROFILE:
        return
    _report(ctx, "response", _wrong(_FIELDS, response), event, where or "/")
    tools = response.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        if isinstance(tool, Mapping) and tool.get("type") == "function":
            _report(ctx, "tool", _wrong(_TOOL_FIELDS, tool), event, f"{where}/tools/{index}")


def _report(ctx: Context, what: str, wrong: list[str], event: int | None, pointer: str) -> None:
    """One finding for what a Response (``what``: ``response``) or a function tool (``tool``) lacks."""
    if wrong:
        thing = "a Response" if what == "response" else "a function tool"
        ctx.error(
            f"open-responses-{what}-field",
            f"Open Responses {SPEC_VERSION} requires of {thing}: {_listed(wrong)}",
            event=event,
            pointer=pointer,
            quirk="open-responses",
        )
