"""``check --record DIR`` and a later ``validate DIR`` must agree: the same findings, rule for rule.

Both commands are run as a user runs them (``conformance.cli.main`` with a JSON report); the findings of
each probe are compared as multisets of (rule, severity, quirks cited).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from conformance.cli import main

__all__ = ["Disagreement", "by_source", "check_then_validate", "disagreements", "totals"]

Findings = Counter[tuple[str, str, tuple[str, ...]]]
Disagreement = tuple[str, Findings, Findings]
"""(probe, findings only ``check`` made, findings only ``validate`` made)."""

HANG_UP_RECORDING = "disconnect-hangup"
"""The disconnect probe's first exchange, the one the client hangs up on: no probe's name of its own,
judged by both commands (and no answer in either's harm)."""


def by_source(report: Path) -> dict[str, Findings]:
    results = json.loads(report.read_text())["results"]
    out: dict[str, Findings] = {}
    for result in results:
        name = Path(result["source"]).name.removesuffix(".sse").removesuffix(".json")
        found = out.setdefault(name, Counter())
        for severity in ("errors", "warnings"):
            found.update((f["rule"], severity, tuple(f["quirks"])) for f in result[severity])
    return out


def check_then_validate(
    url: str, folder: Path, *extra: str
) -> tuple[dict[str, Findings], dict[str, Findings]]:
    """Findings by probe of ``check --record`` against ``url``, then of ``validate`` of the recording."""
    record, checked, validated = folder / "recorded", folder / "check.json", folder / "validate.json"
    main(["check", url, "--record", str(record), "--format", "json", "-o", str(checked), *extra])
    main(["validate", str(record), "--format", "json", "-o", str(validated)])
    return by_source(checked), by_source(validated)


def disagreements(checked: dict[str, Findings], validated: dict[str, Findings]) -> list[Disagreement]:
    """Each probe whose findings differ, with what each command found that the other did not."""
    if set(validated) != set(checked):
        raise AssertionError(f"check reported {sorted(checked)}, validate judged {sorted(validated)}")
    out: list[Disagreement] = []
    for probe, found in checked.items():
        other = validated[probe]
        if found != other:
            out.append((probe, found - other, other - found))
    return out


def totals(folder: Path) -> tuple[dict[str, object], dict[str, object]]:
    """The summaries of the reports ``check_then_validate`` wrote in ``folder``: check's, validate's."""
    return tuple(  # type: ignore[return-value]
        json.loads((folder / name).read_text())["summary"] for name in ("check.json", "validate.json")
    )
