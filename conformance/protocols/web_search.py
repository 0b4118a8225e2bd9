"""The chat function a translated protocol offers in place of a hosted web search tool (the Responses
API's ``web_search``, the Messages API's ``web_search_*``): agents send that tool by default (Codex CLI
since 2026-01, Claude Code's ``WebSearch`` is its own custom tool), so a refusal would fail every turn.
The model may call it, and the call comes back to the client, which runs it or answers it as
unsupported."""

from __future__ import annotations

from typing import Any

__all__ = ["WEB_SEARCH_TOOL", "offer_web_search"]

_FUNCTION: dict[str, Any] = {
    "name": "web_search",
    "description": "Search the web. Returns the results as text.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "what to search for"}},
        "required": ["query"],
        "additionalProperties": False,
    },
}
WEB_SEARCH_TOOL: dict[str, Any] = {"type": "function", "function": _FUNCTION}
"""The chat tool: a function ``web_search`` with one text argument ``query``."""


def offer_web_search(tools: list[dict[str, Any]]) -> None:
    """Add :data:`WEB_SEARCH_TOOL` to chat ``tools`` once, however many web search tools were sent."""
    if not any(tool["function"]["name"] == "web_search" for tool in tools):
        tools.append(WEB_SEARCH_TOOL)
