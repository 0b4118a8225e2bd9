"""Identity fields: one non-empty id, model and created for the whole stream; the id's prefix (Q01-Q13)."""

from __future__ import annotations

from typing import Any

from conformance.rules.context import Context, clipped
from conformance.rules.leaks import model_path

__all__ = ["created_stable", "id_prefix", "id_stable", "model_stable"]

_PREFIX = {"chat": "chatcmpl-", "completions": "cmpl-"}


def _stable_text(
    ctx: Context,
    event: int | None,
    chunk: dict[str, Any],
    key: str,
    *,
    empty: str,
    changed: str,
    hint: str = "",
) -> None:
    """The string field ``key`` is non-empty on its first chunk and the same on every later one."""
    value = chunk.get(key)
    if not isinstance(value, str):
        return
    seen = getattr(ctx, key)
    setattr(ctx, key, value)
    if ctx.unset(seen):
        if not value:
            ctx.error(f"{key}-empty", f"empty {key!r}", event=event, pointer=f"/{key}", quirk=empty)
    elif value != seen:
        ctx.error(
            f"{key}-changed",
            f"{key!r} changed from {clipped(seen, 60)} to {clipped(value, 60)}{hint}",
            event=event,
            pointer=f"/{key}",
            quirk=changed,
        )


def id_stable(ctx: Context, event: int | None, chunk: dict[str, Any]) -> None:
    """Non-empty id (Q01, Q02), the same on every chunk (Q03). A missing id is a schema finding."""
    _stable_text(ctx, event, chunk, "id", empty="Q01", changed="Q03", hint="; every chunk has the same id")


def id_prefix(ctx: Context, event: int | None, chunk: dict[str, Any]) -> None:
    """OpenAI ids start ``chatcmpl-`` / ``cmpl-`` (Q04, Q06, Q07); checked once per stream."""
    if event != ctx.first_chunk_event or ctx.endpoint is None:
        return
    value = chunk.get("id")
    prefix = _PREFIX[ctx.endpoint]
    if isinstance(value, str) and value and not value.startswith(prefix):
        ctx.warn(
            "id-prefix",
            f"id {clipped(value, 60)} does not start with {prefix!r}",
            event=event,
            pointer="/id",
            quirk="Q04" if value.startswith("chatcmpl-") else "Q07",
        )


def model_stable(ctx: Context, event: int | None, chunk: dict[str, Any]) -> None:
    """``model`` names the served model (Q02, Q09): non-empty, the same on every chunk, not a file path."""
    seen = ctx.model
    _stable_text(ctx, event, chunk, "model", empty="Q02", changed="spec")
    value = chunk.get("model")
    if value != seen:  # each name once: a stream repeats it on every chunk
        model_path(ctx, event, value)


def created_stable(ctx: Context, event: int | None, chunk: dict[str, Any]) -> None:
    """ "Each chunk has the same timestamp" (spec); servers recompute it per chunk (Q13). A warning: no
    client reads ``created`` past the first chunk, so the answer works and only differs."""
    value = chunk.get("created")
    if not isinstance(value, int):
        return
    if ctx.unset(ctx.created):
        ctx.created = value
    elif value != ctx.created:
        ctx.warn(
            "created-changed",
            f"'created' changed from {ctx.created} to {value}; every chunk has the same timestamp",
            event=event,
            pointer="/created",
            quirk="Q13",
        )
        ctx.created = value
