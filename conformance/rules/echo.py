"""Echo: with ``echo: true`` a ``/v1/completions`` choice's text begins with its prompt, exactly; servers
that cannot echo refuse the parameter (Q72), and one that drops or mangles the prompt breaks every client
that cuts the prompt off by its length (scoring a prompt with ``max_tokens: 0``, for one).

Only text prompts are judged: a prompt of token ids comes back as the model's detokenization of them,
which the request does not spell out. In a stream the choice's text is joined over its chunks; only how
much of the prompt it has matched is kept, so a long prompt costs no memory.
"""

from __future__ import annotations

from typing import Any

from conformance.rules.context import ChoiceState, Context, clipped

__all__ = ["echo_prompt", "echo_prompt_body", "echo_whole"]

_JUDGED = -1


def echo_prompt(
    ctx: Context, event: int | None, pos: int, choice: dict[str, Any], state: ChoiceState
) -> None:
    """Each piece of text, while the prompt lasts, must be the next piece of the prompt."""
    matched = state.echo_matched
    if not ctx.request.echo or matched == _JUDGED or ctx.endpoint != "completions":
        return
    prompt = ctx.request.prompt_for(state.index)
    if prompt is None:  # a prompt of token ids, or an index no prompt has
        state.echo_matched = _JUDGED
        return
    text = choice.get("text")
    if not isinstance(text, str):
        return
    head = text[: len(prompt) - matched]
    if not prompt.startswith(head, matched):
        state.echo_matched = _JUDGED
        where = "" if not matched else f" after its first {matched} characters"
        ctx.error(
            "echo-ignored",
            f"echo: true, but the text leaves the prompt{where}: {clipped(head, 40)} where the prompt has "
            f"{clipped(prompt[matched : matched + len(head)], 40)}",
            event=event,
            pointer=f"/choices/{pos}/text",
            quirk="Q72",
        )
        return
    matched += len(head)
    state.echo_matched = _JUDGED if matched == len(prompt) else matched


def _ended_early(ctx: Context, event: int | None, pointer: str | None, state: ChoiceState) -> None:
    """The whole text is a proper beginning of the prompt: it ended before the prompt did."""
    matched = state.echo_matched
    prompt = ctx.request.prompt_for(state.index)
    if matched == _JUDGED or prompt is None or matched >= len(prompt):
        return
    state.echo_matched = _JUDGED
    ctx.error(
        "echo-ignored",
        f"echo: true, but the text ends after {matched} of the prompt's {len(prompt)} characters",
        event=event,
        pointer=pointer,
        quirk="Q72",
    )


def echo_whole(ctx: Context) -> None:
    """At a stream's end: a finished choice whose whole text is shorter than its prompt (Q72)."""
    if not ctx.request.echo or ctx.endpoint != "completions":
        return
    for state in ctx.choices.values():
        if state.finished_event is not None:
            _ended_early(ctx, state.finished_event, None, state)


def echo_prompt_body(ctx: Context, pos: int, choice: dict[str, Any], state: ChoiceState) -> None:
    """A body's choice is whole: its text begins with the prompt, or it is wrong."""
    echo_prompt(ctx, None, pos, choice, state)
    if ctx.request.echo and ctx.endpoint == "completions":
        _ended_early(ctx, None, f"/choices/{pos}/text", state)
