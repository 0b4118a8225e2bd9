"""Which repairs one response needed, counted by quirk id (for the access log and /metrics)."""

from __future__ import annotations

from collections import Counter

__all__ = ["TOOL_TEXT_UNPARSED", "Repairs"]

TOOL_TEXT_UNPARSED = "tool-text-unparsed"
"""Not a repair but its refusal, counted beside them: markup that opened tool calls in the text did not
parse as calls of the offered functions, and went out as the text it was (tool_text)."""


class Repairs(Counter[str]):
    """``repairs["Q14"]`` is how many times the Q14 repair was applied to this response."""

    def add(self, quirk: str) -> None:
        self[quirk] += 1

    def summary(self) -> str:
        return ",".join(f"{rule}x{count}" if count > 1 else rule for rule, count in sorted(self.items()))
