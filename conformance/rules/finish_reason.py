"""finish_reason: null until one final value per choice, from the endpoint's enum; nothing after it (Q14-Q25).

Values outside the enum are schema findings (``finish-reason-value``); this module tracks the sequence.
"""

from __future__ import annotations

from typing import Any

from conformance.rules.context import ChoiceState, Context

__all__ = ["choice_after_finish", "finish_on_content", "finish_once", "finish_reported", "is_final"]

_NULL_LIKE = frozenset({"", "null", "None"})


def is_final(value: Any) -> bool:
    """A finish_reason that ends the choice. ``""`` and ``"null"`` are wrong spellings of null (Q15, Q21)."""
    return isinstance(value, str) and value not in _NULL_LIKE


def choice_after_finish(
    ctx: Context, event: int, pos: int, choice: dict[str, Any], state: ChoiceState
) -> None:
    """Nothing for a choice after its final chunk (Q14: every chunk carried ``length``)."""
    if state.finished_event is not None and not is_final(choice.get("finish_reason")):
        ctx.error(
            "choice-after-finish",
            f"choice {_index(choice, pos)} continues after its finish_reason at event {state.finished_event}",
            event=event,
            pointer=f"/choices/{pos}",
            quirk="Q14",
        )


def finish_once(ctx: Context, event: int, pos: int, choice: dict[str, Any], state: ChoiceState) -> None:
    """Exactly one non-null finish_reason per choice index (Q14, Q22)."""
    value = choice.get("finish_reason")
    if not is_final(value):
        return
    if state.finished_event is not None:
        ctx.error(
            "finish-reason-repeated",
            f"choice {_index(choice, pos)} got finish_reason {value!r} again "
            f"(first at event {state.finished_event})",
            event=event,
            pointer=f"/choices/{pos}/finish_reason",
            quirk="Q14",
        )
        # What the choice ended with is its last finish: ik_llama.cpp before #768 sent 'length' on every
        # chunk and 'stop' on the last (Q14). The end rules (usage-below-length, text-lost, the tool
        # rules) judge that end, not the first 'length', which this rule has already reported.
        state.finish_reason = value
        return
    state.finished_event = event
    state.finish_reason = value


def finish_on_content(ctx: Context, event: int, pos: int, choice: dict[str, Any], state: ChoiceState) -> None:
    """OpenAI sends the finish in its own ``delta: {}`` chunk; clients that stop there lose text (Q23)."""
    if not is_final(choice.get("finish_reason")):
        return
    delta = choice.get("delta")
    if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls")):
        ctx.warn(
            "finish-on-content",
            "finish_reason rides on a chunk that still carries content; OpenAI sends a separate delta {}",
            event=event,
            pointer=f"/choices/{pos}/finish_reason",
            quirk="Q23",
        )


def finish_reported(ctx: Context) -> None:
    """At a completed stream's end every choice seen has finished (Q22: only the last index got one)."""
    if ctx.done_event is None or ctx.in_band_errors:
        return
    for index, state in ctx.choices.items():
        if state.finished_event is None:
            ctx.error(
                "finish-reason-missing",
                f"choice {index} never got a finish_reason before [DONE]",
                event=ctx.done_event,
                quirk="Q22",
            )


def _index(choice: dict[str, Any], pos: int) -> Any:
    return choice.get("index", pos)
