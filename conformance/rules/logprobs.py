"""Logprobs: the legacy parallel-array shape on ``/v1/completions`` with equal lengths (Q67, Q68), and
present when the request asked for them (Q69)."""

from __future__ import annotations

from typing import Any

from conformance.rules.context import ChoiceState, Context, choice_text

__all__ = [
    "chat_top_count",
    "legacy_logprobs_shape",
    "logprob_sentinel",
    "logprobs_never_sent",
    "logprobs_present",
    "top_count",
]

_LEGACY_ARRAYS = ("tokens", "token_logprobs", "top_logprobs", "text_offset")
# llama.cpp writes minus infinity as the float minimum (-3.4e38, Q67); OpenAI's floor is -9999.0.
_SENTINEL_BELOW = -1e30


def legacy_logprobs_shape(
    ctx: Context, event: int | None, pos: int, choice: dict[str, Any], state: ChoiceState | None
) -> None:
    if ctx.endpoint != "completions":
        return
    logprobs = choice.get("logprobs")
    where = f"/choices/{pos}/logprobs"
    if isinstance(logprobs, list):
        ctx.error(
            "logprobs-shape",
            "logprobs is a flat list; /v1/completions uses the legacy object",
            event=event,
            pointer=where,
            quirk="Q68",
        )
        return
    if not isinstance(logprobs, dict):
        return
    if "content" in logprobs and not any(k in logprobs for k in _LEGACY_ARRAYS):
        ctx.error(
            "logprobs-shape",
            "chat-style logprobs {content: [...]} in a text_completion; legacy clients expect "
            "{tokens, token_logprobs, top_logprobs, text_offset}",
            event=event,
            pointer=where,
            quirk="Q67",
        )
        return
    lengths = {k: len(v) for k in _LEGACY_ARRAYS if isinstance(v := logprobs.get(k), list)}
    if len(set(lengths.values())) > 1:
        ctx.error(
            "logprobs-lengths",
            "legacy logprobs arrays differ in length: " + ", ".join(f"{k}={n}" for k, n in lengths.items()),
            event=event,
            pointer=where,
            quirk="spec",
        )
    top = ctx.request.top_logprobs if ctx.request.known else None
    entries = logprobs.get("top_logprobs")
    if top is not None and isinstance(entries, list):
        for j, entry in enumerate(entries):
            if isinstance(entry, dict) and len(entry) > top + 1:
                ctx.error(
                    "logprobs-top-count",
                    f"top_logprobs entry has {len(entry)} alternatives; the request asked for {top} (+1)",
                    event=event,
                    pointer=f"{where}/top_logprobs/{j}",
                    quirk="spec",
                )
                break


def logprobs_present(
    ctx: Context, event: int | None, pos: int, choice: dict[str, Any], state: ChoiceState | None
) -> None:
    """Asked-for logprobs must come on every chunk that carries text, and on a body's choices even when
    the text is empty (OpenAI then sends an empty list; llama-cpp-python sent null, Q69)."""
    if not (ctx.request.known and ctx.request.logprobs):
        return
    if choice.get("logprobs") is not None:
        if state is not None:
            state.logprobs_seen = True
        return
    text = choice_text(choice)
    if text or event is None:
        ctx.error(
            "logprobs-missing",
            "the request asked for logprobs but this choice carries none"
            if event is None
            else "the request asked for logprobs but this choice carries text without them",
            event=event,
            pointer=f"/choices/{pos}/logprobs",
            quirk="Q69",
        )


def logprobs_never_sent(ctx: Context) -> None:
    """At a stream's end: a choice that generated tokens and never carried asked-for logprobs on any
    chunk. The chunk rule above fires only on chunks with text, so a stream that lost its text too
    (ik_llama.cpp #767's empty chunks, Q14) lost its logprobs unseen (issue 33). Generated: it finished
    ``length`` under a limit above 0, or usage counts more completion tokens than there are choices
    (each may spend one on its end-of-sequence, as text_lost counts)."""
    if not (ctx.request.known and ctx.request.logprobs) or ctx.in_band_errors:
        return
    completion = ctx.completion_tokens
    counted = completion is not None and completion > len(ctx.choices)
    for state in ctx.choices.values():
        cut = state.finish_reason == "length" and ctx.request.max_tokens != 0
        if not state.logprobs_seen and (cut or counted):
            ctx.error(
                "logprobs-missing",
                f"the request asked for logprobs but no chunk of choice {state.index} carried any",
                event=state.finished_event,
                pointer=f"/choices/{state.index}/logprobs",
                quirk="Q69",
            )


def chat_top_count(
    ctx: Context, event: int | None, pos: int, choice: dict[str, Any], state: ChoiceState | None
) -> None:
    """Chat tokens carry at most ``top_logprobs`` alternatives; ``logprobs: true`` alone asks for none,
    and OpenAI then sends ``top_logprobs: []`` (spec)."""
    top = ctx.request.top_logprobs
    if top is None or ctx.endpoint != "chat" or not ctx.request.logprobs:
        return
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    top_count(ctx, event, content, top, f"/choices/{pos}/logprobs/content")


def top_count(ctx: Context, event: int | None, entries: Any, top: int, where: str) -> None:
    """At most ``top`` alternatives on each token entry of ``entries`` (found at ``where``): a chat
    choice's ``logprobs.content``, or a Response text's ``logprobs``, which have the same entries."""
    for j, entry in enumerate(entries if isinstance(entries, list) else ()):
        alternatives = entry.get("top_logprobs") if isinstance(entry, dict) else None
        if isinstance(alternatives, list) and len(alternatives) > top:
            ctx.error(
                "logprobs-top-count",
                f"a token carries {len(alternatives)} alternatives; the request asked for {top}",
                event=event,
                pointer=f"{where}/{j}/top_logprobs",
                quirk="spec",
            )
            return


def logprob_sentinel(
    ctx: Context, event: int | None, pos: int, choice: dict[str, Any], state: ChoiceState | None
) -> None:
    """A logprob standing for minus infinity: an average or a sum over the tokens is then meaningless."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return
    # The chosen tokens' and their alternatives': llama.cpp's -3.4e38 is mostly an alternative's.
    values: list[Any] = []
    legacy = logprobs.get("token_logprobs")
    if isinstance(legacy, list):
        values += legacy
    alternatives = logprobs.get("top_logprobs")
    if isinstance(alternatives, list):
        values += [v for entry in alternatives if isinstance(entry, dict) for v in entry.values()]
    content = logprobs.get("content")
    for entry in content if isinstance(content, list) else ():
        if isinstance(entry, dict):
            values.append(entry.get("logprob"))
            top = entry.get("top_logprobs")
            values += [t.get("logprob") for t in top if isinstance(t, dict)] if isinstance(top, list) else []
    low = next((v for v in values if isinstance(v, float) and v < _SENTINEL_BELOW), None)
    if low is not None:
        ctx.warn(
            "logprob-sentinel",
            f"logprob {low:g} stands for minus infinity; OpenAI sends -9999.0 for a very unlikely token",
            event=event,
            pointer=f"/choices/{pos}/logprobs",
            quirk="Q67",
        )
