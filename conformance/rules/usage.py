"""Usage: only when ``stream_options.include_usage`` asked for it, once, in a ``choices: []`` chunk just
before ``[DONE]``, with ``total = prompt + completion`` (spec §2.10; Q26-Q34)."""

from __future__ import annotations

from typing import Any

from conformance.rules.context import Context
from conformance.rules.finish_reason import is_final

__all__ = [
    "usage_arithmetic",
    "usage_chunk",
    "usage_last",
    "usage_requested",
    "usage_within_limit",
]


def _unasked(ctx: Context) -> bool:
    """Whether the request is known and did not ask for usage (``stream_options.include_usage``)."""
    return ctx.request.known and not ctx.request.include_usage


def usage_chunk(ctx: Context, event: int, chunk: dict[str, Any]) -> None:
    """Usage rides alone in one ``choices: []`` chunk, never on content chunks (Q26, Q27, Q29, Q32)."""
    usage = chunk.get("usage")
    if usage is None:
        return
    if ctx.usage_seen_event is None:
        ctx.usage_seen_event = event
    if isinstance(usage, dict):
        ctx.usage = usage
        ctx.usage_last_event = event
    choices = chunk.get("choices")
    if ctx.stream and isinstance(choices, list) and choices:
        # Unasked, usage belongs nowhere (usage-unrequested says so): no hint where it would go.
        where = "" if _unasked(ctx) else "; usage comes alone in a final choices: [] chunk"
        ctx.error(
            "usage-in-choice-chunk",
            f"non-null 'usage' on a chunk with choices{where} (the OpenAI Node SDK treats any truthy usage"
            " as the usage chunk)",
            event=event,
            pointer="/usage",
            quirk=_usage_quirk(usage, choices, again=ctx.usage_seen_event != event),
        )
        return
    if not ctx.stream:
        return
    if ctx.usage_event is not None:
        ctx.error(
            "usage-repeated",
            f"a second usage chunk (first at event {ctx.usage_event})",
            event=event,
            pointer="/usage",
            quirk="spec",
        )
    else:
        ctx.usage_event = event


def usage_last(ctx: Context, event: int, chunk: dict[str, Any]) -> None:
    """The usage chunk is the last data event before ``[DONE]`` (openai-python overwrites usage per chunk)."""
    if ctx.usage_event is not None and ctx.usage_event != event and chunk.get("usage") is None:
        ctx.error(
            "usage-not-last",
            f"chunk after the usage chunk (event {ctx.usage_event}); usage must come just before [DONE]",
            event=event,
            quirk="spec",
        )


def usage_arithmetic(ctx: Context, event: int | None, usage: Any, where: str) -> None:
    """``total_tokens`` is ``prompt_tokens + completion_tokens`` (CompletionUsage)."""
    if not isinstance(usage, dict):
        return
    counts = [usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")]
    ints = [v for v in counts if isinstance(v, int) and not isinstance(v, bool)]
    if len(ints) == 3:
        prompt, completion, total = ints
        if prompt + completion != total:
            ctx.error(
                "usage-arithmetic",
                f"total_tokens {total} != prompt_tokens {prompt} + completion_tokens {completion}",
                event=event,
                pointer=f"{where}/total_tokens",
                quirk="spec",
            )
        elif min(prompt, completion, total) < 0:
            ctx.error("usage-arithmetic", "negative token count", event=event, pointer=where, quirk="spec")


def usage_within_limit(ctx: Context, event: int | None, usage: Any, where: str) -> None:
    """No more completion tokens than the request allowed: ``max_completion_tokens`` (else ``max_tokens``)
    for each sequence generated. ``completion_tokens`` already includes reasoning tokens, which count
    toward the limit too, so the details are not added again."""
    if not isinstance(usage, dict) or ctx.request.max_tokens == 0:
        return  # a limit of 0 is judged whole at the end (zero_limit): the text first, then the count
    limit = ctx.request.completion_limit
    completion = usage.get("completion_tokens")
    if (
        limit is None
        or not isinstance(completion, int)
        or isinstance(completion, bool)
        or completion <= limit
    ):
        return
    copies = limit // (ctx.request.max_tokens or 1)
    per = f" x {copies} sequences" if copies > 1 else ""
    message = f"completion_tokens {completion} exceeds the limit of {ctx.request.max_tokens}{per} asked for"
    ctx.error(
        "usage-over-max-tokens", message, event=event, pointer=f"{where}/completion_tokens", quirk="spec"
    )


def usage_requested(ctx: Context) -> None:
    """At the end: usage present iff the request asked (Q26 sent unasked, Q28/Q33 missing when asked).
    Usage sent on a chunk with choices was sent: where it rode is ``usage-in-choice-chunk``'s concern
    (llama-server's finish chunk, Q26), and the client still reads it, so it is not also missing."""
    if not ctx.request.known or not ctx.stream:
        return
    if ctx.request.include_usage and ctx.usage_seen_event is None and ctx.done_event is not None:
        ctx.error(
            "usage-missing",
            "stream_options.include_usage was set but no chunk before [DONE] carried usage",
            event=ctx.done_event,
            quirk="Q28",
        )
    if not ctx.request.include_usage and ctx.usage_seen_event is not None:
        ctx.error(
            "usage-unrequested",
            "usage sent although stream_options.include_usage was not set",
            event=ctx.usage_seen_event,
            pointer="/usage",
            quirk="Q26",
        )


def _usage_quirk(usage: Any, choices: list[Any], *, again: bool) -> str:
    """Zero usage on every chunk is LocalAI's (Q29); usage once, on the finish chunk, is llama.cpp's
    (Q26); usage on a chunk that still carries the text, or on a second chunk, is usage on every chunk,
    ik_llama.cpp's (Q27)."""
    if _all_zero(usage):
        return "Q29"
    finishing = any(isinstance(c, dict) and is_final(c.get("finish_reason")) for c in choices)
    return "Q26" if finishing and not again else "Q27"


def _all_zero(usage: Any) -> bool:
    return isinstance(usage, dict) and not any(
        usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    )
