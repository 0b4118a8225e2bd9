"""What an exchange was meant to show, when its request alone cannot say: a probe's intent.

``conformant check --record`` writes each probe's intent into the sidecar as ``"expect": "<intent>"``; the
judge reads it from there in ``validate`` as from the probe in ``check``, so both give the same findings.
Everything the request itself decides (choices for ``n`` and prompt arrays, usage, stop, logprobs, echo,
whether OpenAI accepts it) is judged from the request for every response, not here.

- ``success``: a request the server should serve: HTTP 200, unless it declined an optional feature with
  a clean 4xx (``feature-unsupported``) or failed with a 5xx on one (``feature-server-error``).
- ``finish-length``: the prompt is meant to run into the token limit: ``finish_reason: "length"``
  (a Responses answer: status ``incomplete``, ``incomplete_details.reason`` ``max_output_tokens``),
  unless usage shows the model stopped on its own before the limit (a small model under a fallback chat
  template may say nothing at all).
- ``context-overflow``: a prompt longer than the context: 400 ``context_length_exceeded`` before any
  stream starts (Q42, Q43, Q52).
- ``unknown-model``: a model the server does not have: OpenAI answers 404 ``model_not_found``; a
  one-model server that serves any name only warns.
- ``hang-up``: the client closed the connection on purpose: the stream's end is not judged.
- ``two-calls``: a request that asks for two tool calls in one turn (``parallel_tool_calls``): served,
  and a warning where the model made fewer (it may choose to; what each call says is judged from the
  request by rules/tool_use.py).
- ``reasoning``: a request to a reasoning model: served, its reasoning shown under ``reasoning_content``
  (rules/reasoning.py).
"""

from __future__ import annotations

from collections.abc import Callable

from conformance.rules.acceptance import declined_feature, route_missing
from conformance.rules.context import Context
from conformance.rules.reasoning import reasoning_shown

__all__ = ["CONTEXT_OVERFLOW_INTENT", "HANG_UP", "INTENTS", "intent_findings"]

HANG_UP = "hang-up"
CONTEXT_OVERFLOW_INTENT = "context-overflow"


def _status_text(ctx: Context) -> str:
    kind = "stream" if ctx.stream else ctx.headers.get("content-type", "no content type")
    return f"HTTP {ctx.status} ({kind}, {ctx.body_bytes} bytes)"


def success(ctx: Context) -> None:
    status = ctx.status
    if status == 200 or status is None:
        return
    if declined_feature(ctx) or (ctx.request.features and status >= 500):
        return  # the acceptance rules reported it
    ctx.error("expected-success", f"a valid request got {_status_text(ctx)}", quirk="spec")


def finish_length(ctx: Context) -> None:
    if ctx.status != 200:
        success(ctx)
        return
    if ctx.protocol is not None:  # a Response has no finish_reason: its protocol says how it ends
        ctx.protocol.limit_reached(ctx)
        return
    reasons = {state.finish_reason for state in ctx.choices.values()} - {None}
    used, limit = ctx.completion_tokens, ctx.request.max_tokens
    stopped_early = reasons == {"stop"} and used is not None and limit is not None and used < limit
    # 'stop' at a limit usage shows reached is finish-stop-at-limit's, the fact said once.
    if "length" in reasons or stopped_early or ctx.sink.fired("finish-stop-at-limit"):
        return
    ctx.error(
        "finish-length-expected",
        f"the token limit {limit} was reached ({used} completion tokens) but finish_reason is "
        f"{sorted(map(str, reasons))}, not 'length'",
        quirk="spec",
    )


def context_overflow(ctx: Context) -> None:
    """The status of an overflow; its stream and its code are judged where every response's are: an
    empty 200 stream is ``stream-empty`` (Q52), a 400 without ``context_length_exceeded`` is
    ``context-overflow-code`` (errors.overflow_code, told the intent). A server without the route said
    nothing about the prompt (``feature-unsupported``), and a 200 whose usage shows the prompt cut is
    ``prompt-truncated``'s fact (Q50), which says the 400 that was owed: each is said once."""
    if route_missing(ctx) or ctx.sink.fired("prompt-truncated"):
        return
    if ctx.status == 200 and ctx.stream:
        if ctx.data_events == 0:
            return  # framing.stream_empty reported it (Q52)
        ctx.error(
            "context-overflow-in-stream",
            f"context overflow answered with a HTTP 200 stream ({ctx.body_bytes} bytes) instead of"
            " HTTP 400 context_length_exceeded",
            quirk="Q42",
        )
    elif ctx.status != 400:
        ctx.error(
            "context-overflow-status",
            f"context overflow got {_status_text(ctx)} instead of HTTP 400",
            quirk="Q43",
        )


def unknown_model(ctx: Context) -> None:
    status = ctx.status or 0
    if status == 200:
        ctx.warn("unknown-model-accepted", "a request for an unknown model was served", quirk="spec")
    elif not 400 <= status < 500:
        ctx.error(
            "invalid-request-status",
            f"an unknown model got {_status_text(ctx)}; OpenAI answers 404 with an error object",
            quirk="Q43",
        )


def two_calls(ctx: Context) -> None:
    success(ctx)
    if ctx.status != 200:
        return
    if ctx.sink.fired("tool-choice-required-ignored"):
        return  # no call at all, where one was required: said by that rule
    for state in ctx.choices.values():
        # A choice its token limit cut may have been cut before its second call: nothing to say.
        if len(state.tool_calls) < 2 and state.finish_reason != "length":
            ctx.warn(
                "parallel-calls-fewer",
                f"two calls in one turn were asked for; choice {state.index} made {len(state.tool_calls)}",
                pointer=f"/choices/{state.index}",
                quirk="spec",
            )


def reasoning(ctx: Context) -> None:
    success(ctx)
    reasoning_shown(ctx)


def hang_up(ctx: Context) -> None:
    """Nothing to judge beyond the stream read so far; the judge leaves its end alone."""


INTENTS: dict[str, Callable[[Context], None]] = {
    "success": success,
    "finish-length": finish_length,
    CONTEXT_OVERFLOW_INTENT: context_overflow,
    "unknown-model": unknown_model,
    HANG_UP: hang_up,
    "two-calls": two_calls,
    "reasoning": reasoning,
}


def intent_findings(ctx: Context) -> None:
    """The intent's rule; an intent this version does not know is reported, not guessed at."""
    intent = ctx.intent
    if intent is None:
        return
    rule = INTENTS.get(intent)
    if rule is None:
        ctx.warn("intent-unknown", f"the sidecar's expect {intent!r} is not one of {', '.join(INTENTS)}")
        return
    rule(ctx)
