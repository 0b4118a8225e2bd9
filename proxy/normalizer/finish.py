"""``finish_reason`` values mapped to OpenAI's enum (quirks section B)."""

from __future__ import annotations

from typing import Any

from conformance.request import Endpoint

__all__ = ["FAILURE_REASONS", "map_finish_reason"]

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
