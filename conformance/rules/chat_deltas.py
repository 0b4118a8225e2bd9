"""Chat delta shape: ``role`` once, in the first delta of each choice (Q58-Q60); no explicit nulls (Q38);
dense choice indices (openai-python indexes ``choices`` by position); ``n`` choices when asked (Q70, Q71)."""

from __future__ import annotations

from typing import Any

from conformance.rules.context import ChoiceState, Context

__all__ = [
    "choice_count",
    "choice_count_quirk",
    "content_null_then_text",
    "delta_empty",
    "delta_nulls",
    "role_once",
    "tool_calls_empty",
]

_NULLABLE_BY_SPEC = frozenset({"content", "refusal"})
_CHOICE_KEYS = frozenset({"index", "delta", "logprobs", "finish_reason"})


def role_once(ctx: Context, event: int, pos: int, choice: dict[str, Any], state: ChoiceState) -> None:
    """openai-python joins repeated strings: a role in every delta becomes "assistantassistant..." (Q58)."""
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return
    role = delta.get("role")
    first = state.first_event == event
    if role is not None:
        if state.role_seen:
            ctx.error(
                "role-repeated",
                "'role' repeated after the first delta; openai-python's accumulator concatenates it",
                event=event,
                pointer=f"/choices/{pos}/delta/role",
                quirk="Q58",
            )
        elif not first:
            ctx.warn(
                "role-late",
                "'role' first appears after the choice's first delta",
                event=event,
                pointer=f"/choices/{pos}/delta/role",
                quirk="Q60",
            )
        state.role_seen = True
    elif first:
        ctx.warn(
            "role-missing",
            "the first delta of a choice carries no role (OpenAI sends role 'assistant' once)",
            event=event,
            pointer=f"/choices/{pos}/delta",
            quirk="Q59" if "role" not in delta else "Q60",
        )


def delta_nulls(ctx: Context, event: int, pos: int, choice: dict[str, Any], state: ChoiceState) -> None:
    """Unset delta keys are omitted by OpenAI; SGLang sends ``role``/``tool_calls`` as null (Q38)."""
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return
    for key, value in delta.items():
        if value is None and key not in _NULLABLE_BY_SPEC:
            ctx.warn(
                "delta-null-field",
                f"delta key {key!r} is explicitly null; OpenAI omits unset keys",
                event=event,
                pointer=f"/choices/{pos}/delta/{key}",
                quirk="Q38",
            )


def tool_calls_empty(ctx: Context, event: int, pos: int, choice: dict[str, Any], state: ChoiceState) -> None:
    """``"tool_calls": []`` on plain content deltas (vLLM 0.9.0, Q17)."""
    delta = choice.get("delta")
    if isinstance(delta, dict) and delta.get("tool_calls") == []:
        ctx.warn(
            "tool-calls-empty",
            "empty 'tool_calls' list in a delta; OpenAI omits the key",
            event=event,
            pointer=f"/choices/{pos}/delta/tool_calls",
            quirk="Q17",
        )


def delta_empty(ctx: Context, event: int, pos: int, choice: dict[str, Any], state: ChoiceState) -> None:
    """A chunk that says nothing: no role, no text, no tool call, no finish, no logprobs (Ollama, Q62).
    Clients that act on every chunk (a UI starting a message, a TTS feed) see a phantom update."""
    delta = choice.get("delta")
    if not isinstance(delta, dict) or choice.get("finish_reason") is not None or choice.get("logprobs"):
        return
    if any(value not in (None, "", [], {}) for value in delta.values()):
        return
    if any(choice[key] for key in choice.keys() - _CHOICE_KEYS):
        return  # it carries something else (Azure's content_filter_results)
    ctx.warn(
        "delta-empty",
        "a delta with nothing in it, neither text nor finish_reason; OpenAI sends no such chunk",
        event=event,
        pointer=f"/choices/{pos}/delta",
        quirk="Q62",
    )


def content_null_then_text(
    ctx: Context, event: int, pos: int, choice: dict[str, Any], state: ChoiceState
) -> None:
    """OpenAI's first delta has ``content: ""`` unless tool calls follow; llama.cpp and SGLang send null
    and then text (Q60), which clients typed on the first delta take for a tool-call turn."""
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return
    if state.first_event == event:
        if "content" in delta and delta["content"] is None and not delta.get("tool_calls"):
            state.content_null_event = event
        return
    if state.content_null_event is None or state.tool_calls:
        return
    content = delta.get("content")
    if isinstance(content, str) and content:
        ctx.warn(
            "content-null-then-text",
            "the choice's first delta had content null, then text came; OpenAI sends an empty string"
            " when no tool call follows",
            event=state.content_null_event,
            pointer=f"/choices/{pos}/delta/content",
            quirk="Q60",
        )
        state.content_null_event = None


def choice_index(ctx: Context, event: int | None, pos: int, choice: dict[str, Any]) -> int:
    """The choice's index; new indices must come in order from 0 without gaps, below ``n`` (Q61, Q71)."""
    index = choice.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        return pos
    if index not in ctx.choices:
        expected = len(ctx.choices)
        if index != expected:
            ctx.error(
                "choice-index-gap",
                f"choice index {index} appears before index {expected}; indices start at 0 without gaps",
                event=event,
                pointer=f"/choices/{pos}/index",
                quirk="spec",
            )
        n = ctx.request.choices
        if n is not None and not 0 <= index < n:
            ctx.error(
                "choice-index-range",
                f"choice index {index} outside 0..{n - 1} for {ctx.request.asked()}",
                event=event,
                pointer=f"/choices/{pos}/index",
                quirk="spec",
            )
    return index


def choice_count(ctx: Context) -> None:
    """A finished stream carries n choices (per prompt); servers silently ignore n (Q71) or a prompt
    array (Q73). A stream with no chunk at all is ``stream-empty``'s (Q52)."""
    if ctx.done_event is None or ctx.in_band_errors:
        return
    n = ctx.request.choices
    if n is None:  # the request is unknown (or this is an excerpt)
        return
    if len(ctx.choices) < n:
        ctx.error(
            "choice-count",
            f"request asked for {ctx.request.asked()}: {n} choices, the stream carried {len(ctx.choices)}",
            event=ctx.done_event,
            quirk=choice_count_quirk(ctx),
        )


def choice_count_quirk(ctx: Context) -> str:
    """Too few choices: ``n`` ignored (Q71) when ``n`` asked for more than one, else a prompt array
    answered as one prompt (Q73)."""
    return "Q73" if ctx.request.prompts > 1 and (ctx.request.n or 1) == 1 else "Q71"
