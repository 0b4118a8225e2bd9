"""What a rule reports: one :class:`Finding` per deviation, with where it happened and why it matters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ERROR", "WARNING", "Finding", "Severity"]

Severity = Literal["error", "warning"]
ERROR: Severity = "error"
WARNING: Severity = "warning"


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    """Stable rule id, e.g. ``finish-reason-once``."""
    severity: Severity
    message: str
    event: int | None = None
    """Index of the SSE block (streams) the finding is about; None for the whole response."""
    pointer: str | None = None
    """JSON pointer (RFC 6901) into that event's payload."""
    quirk: str | None = None
    """Quirk id from the catalogue (``Q14``) or ``spec`` for a plain OpenAI spec fact."""

    def to_json(self) -> dict[str, Any]:
        """The documented FINDING shape of the JSON report."""
        return {
            "rule": self.rule,
            "message": self.message,
            "event": self.event,
            "pointer": self.pointer,
            "quirk": self.quirk,
        }
