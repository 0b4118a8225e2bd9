"""What a rule reports: one :class:`Finding` per rule per response, with where it first happened, how
many times it happened, and why it matters.

A deviation a server repeats on every chunk is one finding with a count, not one per chunk: a server
whose 9 chunks each lack a key must not outrank, by sheer number of lines, one that answers valid
requests with 500 (issue 17: counted per occurrence, the worst of three real servers ranked cleanest).
Strictly one per rule: a rule that cites two quirks in one response (``usage-in-choice-chunk``, Q26 on
the finish chunk then Q27 on a second one; ``unknown-field``, Q35 ``timings`` and Q39
``reasoning_content``) is one finding that lists both in :attr:`Finding.quirks`, where it used to be
two findings of one rule in one report cell.
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
    quirks: tuple[str, ...] = ()
    """Every distinct quirk id the rule cited in this response, the first occurrence's first, when later
    occurrences cited others; empty when ``quirk`` is the only one (see :attr:`cited`)."""

    @property
    def cited(self) -> tuple[str, ...]:
        """Every distinct quirk id cited, first first: :attr:`quirks`, or ``quirk`` alone."""
        if self.quirks:
            return self.quirks
        return (self.quirk,) if self.quirk else ()

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
            "quirks": list(self.cited),
        }


class FindingSink:
    """Collects one response's findings: the first occurrence of each rule, counted, with the other
    pointers and quirk ids it fired with. Memory is one finding per rule whatever the stream's length
    (at most :data:`MAX_POINTERS` pointers, and quirk ids from a fixed catalogue), so a systematic
    deviation in a 1 GB stream costs nothing more than one in a short one.
    """

    def __init__(self) -> None:
        self._first: dict[str, Finding] = {}
        self._counts: dict[str, int] = {}
        self._pointers: dict[str, dict[str, None]] = {}
        self._quirks: dict[str, dict[str, None]] = {}
        self._escalated: set[str] = set()

    def add(self, finding: Finding) -> None:
        rule = finding.rule
        first = self._first.get(rule)
        if first is None:
            self._first[rule] = finding
            self._counts[rule] = finding.count
            return
        self._counts[rule] += finding.count
        pointer = finding.pointer
        if pointer is not None and pointer != first.pointer:
            others = self._pointers.setdefault(rule, {})
            if len(others) < MAX_POINTERS:
                others[pointer] = None
        quirk = finding.quirk
        if quirk is not None and quirk != first.quirk:
            self._quirks.setdefault(rule, {})[quirk] = None
        if finding.severity == ERROR and first.severity != ERROR:
            # The first occurrence still leads (where the rule first fired), but an error never hides
            # behind an earlier warning of the same rule: the verdict would pass a failing response.
            self._escalated.add(rule)

    def fired(self, rule: str) -> bool:
        """Whether ``rule`` has been reported in this response (so a less specific rule on the same fact
        can stay quiet)."""
        return rule in self._first

    def close(self) -> list[Finding]:
        """The findings in the order their rules first fired, each carrying its count, the other
        pointers and every quirk id cited, with the worst severity any occurrence had."""
        out = []
        for rule, f in self._first.items():
            count, others = self._counts[rule], tuple(self._pointers.get(rule, ()))
            later = self._quirks.get(rule)
            escalated = rule in self._escalated
            if count == f.count and not others and not later and not escalated:
                out.append(f)
                continue
            cited = tuple(dict.fromkeys((*f.cited, *later))) if later else f.quirks
            severity = ERROR if escalated else f.severity
            out.append(replace(f, severity=severity, count=count, pointers=others, quirks=cited))
        return out
