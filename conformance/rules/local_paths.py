"""Local paths a client must never be shown: a model file's path as ``model`` (Q09), a path or a
traceback frame in an error message (spec: an error names the problem, not the server's files).

A bare file name such as ``model.gguf`` is a name, not a leak.
"""

from __future__ import annotations

import re
from typing import Any

from conformance.rules.context import Context

__all__ = ["error_leaks_path", "leaked_path", "model_is_local_path"]

_LOCAL_PATH = re.compile(
    r'File "[^"]+"|[\w.~-]*/[\w./~-]*\.gguf\b|[A-Za-z]:\\[\w\\.-]+'
    r"|(?<![\w/.:])/(?:home|root|Users|usr|opt|tmp|var|mnt|srv|app|models|data|work)/[\w./@~+-]*"
)


def leaked_path(text: str) -> str | None:
    """The first local path or traceback frame in ``text``, if any."""
    match = _LOCAL_PATH.search(text)
    return match.group(0).strip(" \"'(=") if match else None


def model_is_local_path(ctx: Context, event: int | None, payload: dict[str, Any]) -> None:
    """Judged on a body and on a stream's first chunk (the identity rules see a model that changes)."""
    model = payload.get("model")
    if isinstance(model, str) and leaked_path(model):
        ctx.error(
            "model-is-local-path",
            f"`model` is a local file path: {model!r}",
            event=event,
            pointer="/model",
            quirk="Q09",
        )


def error_leaks_path(ctx: Context, message: Any) -> None:
    """An error response's message (or its whole text when it is no OpenAI error) shows a local path."""
    if not isinstance(message, str) or ctx.status is None or ctx.status < 400:
        return
    leak = leaked_path(message[:4096])
    if leak:
        ctx.error("error-leaks-path", f"the error message shows a local path ({leak!r})", quirk="spec")
