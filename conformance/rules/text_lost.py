"""Text lost: the response says tokens were generated, but no choice carried any of them (Q14).

ik_llama.cpp #767 streamed ``"text": ""`` on every chunk while ``usage`` counted the tokens and
``finish_reason`` said ``length``; a later regression (#905) sent no text at all. The stream is
otherwise well formed, so shape rules pass it, and a client shows its user an empty success. Judged the
same way for a stream (over all its chunks) and for a body.
"""

from __future__ import annotations

from typing import Any

from conformance.rules.context import ChoiceState, Context, choice_text, usage_count

__all__ = ["choice_output", "reasoning_tokens", "text_lost"]

# Keys that carry output besides the text: reasoning (Q39, both spellings), a refusal, tool calls.
_OUTPUT_KEYS = ("reasoning_content", "reasoning", "refusal", "tool_calls", "function_call")


def choice_output(
    ctx: Context, event: int | None, pos: int, choice: dict[str, Any], state: ChoiceState
) -> None:
    """Notes whether the choice carried any output so far (a delta, a message or a completion's text)."""
    if state.output_seen:
        return
    text = choice_text(choice)
    if isinstance(text, str) and text:
        state.output_seen = True
        return
    part = choice.get("delta", choice.get("message"))
    if isinstance(part, dict) and any(part.get(key) for key in _OUTPUT_KEYS):
        state.output_seen = True


def reasoning_tokens(usage: Any) -> int:
    """Tokens spent on reasoning the response does not show (``completion_tokens_details``)."""
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    return usage_count(details, "reasoning_tokens") or 0


def text_lost(ctx: Context) -> None:
    """A choice that finished ``length`` without any output, or usage counting completion tokens while no
    choice carried output. Quiet where the response explains the silence: an error event, hidden
    reasoning tokens (OpenAI's reasoning models answer ``content: ""`` and ``length`` when the whole
    budget went to reasoning), ``max_tokens: 0``, or no choice at all (``choice-count``'s finding)."""
    if not ctx.choices or ctx.in_band_errors or reasoning_tokens(ctx.usage) > 0:
        return
    silent = [state for state in ctx.choices.values() if not state.output_seen]
    if not silent:
        return
    if ctx.request.max_tokens != 0:
        cut = [state for state in silent if state.finish_reason == "length"]
        for state in cut:
            ctx.error(
                "text-lost",
                f"choice {state.index} finished 'length' without any text: the generated tokens were"
                " not sent",
                event=state.finished_event,
                pointer=f"/choices/{state.index}",
                quirk="Q14",
            )
        if cut:
            return
    completion = ctx.completion_tokens
    # Each choice may spend one token on its end-of-sequence, which has no text (llama.cpp counts it):
    # only more completion tokens than choices, all of them silent, is text that was lost.
    if completion is not None and completion > len(ctx.choices) and len(silent) == len(ctx.choices):
        ctx.error(
            "text-lost",
            f"usage counts {completion} completion tokens, but no choice carried any text or tool call",
            event=ctx.usage_last_event,
            pointer="/usage/completion_tokens",
            quirk="Q14",
        )
