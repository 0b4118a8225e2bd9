"""Stop sequences: OpenAI ends a choice's text before the first stop sequence the request named, so the
sequence never appears in it; servers that ignore ``stop`` send it and go on (seed 002, Q76)."""

from __future__ import annotations

from typing import Any

from conformance.rules.context import ChoiceState, Context, choice_text

__all__ = ["stop_ignored"]


def stop_ignored(
    ctx: Context, event: int | None, pos: int, choice: dict[str, Any], state: ChoiceState
) -> None:
    """Also across chunks: the end of the text that could begin a stop sequence is kept per choice."""
    stops = ctx.request.stop
    if not stops or state.stop_seen or (ctx.request.echo and ctx.endpoint == "completions"):
        return  # an echoed prompt may hold a stop sequence
    text = choice_text(choice)
    if not isinstance(text, str) or not text:
        return
    window = state.text_tail + text
    found = next((stop for stop in stops if stop in window), None)
    if found is not None:
        state.stop_seen = True
        ctx.error(
            "stop-ignored",
            f"the choice's text holds the stop sequence {found!r}; the request asked for the text to end"
            " before it",
            event=event,
            pointer=f"/choices/{pos}",
            quirk="Q76",
        )
        return
    keep = max(len(stop) for stop in stops) - 1
    state.text_tail = window[-keep:] if keep else ""
