"""Identity fields: one non-empty id, model and created for the whole stream; the id's prefix (Q01-Q13)."""

from __future__ import annotations

from typing import Any

from conformance.rules.context import Context

__all__ = ["created_stable", "id_prefix", "id_stable", "model_stable"]

_PREFIX = {"chat": "chatcmpl-", "completions": "cmpl-"}


def id_stable(ctx: Context, event: int | None, chunk: dict[str, Any]) -> None:
    """Non-empty id (Q01, Q02), the same on every chunk (Q03). A missing id is a schema finding."""
    value = chunk.get("id")
    if not isinstance(value, str):
        return
    if ctx.unset(ctx.id):
        ctx.id = value
        if not value:
            ctx.error("id-empty", "empty 'id'", event=event, pointer="/id", quirk="Q01")
        return
    if value != ctx.id:
        ctx.error(
            "id-changed",
            f"'id' changed from {ctx.id[:60]!r} to {value[:60]!r}; every chunk has the same id",
            event=event,
            pointer="/id",
            quirk="Q03",
        )
        ctx.id = value


def id_prefix(ctx: Context, event: int | None, chunk: dict[str, Any]) -> None:
    """OpenAI ids start ``chatcmpl-`` / ``cmpl-`` (Q04, Q06, Q07); checked once per stream."""
    if event != ctx.first_chunk_event or ctx.endpoint is None:
        return
    value = chunk.get("id")
    prefix = _PREFIX[ctx.endpoint]
    if isinstance(value, str) and value and not value.startswith(prefix):
        ctx.warn(
            "id-prefix",
            f"id {value[:60]!r} does not start with {prefix!r}",
            event=event,
            pointer="/id",
            quirk="Q04" if value.startswith("chatcmpl-") else "Q07",
        )


def model_stable(ctx: Context, event: int | None, chunk: dict[str, Any]) -> None:
    """``model`` names the served model (Q02, Q09): non-empty, and the same on every chunk."""
    value = chunk.get("model")
    if not isinstance(value, str):
        return
    if ctx.unset(ctx.model):
        ctx.model = value
        if not value:
            ctx.error("model-empty", "empty 'model'", event=event, pointer="/model", quirk="Q02")
        return
    if value != ctx.model:
        ctx.error(
            "model-changed",
            f"'model' changed from {ctx.model[:60]!r} to {value[:60]!r}",
            event=event,
            pointer="/model",
            quirk="spec",
        )
        ctx.model = value


def created_stable(ctx: Context, event: int | None, chunk: dict[str, Any]) -> None:
    """ "Each chunk has the same timestamp" (spec); servers recompute it per chunk (Q13)."""
    value = chunk.get("created")
    if not isinstance(value, int):
        return
    if ctx.unset(ctx.created):
        ctx.created = value
    elif value != ctx.created:
        ctx.error(
            "created-changed",
            f"'created' changed from {ctx.created} to {value}; every chunk has the same timestamp",
            event=event,
            pointer="/created",
            quirk="Q13",
        )
        ctx.created = value
