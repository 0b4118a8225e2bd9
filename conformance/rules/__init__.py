"""The conformance rules, one small function each, grouped by concern; the judge runs them in these orders.

These are the core's rules: they judge chat completions and completions, the core's own wire, and what
every protocol shares (the request's acceptance, errors, intents, leaks). A protocol the core serves by
translation brings its own rules in its package (conformance/protocols/responses/stream_rules.py), run
through ``ProtocolRules`` (context.py). Every rule cites a quirk id (``Q14``) from the catalogue or the
OpenAI spec fact it enforces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conformance.rules import (
    chat_deltas,
    echo,
    finish_reason,
    framing,
    identity,
    logprobs,
    logprobs_text,
    reasoning,
    stop,
    structured_output,
    template_tokens,
    text_lost,
    tool_calls,
    tool_use,
    usage,
    usage_truth,
    zero_limit,
)
from conformance.rules.context import ChoiceState, Context, Request
from conformance.sse import SSEBlock

__all__ = [
    "BLOCK_RULES",
    "CHOICE_RULES",
    "CHUNK_RULES",
    "END_RULES",
    "REQUEST_CHOICE_RULES",
    "RESPONSE_RULES",
    "ChoiceState",
    "Context",
    "Request",
    "choice_rules",
]

BlockRule = Callable[[Context, SSEBlock], None]
ChunkRule = Callable[[Context, int, dict[str, Any]], None]
ChoiceRule = Callable[[Context, int, int, dict[str, Any], ChoiceState], None]
EndRule = Callable[[Context], None]


def _usage_counts(ctx: Context, event: int, chunk: dict[str, Any]) -> None:
    counts = chunk.get("usage")
    if counts is None:  # most chunks: the counting rules have nothing to judge
        return
    usage.usage_arithmetic(ctx, event, counts, "/usage")
    usage.usage_within_limit(ctx, event, counts, "/usage")


BLOCK_RULES: tuple[BlockRule, ...] = (
    framing.event_field,
    framing.id_field,
    framing.retry_field,
    framing.nonstandard_field,
    framing.comment_lines,
    framing.empty_event,
    framing.cut_off_block,
)
CHUNK_RULES: tuple[ChunkRule, ...] = (
    identity.id_stable,
    identity.id_prefix,
    identity.model_stable,
    identity.created_stable,
    usage.usage_chunk,
    usage.usage_last,
    _usage_counts,
)
# finish_once runs last: the rules before it see the choice as it was before this chunk.
CHOICE_RULES: tuple[ChoiceRule, ...] = (
    chat_deltas.role_once,
    chat_deltas.delta_nulls,
    chat_deltas.tool_calls_empty,
    chat_deltas.delta_empty,
    tool_calls.tool_call_fragments,
    tool_calls.tool_calls_finish,
    reasoning.reasoning_field,
    logprobs.legacy_logprobs_shape,
    logprobs.logprobs_present,
    logprobs.logprob_sentinel,
    logprobs_text.legacy_logprobs_extent,
    echo.echo_prompt,
    stop.stop_ignored,
    template_tokens.template_tokens,
    chat_deltas.content_null_then_text,
    text_lost.choice_output,
    finish_reason.finish_on_content,
    finish_reason.choice_after_finish,
    finish_reason.finish_once,
)
# Rules only some requests need (chat logprobs, a token limit of 0): added to the choice rules of those
# requests' responses alone, so every other chunk costs nothing for them (bench/validate_speed.py).
REQUEST_CHOICE_RULES: tuple[tuple[Callable[[Request], bool], ChoiceRule], ...] = (
    (lambda request: request.logprobs, logprobs.chat_top_count),
    (lambda request: request.known and request.max_tokens == 0, zero_limit.generated_past_zero),
    (tool_use.wants_content, tool_use.collect_content),
    (tool_use.no_tools, tool_use.tool_markup_in_chunk),
)


def choice_rules(request: Request) -> tuple[ChoiceRule, ...]:
    """The choice rules for one response; the request-only ones run before ``finish_once``."""
    extra = tuple(rule for needed, rule in REQUEST_CHOICE_RULES if needed(request))
    return CHOICE_RULES[:-1] + extra + CHOICE_RULES[-1:] if extra else CHOICE_RULES


# What the whole response says, held against what it sent and what was asked: the same for a stream,
# at its end, and for a body (bodies.judge_body_object runs them after its choices).
RESPONSE_RULES: tuple[EndRule, ...] = (
    text_lost.text_lost,
    usage_truth.stop_at_limit,
    usage_truth.usage_below_length,
    usage_truth.prompt_tokens_short,
    tool_use.tool_arguments,
    tool_use.tool_choice_honoured,
    tool_use.parallel_off,
    tool_use.finish_without_calls,
    tool_use.tool_call_in_content,
    structured_output.json_content,
)
END_RULES: tuple[EndRule, ...] = (
    framing.done_missing,
    finish_reason.finish_reported,
    usage.usage_requested,
    chat_deltas.choice_count,
    echo.echo_whole,
    logprobs_text.logprobs_past_text,
    logprobs.logprobs_never_sent,
    zero_limit.zero_limit_end,
    *RESPONSE_RULES,
)
