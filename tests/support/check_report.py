"""``conformant check`` run in-process against a live server, its report's errors by probe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.cli import main


def check_results(url: str, folder: Path, *extra: str) -> list[dict[str, Any]]:
    """The report's results (one per response judged) of ``check`` against ``url``, with ``extra``
    arguments; the report and the recorded transcripts go to ``folder``."""
    report = folder / "report.json"
    main(["check", url, "--format", "json", "-o", str(report), "--record", str(folder / "rec"), *extra])
    results: list[dict[str, Any]] = json.loads(report.read_text())["results"]
    return results


def errors_by_probe(results: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each response's errors as ``rule: message``, by its source (the probe), for those with any."""
    return {
        r["source"]: [f"{e['rule']}: {e['message']}" for e in r["errors"]] for r in results if r["errors"]
    }
