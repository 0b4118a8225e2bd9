"""Non-streaming bodies: ``chat.completion`` and ``text_completion`` (spec §2.3, §2.5; Q61, Q73)."""

from __future__ import annotations

from typing import Any

from conformance.rules import (
    RESPONSE_RULES,
    chat_deltas,
    echo,
    identity,
    logprobs,
    logprobs_text,
    reasoning,
    stop,
    template_tokens,
    text_lost,
    tool_calls,
    tool_use,
    usage,
    zero_limit,
)
from conformance.rules.context import ChoiceState, Context
from conformance.rules.schema_checks import schema_findings

__all__ = ["BODY_SCHEMA", "judge_body_object", "tool_calls_finish_body"]

BODY_SCHEMA = {"chat": "chat_completion", "completions": "text_completion"}


def judge_body_object(ctx: Context, body: dict[str, Any]) -> None:
    """Every rule that applies to one complete response object."""
    if ctx.endpoint is not None:
        schema_findings(ctx, None, body, BODY_SCHEMA[ctx.endpoint])
    identity.id_stable(ctx, None, body)
    identity.id_prefix(ctx, None, body)
    identity.model_stable(ctx, None, body)
    usage.usage_arithmetic(ctx, None, body.get("usage"), "/usage")
    usage.usage_within_limit(ctx, None, body.get("usage"), "/usage")
    if isinstance(body.get("usage"), dict):
        ctx.usage = body["usage"]
    choices = body.get("choices")
    if not isinstance(choices, list):
        return
    for pos, choice in enumerate(choices):
        if not isinstance(choice, dict):
            continue
        index = chat_deltas.choice_index(ctx, None, pos, choice)
        state = ctx.choices.setdefault(index, ChoiceState(first_event=-1, index=index))
        reason = choice.get("finish_reason")
        state.finish_reason = reason if isinstance(reason, str) else None
        logprobs.legacy_logprobs_shape(ctx, None, pos, choice, state)
        logprobs.logprobs_present(ctx, None, pos, choice, state)
        logprobs.logprob_sentinel(ctx, None, pos, choice, state)
        logprobs.chat_top_count(ctx, None, pos, choice, state)
        zero_limit.generated_past_zero(ctx, None, pos, choice, state)
        logprobs_text.logprobs_past_text_body(ctx, pos, choice, state)
        echo.echo_prompt_body(ctx, pos, choice, state)
        stop.stop_ignored(ctx, None, pos, choice, state)
        template_tokens.template_tokens(ctx, None, pos, choice, state)
        tool_calls_finish_body(ctx, pos, choice)
        _tool_call_ids(ctx, pos, choice, state)
        tool_use.collect_body(ctx, pos, choice, state)
        reasoning.reasoning_field(ctx, None, pos, choice, state)
        text_lost.choice_output(ctx, None, pos, choice, state)
    zero_limit.zero_limit_end(ctx)
    n = ctx.request.choices
    if n is not None and len(ctx.choices) < n:
        ctx.error(
            "choice-count",
            f"request asked for {ctx.request.asked()}: {n} choices, the body has {len(ctx.choices)}",
            quirk=chat_deltas.choice_count_quirk(ctx),
        )
    for rule in RESPONSE_RULES:
        rule(ctx)


def tool_calls_finish_body(ctx: Context, pos: int, choice: dict[str, Any]) -> None:
    """A message with ``tool_calls`` finishes with ``"tool_calls"`` (spec checklist §7.6; Q19, Q64), unless
    the token limit cut it (``length``, as in a stream: tool_calls.tool_calls_finish)."""
    message = choice.get("message")
    if (
        isinstance(message, dict)
        and message.get("tool_calls")
        and choice.get("finish_reason") not in ("tool_calls", "length")
    ):
        ctx.warn(
            "tool-calls-finish-reason",
            f"message has tool_calls but finish_reason is {choice.get('finish_reason')!r}",
            pointer=f"/choices/{pos}/finish_reason",
            quirk="Q64",
        )


def _tool_call_ids(ctx: Context, pos: int, choice: dict[str, Any], state: ChoiceState) -> None:
    message = choice.get("message")
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    for k, call in enumerate(calls if isinstance(calls, list) else []):
        where = f"/choices/{pos}/message/tool_calls/{k}/id"
        if isinstance(call, dict) and call.get("id"):
            tool_calls.call_id_unique(ctx, None, where, call["id"], state)
        elif isinstance(call, dict) and call.get("id") == "":
            # The schema takes any string; an empty one is no id: the client's tool message cannot name
            # the call it answers (as a streamed call without one, Q64's missing ids; issue 33).
            ctx.error(
                "tool-call-id-missing",
                "tool call has an empty 'id': the tool result cannot name the call it answers",
                pointer=where,
                quirk="Q64",
            )
