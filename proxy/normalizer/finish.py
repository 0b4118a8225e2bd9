"""``finish_reason`` values mapped to OpenAI's enum (quirks section B), and the stop sequence an upstream
says it stopped at, for a protocol that names it (a Message's ``stop_sequence``)."""

from __future__ import annotations

from typing import Any

from conformance.request import Endpoint

__all__ = ["FAILURE_REASONS", "map_finish_reason", "named_stop", "stopping_word"]

# value -> (OpenAI value, quirk that sends it)
_MAP: dict[str, tuple[str, str]] = {
    "eos": ("stop", "Q18"),
    "eos_token": ("stop", "Q18"),
    "stop_sequence": ("stop", "Q18"),
    "stop_string": ("stop", "Q18"),
    "end_turn": ("stop", "Q19"),
    "generated": ("stop", "Q19"),
    "max_tokens": ("length", "Q18"),
    "limit": ("length", "Q18"),
    "model_length": ("length", "Q18"),
}
# Failures disguised as a finish (Q20 abort, Q21 error, Q24 resource): an error event, never a success.
FAILURE_REASONS = frozenset({"abort", "error", "insufficient_system_resource", "cancelled", "canceled"})
_CHAT = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
_LEGACY = frozenset({"stop", "length", "content_filter"})
_NULLS = frozenset({"", "null", "none"})


def map_finish_reason(value: Any, endpoint: Endpoint) -> tuple[str | None, str | None]:
    """(OpenAI value or None, quirk id when a repair was needed). Failure values come back as-is."""
    if value is None:
        return None, None
    if not isinstance(value, str):
        return "stop", "Q21"
    lowered = value.strip().lower()
    if lowered in _NULLS:
        return None, "Q15" if value == "" else "Q21"
    allowed = _CHAT if endpoint == "chat" else _LEGACY
    if lowered in allowed:
        return lowered, None if lowered == value else "Q19"
    if lowered in FAILURE_REASONS:
        return lowered, "Q20" if lowered == "abort" else "Q21" if lowered == "error" else "Q24"
    if endpoint == "completions" and lowered in ("tool_calls", "function_call"):
        return "stop", "Q19"
    mapped = _MAP.get(lowered)
    if mapped:
        return mapped
    return "stop", "Q19"


def named_stop(choice: dict[str, Any], stops: tuple[str, ...]) -> str | None:
    """The stop sequence a finished choice says it met, where it is one of ``stops``: vLLM's
    ``stop_reason`` (Q37; a token id there is the end-of-turn token, no sequence) or SGLang's
    ``matched_stop`` (Q38)."""
    for key in ("stop_reason", "matched_stop"):
        value = choice.get(key)
        if isinstance(value, str) and value in stops:
            return value
    return None


def stopping_word(payload: dict[str, Any], stops: tuple[str, ...]) -> str | None:
    """The stop sequence llama-server met, from the ``__verbose`` object it adds to its last chunk (or
    its whole body) when asked (adapters/llamacpp.py): ``stop_type`` ``"word"`` and ``stopping_word``."""
    verbose = payload.get("__verbose")
    if not isinstance(verbose, dict) or verbose.get("stop_type") != "word":
        return None
    word = verbose.get("stopping_word")
    return word if isinstance(word, str) and word in stops else None
