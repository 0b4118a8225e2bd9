"""Anthropic's Message: what a body, and a stream's message as the SDKs accumulate it, must say.

Facts (Anthropic's API reference "Create a Message" and "Errors"; anthropic-python ``types/message.py``,
``lib/streaming/_messages.py``, whose ``accumulate_event`` builds the message a stream's caller reads):

- ids: a Message is ``msg_...`` and a tool use ``toolu_...``; a client answers a call with a
  ``tool_result`` naming the ``tool_use`` id, so one that is empty or repeated loses the answer;
- ``stop_reason`` says why the model stopped: ``tool_use`` when, and only when, it asked for tools
  (agents run the calls on ``tool_use`` and end the turn otherwise), ``max_tokens`` when the limit cut it,
  ``stop_sequence`` with the sequence that matched in ``stop_sequence`` (one the request gave);
- ``usage.output_tokens`` never exceeds ``max_tokens``, and reaching it is ``max_tokens``, not
  ``end_turn``: a client that trusts ``end_turn`` takes a cut answer for a whole one;
- ``model`` names the served model, never a file path (Q09);
- what the request asked of the answer (its tools, ``tool_choice``, ``disable_parallel_tool_use``,
  ``output_config.format``) is judged by the core's rules (rules/tool_use.py, rules/structured_output.py)
  on the message seen as the one chat choice it translates to: their findings name it choice 0.

Errors, as a body and as a stream's ``error`` event, are Anthropic's ``{"type": "error", "error":
{"type", "message"}}`` (schemas/anthropic_error.json); the SDKs raise by status and show the message,
and Claude Code compacts its history when the message of a 400 says ``prompt is too long``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from conformance.request import integer
from conformance.rules import structured_output, tool_use
from conformance.rules.context import ChoiceState, Context, ToolCallState, clipped
from conformance.rules.intents import CONTEXT_OVERFLOW_INTENT
from conformance.rules.leaks import error_leaks, model_path
from conformance.rules.schema_checks import schema_findings

from .errors import ERROR_TYPES

__all__ = [
    "CHAT_RULES",
    "MESSAGE_RULES",
    "OVERFLOW_WORDS",
    "error_payload",
    "judge_message",
    "message_id",
    "stop_reason_agrees",
    "tool_use_ids",
    "usage_limit",
]

OVERFLOW_WORDS = ("prompt is too long", "input length and `max_tokens` exceed context limit")
"""How Anthropic words a prompt longer than the context (and one that ``max_tokens`` makes overflow):
what Claude Code looks for to compact its history, or to retry with fewer tokens."""
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


def _calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    return [
        block
        for block in (content if isinstance(content, list) else ())
        if isinstance(block, Mapping) and block.get("type") == "tool_use"
    ]


def message_id(ctx: Context, event: int | None, message: Mapping[str, Any], where: str) -> None:
    """The message's id is a non-empty ``msg_`` id (Q06: an empty id; clients key their history on it)."""
    given = message.get("id")
    if not isinstance(given, str) or not given:
        ctx.error(
            "messages-id-empty", "the message's id is empty", event=event, pointer=f"{where}/id", quirk="Q06"
        )
    elif not given.startswith("msg_"):
        ctx.warn(
            "messages-id-prefix",
            f"the message's id {clipped(given, 40)} does not start with 'msg_', as Anthropic's do",
            event=event,
            pointer=f"{where}/id",
            quirk="spec",
        )


def tool_use_ids(ctx: Context, event: int | None, message: Mapping[str, Any], where: str) -> None:
    """Each ``tool_use`` has its own non-empty id: the client's ``tool_result`` names it."""
    seen: set[str] = set()
    for position, block in enumerate(_calls(message)):
        given = block.get("id")
        if not isinstance(given, str) or not given or given in seen:
            what = "an empty id" if not given else f"the id {clipped(str(given), 40)} of an earlier call"
            ctx.error(
                "messages-tool-use-id",
                f"tool_use {position} has {what}: its tool_result cannot name it",
                event=event,
                pointer=f"{where}/content",
                quirk="Q65",
            )
        seen.add(str(given))


def stop_reason_agrees(ctx: Context, event: int | None, message: Mapping[str, Any], where: str) -> None:
    """``tool_use`` exactly when the message asks for tools; ``stop_sequence`` names one the request gave,
    and is named only with that reason."""
    reason, calls = message.get("stop_reason"), _calls(message)
    if reason == "tool_use" and not calls:
        ctx.error(
            "messages-tool-use-without-calls",
            "stop_reason 'tool_use' on a message without any tool_use block: nothing for the client to run",
            event=event,
            pointer=f"{where}/stop_reason",
            quirk="spec",
        )
    elif calls and reason in ("end_turn", "stop_sequence"):
        ctx.error(
            "messages-calls-not-tool-use",
            f"a message with {len(calls)} tool_use block(s) stopped {reason!r}, not 'tool_use': agents run "
            "the calls only on 'tool_use'",
            event=event,
            pointer=f"{where}/stop_reason",
            quirk="spec",
        )
    matched = message.get("stop_sequence")
    if matched is not None and reason != "stop_sequence":
        ctx.error(
            "messages-stop-sequence-reason",
            f"stop_sequence {clipped(str(matched), 40)} with stop_reason {clipped(str(reason), 40)}: a client"
            " that reads the reason takes a stop at its own sequence for the model's end of turn",
            event=event,
            pointer=f"{where}/stop_reason",
            quirk="Q89",
        )
    if reason == "stop_sequence" and ctx.request.known and matched not in ctx.request.stop:
        ctx.error(
            "messages-stop-sequence",
            f"stop_reason 'stop_sequence' with stop_sequence {clipped(str(matched), 40)}, not one the"
            " request gave",
            event=event,
            pointer=f"{where}/stop_sequence",
            quirk="spec",
        )


def usage_limit(ctx: Context, event: int | None, message: Mapping[str, Any], where: str) -> None:
    """``output_tokens`` within ``max_tokens``; reaching it is stop_reason ``max_tokens``."""
    usage = message.get("usage")
    generated = integer(usage.get("output_tokens")) if isinstance(usage, Mapping) else None
    ctx.usage = {"completion_tokens": generated}  # what ctx.completion_tokens reads
    limit = ctx.request.max_tokens if ctx.request.known else None
    if limit is None or generated is None:
        return
    if generated > limit:
        ctx.error(
            "messages-usage-over-limit",
            f"output_tokens {generated} over max_tokens {limit}",
            event=event,
            pointer=f"{where}/usage/output_tokens",
            quirk="spec",
        )
    if generated >= limit and message.get("stop_reason") == "end_turn":
        ctx.error(
            "messages-limit-end-turn",
            f"max_tokens {limit} was reached ({generated} output tokens) but stop_reason is 'end_turn', "
            "not 'max_tokens'",
            event=event,
            pointer=f"{where}/stop_reason",
            quirk="spec",
        )


MESSAGE_RULES = (tool_use_ids, stop_reason_agrees, usage_limit)
"""The rules on a finished message of this protocol's own (and ``message_id``, judged where the message
started)."""
CHAT_RULES = (
    tool_use.tool_arguments,
    tool_use.tool_choice_honoured,
    tool_use.parallel_off,
    tool_use.tool_call_in_content,
    structured_output.json_content,
)
"""The core's rules on what the request asked of the answer, run on the message's chat view."""


def _arguments(block: Mapping[str, Any]) -> str:
    """A call's arguments as chat carries them: a stream's joined ``partial_json`` (kept by the stream
    rules under ``partial_json``), else its ``input`` written as JSON."""
    joined = block.get("partial_json")
    if isinstance(joined, str):
        return joined
    return json.dumps(block.get("input"), ensure_ascii=False)


def _chat_view(ctx: Context, event: int | None, message: Mapping[str, Any]) -> None:
    """The message as the one chat choice it translates to (docs/messages.md), for the core's rules."""
    first = event if event is not None else 0
    reason = message.get("stop_reason")
    state = ChoiceState(first_event=first, index=0, finished_event=event)
    state.finish_reason = _FINISH.get(reason, "stop") if isinstance(reason, str) else None
    content = message.get("content")
    for block in content if isinstance(content, list) else ():
        if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str):
            state.content.append(block["text"])
    for position, block in enumerate(_calls(message)):
        name = block.get("name") if isinstance(block.get("name"), str) else None
        call = ToolCallState(
            first_event=first, has_id=bool(block.get("id")), has_name=name is not None, name=name
        )
        call.arguments.append(_arguments(block))
        state.tool_calls[position] = call
    ctx.choices = {0: state}


def judge_message(
    ctx: Context, event: int | None, message: Mapping[str, Any], where: str = "", started: int | None = None
) -> None:
    """Every rule on a finished message (a body, or the message a stream built, finished at ``event``
    and started at ``started``: its ``message_start``, where its id and model are)."""
    opened = event if started is None else started
    model_path(ctx, opened, message.get("model"), f"{where}/model")
    message_id(ctx, opened, message, where)
    content = message.get("content")
    if isinstance(content, list) and any(
        isinstance(b, Mapping) and b.get("type") == "thinking" for b in content
    ):
        ctx.reasoning_keys.add("thinking")  # the reasoning intent: the model's thinking was shown
    for rule in MESSAGE_RULES:
        rule(ctx, event, message, where)
    _chat_view(ctx, event, message)
    for chat_rule in CHAT_RULES:
        chat_rule(ctx)


def error_payload(ctx: Context, event: int | None, payload: Any) -> None:
    """An error, as a body (``event`` None) or a stream's ``error`` event: Anthropic's shape, no leak, a
    type that fits its status, and a context overflow worded as Anthropic (and Claude Code) word it."""
    status = ctx.status
    expected = ERROR_TYPES.get(status) if status is not None and event is None else None
    schema = "anthropic_error" if event is None else "message_stream_event#/$defs/error"
    # Where the status names the type Anthropic gives, messages-error-type judges it (a warning: the
    # SDKs raise by status); the schema's list of types would report the same value again as an error.
    skip = frozenset({"/error/type"}) if expected is not None else frozenset()
    schema_findings(ctx, event, payload, schema, judged_elsewhere=skip)
    error_leaks(ctx, event, payload)
    error = payload.get("error") if isinstance(payload, Mapping) else None
    if not isinstance(error, Mapping):
        return
    if event is not None:
        ctx.in_band_errors += 1
        return
    ctx.error_object = dict(error)
    kind = error.get("type")
    if expected is not None and kind != expected and not (status == 503 and kind == "api_error"):
        ctx.warn(
            "messages-error-type",
            f"HTTP {status} with error type {clipped(str(kind), 40)}; Anthropic's is {expected!r}",
            pointer="/error/type",
            quirk="spec",
        )
    message = error.get("message")
    worded = isinstance(message, str) and message.lower().startswith(OVERFLOW_WORDS)
    if ctx.intent == CONTEXT_OVERFLOW_INTENT and isinstance(message, str) and not worded:
        ctx.error(
            "messages-overflow-words",
            f"a prompt longer than the context refused as {clipped(message, 80)}; Anthropic says "
            f"{OVERFLOW_WORDS[0]!r}, which Claude Code reads to compact its history and retry",
            pointer="/error/message",
            quirk="spec",
        )
