"""A token limit of 0 generates nothing (spec: ``max_tokens`` "the maximum number of tokens that can be
generated"): with ``echo`` the text is the prompt alone (scoring a prompt), without it the text is empty.
llama-cpp-python read 0 as "no limit" and generated to the end of the context.

Text is counted per choice only for such requests, so every other stream pays one comparison a choice.
"""

from __future__ import annotations

from typing import Any

from conformance.rules.context import ChoiceState, Context, choice_text

__all__ = ["generated_past_zero", "zero_limit_end"]


def generated_past_zero(
    ctx: Context, event: int | None, pos: int, choice: dict[str, Any], state: ChoiceState
) -> None:
    """Counts the choice's text while the request's limit is 0."""
    if ctx.request.max_tokens != 0 or not ctx.request.known:
        return
    text = choice_text(choice)
    if isinstance(text, str):
        state.text_chars += len(text)


def _allowed(ctx: Context, state: ChoiceState) -> int | None:
    """Characters the choice may carry: its echoed prompt, or none; None when the prompt is token ids."""
    if not ctx.request.echo:
        return 0
    prompt = ctx.request.prompt_for(state.index)
    return len(prompt) if prompt is not None else None


def zero_limit_end(ctx: Context) -> None:
    """At the end of a stream or body: no choice carried more than its echoed prompt, and, where none
    did, usage counts no generated token. Text generated past the limit is the deviation; usage that
    counts it truly is not a second one (issue 33: both were reported for llama-cpp-python's answer)."""
    if ctx.request.max_tokens != 0 or not ctx.request.known:
        return
    generated = False
    for state in ctx.choices.values():
        allowed = _allowed(ctx, state)
        if allowed is not None and state.text_chars > allowed:
            generated = True
            what = "after the echoed prompt" if allowed else "of text"
            ctx.error(
                "max-tokens-zero-generated",
                f"token limit 0, yet the choice carries {state.text_chars - allowed} characters {what}",
                pointer=f"/choices/{state.index}",
                quirk="spec",
            )
    completion = ctx.completion_tokens
    if not generated and completion:
        ctx.error(
            "usage-over-max-tokens",
            f"max_tokens 0 asks for no generated token, but usage counts {completion} completion tokens",
            event=ctx.usage_last_event,
            pointer="/usage/completion_tokens",
            quirk="spec",
        )
