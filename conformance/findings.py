"""What a rule reports: one :class:`Finding` per rule per response, with where it first happened, how
many times it happened, and why it matters.

A deviation a server repeats on every chunk is one finding with a count, not one per chunk: a server
whose 9 chunks each lack a key must not outrank, by sheer number of lines, one that answers valid
requests with 500 (issue 17: counted per occurrence, the worst of three real servers ranked cleanest).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

__all__ = ["ERROR", "MAX_POINTERS", "WARNING", "Finding", "FindingSink", "Severity"]

Severity = Literal["error", "warning"]
ERROR: Severity = "error"
WARNING: Severity = "warning"
MAX_POINTERS = 20
"""Other places kept per finding; a key missing from every choice of n=1000 must not fill memory."""


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    """Stable rule id, e.g. ``finish-reason-once``."""
    severity: Severity
    message: str
    """What the first occurrence showed."""
    event: int | None = None
    """Index of the SSE block (streams) of the first occurrence; None for the whole response."""
    pointer: str | None = None
    """JSON pointer (RFC 6901) into that event's payload."""
    quirk: str | None = None
    """Quirk id from the catalogue (``Q14``) or ``spec`` for a plain OpenAI spec fact."""
    count: int = 1
    """Occurrences of the rule in the response (events, choices or keys it fired on)."""
    pointers: tuple[str, ...] = ()
    """Where else the rule fired, when that was not the first occurrence's pointer: the distinct
    pointers after it, at most :data:`MAX_POINTERS` (which keys were missing, not only the first)."""

    def to_json(self) -> dict[str, Any]:
        """The documented FINDING shape of the JSON report (docs/validate.md)."""
        return {
            "rule": self.rule,
            "message": self.message,
            "event": self.event,
            "pointer": self.pointer,
            "quirk": self.quirk,
            "count": self.count,
            "pointers": list(self.pointers),
        }


class FindingSink:
    """Collects one response's findings: the first occurrence of each rule (per quirk it cites), counted,
    with the other pointers it fired at. Memory is one finding per rule whatever the stream's length, so
    a systematic deviation in a 1 GB stream costs nothing more than one in a short one.
    """

    def __init__(self) -> None:
        self._first: dict[tuple[str, Severity, str | None], Finding] = {}
        self._counts: dict[tuple[str, Severity, str | None], int] = {}
        self._pointers: dict[tuple[str, Severity, str | None], dict[str, None]] = {}

    def add(self, finding: Finding) -> None:
        # Keyed by severity and quirk too: an error is never folded into a warning's count, and a
        # rule that cites two quirks (unknown-field: Q35 timings, Q39 reasoning_content) found two
        # different deviations.
        key = (finding.rule, finding.severity, finding.quirk)
        first = self._first.get(key)
        if first is None:
            self._first[key] = finding
            self._counts[key] = finding.count
            return
        self._counts[key] += finding.count
        pointer = finding.pointer
        if pointer is not None and pointer != first.pointer:
            others = self._pointers.setdefault(key, {})
            if len(others) < MAX_POINTERS:
                others[pointer] = None

    def close(self) -> list[Finding]:
        """The findings in the order their rules first fired, each carrying its count."""
        out = []
        for key, f in self._first.items():
            count, others = self._counts[key], tuple(self._pointers.get(key, ()))
            out.append(f if count == f.count and not others else replace(f, count=count, pointers=others))
        return out
