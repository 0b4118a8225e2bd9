"""COMPATIBILITY.md opens with what ranks the servers, then each probe's verdict (issue 17).

Fed by the JSON report of real recordings: ``check --record`` against llama-cpp-python's own server,
shipped in conformance/corpus/llama-cpp-python and judged again here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from conformance.commands.validate import validate_paths
from conformance.report import json_report

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "conformance" / "corpus" / "llama-cpp-python"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compat_matrix", ROOT / "scripts" / "compat_matrix.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_page_gives_per_server_counts_then_each_probe_verdict() -> None:
    matrix = _script()
    report = json_report(validate_paths([str(RECORDED)]))
    for result in report["results"]:  # check names a result by its probe, the recording by its file
        result["source"] = Path(result["source"]).stem.removeprefix("llama-cpp-python-")
    summary = report["summary"]
    assert summary["responses"] == len(report["results"]) > 20
    assert 0 < summary["responses_with_errors"] <= summary["responses"]
    page = matrix.render(
        {
            "llama-cpp-python server": matrix.column(report, "# conformant report\n\ndetail"),
            "absent": matrix.Column(),
        },
        with_llama_server=False,
    )
    servers = page.index("## Servers")
    probes = page.index("## Probes")
    assert servers < probes
    row = (
        f"| llama-cpp-python server | {summary['responses']} | {summary['responses_with_errors']} |"
        f" {summary['distinct_rules']} | "
    )
    assert row in page[servers:probes]
    assert "| absent | not run |" in page[servers:probes]
    assert all(f"`{rule}`" in page[servers:probes] for rule in summary["rules"])
    chat_row = next(line for line in page[probes:].splitlines() if line.startswith("| `chat`:"))
    assert chat_row.endswith("| not run |")
    assert "**fail**" in chat_row
    assert "not on PATH" not in page
    assert "`--llama-server PATH`" in page
