"""The reasoning field: thinking text in ``reasoning_content``, the name most servers and clients use (Q39).

Chat Completions has no reasoning field; the servers that show a model's thinking put it beside
``content`` under ``reasoning_content`` (DeepSeek, llama.cpp, SGLang, TabbyAPI, vLLM before Nov 2025) or
``reasoning`` (Ollama; vLLM since PR #27752, with ``reasoning_content`` removed by PR #33402). Clients
read one or the other (the Vercel AI SDK reads both; LangChain, LiteLLM and Continue read
``reasoning_content``), so the suite holds servers to ``reasoning_content``, the name this project's
backend and proxy send (issue 20):

- ``reasoning-field-name`` (warning): reasoning under ``reasoning``, naming both, once per response.
- ``reasoning-not-shown`` (warning, the ``reasoning`` probe's intent): a request to a reasoning model
  whose answer shows no reasoning under either name. Judged only where the server has a reasoning model;
  ``check`` against one that has none skips the probe (``--skip reasoning``).

Neither name is reported as an unknown key besides (schema_checks leaves both to these rules).
"""

from __future__ import annotations

from typing import Any

from conformance.rules.context import ChoiceState, Context

__all__ = ["REASONING_KEYS", "reasoning_field", "reasoning_shown"]

REASONING_KEYS = ("reasoning_content", "reasoning")


def reasoning_field(
    ctx: Context, event: int | None, pos: int, choice: dict[str, Any], state: ChoiceState
) -> None:
    """Notes the name reasoning text came under (a null or empty one is no reasoning, Q38); ``reasoning``
    is reported, once per response."""
    key = "delta" if "delta" in choice else "message"
    part = choice.get(key)
    if not isinstance(part, dict):
        return
    for name in REASONING_KEYS:
        if part.get(name) and name not in ctx.reasoning_keys:
            _noted(ctx, event, f"/choices/{pos}/{key}/{name}", name)


def _noted(ctx: Context, event: int | None, where: str, key: str) -> None:
    ctx.reasoning_keys.add(key)
    if key == "reasoning":
        ctx.warn(
            "reasoning-field-name",
            "reasoning text under 'reasoning'; clients read 'reasoning_content' (DeepSeek, llama.cpp,"
            " SGLang), so a client that reads only one of the two names loses it",
            event=event,
            pointer=where,
            quirk="Q39",
        )


def reasoning_shown(ctx: Context) -> None:
    """The ``reasoning`` intent: a served request to a reasoning model showed its reasoning."""
    if ctx.status != 200 or ctx.reasoning_keys:
        return
    ctx.warn(
        "reasoning-not-shown",
        "no reasoning under 'reasoning_content' (or 'reasoning'): the model does not reason, or the server"
        " drops or leaves its thinking in 'content'",
        quirk="Q39",
    )
