"""COMPATIBILITY.md opens with what ranks the servers, then each probe's verdict (issue 17).

Fed by the JSON report of real recordings: ``check --record`` against llama-cpp-python's own server,
shipped in conformance/corpus/llama-cpp-python and judged again here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

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
        [],
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
    # Its chat answer leaves refusal out and names the model by its file: warnings, which no client
    # fails on (docs/validate.md, severity policy); other probes fail.
    assert "warn: " in chat_row
    assert "**fail**" in page[probes:]
    assert "not on PATH" not in page
    assert "`--llama-server PATH`" in page


def test_llama_server_is_repeatable_and_a_bare_path_keeps_its_old_name(tmp_path: Path) -> None:
    matrix = _script()
    args = matrix.parse(
        [
            "--llama-server",
            "/opt/llama.cpp/llama-server",
            "--llama-server",
            "ik_llama.cpp@540a26514=/ik/llama-server",
        ]
    )
    assert args.servers == [
        matrix.LlamaServer("llama-server", "/opt/llama.cpp/llama-server"),
        matrix.LlamaServer("ik_llama.cpp", "/ik/llama-server", "540a26514"),
    ]
    assert matrix.parse(["--llama-server", "mine=/bin/server"]).servers == [
        matrix.LlamaServer("mine", "/bin/server")
    ]
    # An "=" inside a folder name is part of the path, not a name.
    assert matrix.parse(["--llama-server", "/builds/a=b/llama-server"]).servers == [
        matrix.LlamaServer("llama-server", "/builds/a=b/llama-server")
    ]
    with pytest.raises(SystemExit):
        matrix.parse(["--llama-server", "=/bin/server"])


def _ik_column(matrix: ModuleType, logprobs: str) -> object:
    cells = {"chat": "pass", "chat-logprobs": logprobs, "chat-logprobs-no-top": "pass"}
    summary = {
        "responses": 28,
        "responses_with_errors": 1,
        "distinct_rules": 1,
        "rules": {"logprobs-missing": 1},
    }
    return matrix.Column(summary, cells, "")


def test_the_page_names_the_commit_built_and_says_why_remaining_errors_remain() -> None:
    matrix = _script()
    ik = matrix.LlamaServer("ik_llama.cpp", "/work/ik/build/bin/llama-server", "540a26514")
    direct = matrix.Column({"responses": 27, "responses_with_errors": 27, "distinct_rules": 9, "rules": {}})
    direct.skipped = {"max-completion-tokens": "it generates for ever"}
    failed = "**fail**: logprobs-missing (Q69)"
    page = matrix.render(
        {"ik_llama.cpp": direct, "conformant serve → ik_llama.cpp": _ik_column(matrix, failed)}, [ik]
    )
    assert "commit `540a26514`" in page
    assert "/work/ik" not in page  # the commit says which build; a local path says nothing to a reader
    servers, probes = page.index("## Servers"), page.index("## Probes")
    why = matrix.WHY[("conformant serve → ik_llama.cpp", "chat-logprobs")]
    assert f"| conformant serve → ik_llama.cpp | `chat-logprobs` | {why} |" in page[servers:probes]
    assert "`chat-logprobs-no-top`" not in page[servers:probes]  # it passed: nothing to explain
    assert "| ik_llama.cpp | `max-completion-tokens` | it generates for ever |" in page[servers:probes]
    mct_row = next(
        line for line in page[probes:].splitlines() if line.startswith("| `max-completion-tokens`:")
    )
    assert mct_row.endswith("| skipped | not run |")


def test_a_passing_row_gets_no_why() -> None:
    matrix = _script()
    ik = matrix.LlamaServer("ik_llama.cpp", "/ik/llama-server", "540a26514")
    page = matrix.render({"conformant serve → ik_llama.cpp": _ik_column(matrix, "pass")}, [ik])
    assert "| server | probe | why |" not in page
    assert "its chat answers never fill logprobs" not in page


def test_the_direct_ik_llama_row_skips_the_probes_that_hold_its_slot() -> None:
    matrix = _script()
    skipped = {probe for (server, probe) in matrix.SKIPS if server == "ik_llama.cpp"}
    assert skipped == {"max-completion-tokens", "invalid-type"}
    assert all(probe in {p.name for p in matrix.PROBES} for _, probe in [*matrix.SKIPS, *matrix.WHY])


def test_a_cell_names_every_quirk_of_a_finding_once() -> None:
    matrix = _script()
    usage = {"rule": "usage-in-choice-chunk", "quirk": "Q26", "quirks": ["Q26", "Q27"]}
    older = {"rule": "model-is-local-path", "quirk": "Q09"}  # a report written before `quirks`
    unsupported = {"rule": "feature-unsupported", "quirk": None, "quirks": []}
    assert matrix.cell({"errors": [usage, older], "warnings": []}) == (
        "**fail**: usage-in-choice-chunk (Q26, Q27), model-is-local-path (Q09)"
    )
    assert matrix.cell({"errors": [dict(unsupported, rule="no-response")], "warnings": []}) == (
        "**fail**: no-response"
    )


def test_a_probe_no_row_can_answer_is_skipped_everywhere_and_explained_once() -> None:
    matrix = _script()
    every_row = {"reasoning", "messages-thinking"}
    assert set(matrix.SKIP_ALL) == every_row
    assert set(matrix.skips_for("ik_llama.cpp")) == {"max-completion-tokens", "invalid-type"} | every_row
    assert set(matrix.skips_for("conformant backend")) == every_row
    rows = {}
    for name in ("llama-cpp-python server", "conformant backend"):
        rows[name] = matrix.Column(
            {"responses": 1, "responses_with_errors": 0, "distinct_rules": 0, "rules": {}}
        )
        rows[name].skipped = matrix.skips_for(name)
    page = matrix.render(rows, [], ["ik_llama.cpp=not built this time"])
    assert page.count("`reasoning` |") == 1
    assert f"| every server | `reasoning` | {matrix.SKIP_ALL['reasoning']} |" in page
    assert "`ik_llama.cpp` is not in this run: not built this time" in page
    reasoning_row = next(line for line in page.splitlines() if line.startswith("| `reasoning`:"))
    assert reasoning_row.endswith("| skipped | skipped |")
