"""Streamed tool calls: ``index`` on every fragment, from 0 without gaps; ``id``, ``type`` and
``function.name`` on the first fragment only, since openai-python concatenates repeats (Q63-Q66)."""

from __future__ import annotations

from typing import Any

from conformance.rules.context import ChoiceState, Context, ToolCallState, clipped

__all__ = ["call_id_unique", "tool_call_fragments", "tool_calls_finish"]


def tool_call_fragments(
    ctx: Context, event: int, pos: int, choice: dict[str, Any], state: ChoiceState
) -> None:
    delta = choice.get("delta")
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    if not isinstance(calls, list):
        return
    for k, call in enumerate(calls):
        if not isinstance(call, dict):
            continue
        where = f"/choices/{pos}/delta/tool_calls/{k}"
        function = call.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        given = call.get("index")
        checked = isinstance(given, int) and not isinstance(given, bool)
        index: int = given if isinstance(given, int) and checked else _implied_index(call, name, state)
        tool = state.tool_calls.get(index)
        if tool is None:
            tool = _first_fragment(ctx, event, where, index, call, name, state, checked=checked)
        else:
            _later_fragment(ctx, event, where, call, name, tool)
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str) and arguments:
            tool.arguments.append(arguments)
        elif arguments is not None and not isinstance(arguments, str):
            tool.arguments_not_text = True


def _implied_index(call: dict[str, Any], name: Any, state: ChoiceState) -> int:
    """The call a fragment without ``index`` belongs to, as a client that reads it anyway takes it: one
    with an ``id`` or a name opens the next call (Ollama sent each call whole, Q64), any other continues
    the last. Its missing ``index`` is the schema's finding (``required-key``); judging it as that call
    keeps the rest of it judged, a missing ``id``, its arguments and its finish, which skipping it hid
    (issue 33)."""
    if call.get("id") or name or not state.tool_calls:
        return len(state.tool_calls)
    return max(state.tool_calls)


def _first_fragment(
    ctx: Context,
    event: int,
    where: str,
    index: int,
    call: dict[str, Any],
    name: Any,
    state: ChoiceState,
    *,
    checked: bool = True,
) -> ToolCallState:
    if checked and index != len(state.tool_calls):
        ctx.error(
            "tool-call-index-gap",
            f"tool call index {index} appears before index {len(state.tool_calls)}",
            event=event,
            pointer=f"{where}/index",
            quirk="spec",  # Q64 is a fragment without any index (a schema finding), not a gap
        )
    tool = state.tool_calls[index] = ToolCallState(first_event=event)
    tool.has_id = bool(call.get("id"))
    if tool.has_id:
        call_id_unique(ctx, event, f"{where}/id", call["id"], state)
    tool.has_type = call.get("type") is not None
    tool.has_name = bool(name)
    tool.name = name if isinstance(name, str) and name else None
    if not tool.has_id:
        ctx.error(
            "tool-call-id-missing",
            "first fragment of a tool call has no 'id'",
            event=event,
            pointer=f"{where}/id",
            quirk="Q63",
        )
    if not tool.has_type:
        ctx.error(
            "tool-call-type-missing",
            "first fragment of a tool call has no 'type': 'function'",
            event=event,
            pointer=f"{where}/type",
            quirk="Q63",
        )
    if not tool.has_name:
        ctx.error(
            "tool-call-name-missing",
            "first fragment of a tool call has no function name",
            event=event,
            pointer=f"{where}/function/name",
            quirk="spec",  # Q66 is a name sent again as "" on later parts (tool-call-blank-repeat)
        )
    return tool


def _later_fragment(
    ctx: Context, event: int, where: str, call: dict[str, Any], name: Any, tool: ToolCallState
) -> None:
    if call.get("id"):
        ctx.error(
            "tool-call-id-repeated",
            "tool call 'id' sent again on a later fragment; openai-python's stream helper"
            " (accumulate_delta) appends it to the first id",
            event=event,
            pointer=f"{where}/id",
            quirk="Q63",
        )
    if name:
        ctx.error(
            "tool-call-name-repeated",
            "function name sent again on a later fragment; openai-python's stream helper (accumulate_delta)"
            f" appends it to the first: {clipped((tool.name or '') + str(name), 80)}",
            event=event,
            pointer=f"{where}/function/name",
            quirk="Q63",
        )
    blank = [key for key, value in (("id", call.get("id")), ("function/name", name)) if value == ""]
    for key in blank:
        ctx.warn(
            "tool-call-blank-repeat",
            f"'{key}' sent again as \"\" on a later fragment; clients that start a new call when the key"
            " is present split this one",
            event=event,
            pointer=f"{where}/{key}",
            quirk="Q66",
        )


def call_id_unique(ctx: Context, event: int | None, pointer: str, call_id: Any, state: ChoiceState) -> None:
    """Tool results are matched to calls by id: two calls of one choice with one id (TGI's "0", Q65) are
    confused by the client that continues the conversation with that choice."""
    key = str(call_id)
    if key in state.call_ids:
        ctx.error(
            "tool-call-id-duplicate",
            f"tool call id {key!r} used by an earlier call of this choice; results are matched by id",
            event=event,
            pointer=pointer,
            quirk="Q65",
        )
    state.call_ids.add(key)


def tool_calls_finish(ctx: Context, event: int, pos: int, choice: dict[str, Any], state: ChoiceState) -> None:
    """A turn that called tools ends with ``finish_reason: "tool_calls"`` (Q19, Q64, Q65). Not one the
    token limit cut: OpenAI ends that ``length`` too, calls or not (the parallel-tool-calls probe was
    warned for a small model that made its calls and ran on to its limit, issue 33)."""
    value = choice.get("finish_reason")
    if state.tool_calls and value == "stop" and state.finished_event is None:
        ctx.warn(
            "tool-calls-finish-reason",
            f"choice called tools but finished with {value!r} instead of 'tool_calls'",
            event=event,
            pointer=f"/choices/{pos}/finish_reason",
            quirk="Q64",
        )
