"""Recordings of real servers, judged: every finding the review expects, and none it calls false (issue 33).

Each folder of tests/data/batteries/ is one server's answers to ``conformant check``'s battery, recorded by
scripts/record_battery.py (the server, its build and its options in the review beside it,
``NAME.expected.json``). The
findings expected of each response were decided by reading the response against the spec and against
what the strict clients do (docs/validate.md, "Severity"), not by copying what the judge said; where the
review and the judge first disagreed, ``notes`` says why, and the judge was mended. So a rule that stops
firing, or starts firing where the review saw nothing wrong, fails here: the judge's precision and recall
on real servers is a test, not a review.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.commands.validate import validate_paths
from conformance.judge import Verdict
from conformance.report import by_server, ranked

BATTERIES = Path(__file__).resolve().parents[1] / "data" / "batteries"
FOLDERS = sorted(p for p in BATTERIES.iterdir() if p.is_dir())


def expected_of(folder: Path) -> dict[str, Any]:
    """The review of ``folder``: ``NAME.expected.json`` beside it (inside, it would be read as a
    transcript)."""
    doc: dict[str, Any] = json.loads(folder.with_name(f"{folder.name}.expected.json").read_text())
    return doc


def probe_of(v: Verdict) -> str:
    return Path(v.source).name.removesuffix(".sse").removesuffix(".json")


def found(verdicts: list[Verdict]) -> dict[str, dict[str, list[str]]]:
    """Each response's distinct rules by severity, as the review writes them."""
    return {
        probe_of(v): {
            "errors": sorted({f.rule for f in v.errors}),
            "warnings": sorted({f.rule for f in v.warnings}),
        }
        for v in verdicts
    }


def test_every_battery_was_reviewed() -> None:
    assert {p.name for p in FOLDERS} >= {
        "ik_llama.cpp-540a265",
        "llama-cpp-python",
        "llama-server-b11434",
        "llama-server-b11434-no-jinja",
    }
    for folder in FOLDERS:
        assert not expected_of(folder)["reviewed"].startswith("DRAFT"), folder.name


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_the_judge_finds_what_the_review_expects(folder: Path) -> None:
    expected = expected_of(folder)
    verdicts = validate_paths([str(folder)])
    assert {v.server for v in verdicts} == {expected["server"]}
    got = found(verdicts)
    want = {
        probe: {"errors": sorted(rules["errors"]), "warnings": sorted(rules["warnings"])}
        for probe, rules in expected["probes"].items()
    }
    assert got.keys() == want.keys()
    wrong = {probe: (got[probe], want[probe]) for probe in got if got[probe] != want[probe]}
    assert wrong == {}


def test_every_note_is_about_a_recorded_response() -> None:
    for folder in FOLDERS:
        expected = expected_of(folder)
        assert set(expected["notes"]) <= set(expected["probes"]), folder.name


SERVERS_WORST_FIRST = ("ik_llama.cpp", "llama-cpp-python server", "llama-server b11434")
"""What the review of the four batteries says of the servers, worst first: ik_llama.cpp before #768 cuts
18 answers at the limit and calls them whole, loses streamed text and truncates prompts silently;
llama-cpp-python's server answers valid requests with 500s carrying a traceback and a local path,
ignores ``n`` and sends an empty 200 on overflow; llama-server b11434 errs mostly in form (its Responses
answers lack keys, a forced tool choice is ignored on a model without a template)."""


def test_the_ranking_puts_the_servers_in_the_reviews_order() -> None:
    # Issue 33 acceptance 2: on every probe of the batteries, and on the probes all four answered.
    verdicts = validate_paths([str(f) for f in FOLDERS])
    order = [name for name, _ in ranked(verdicts)]
    assert [name for name in order if name in SERVERS_WORST_FIRST] == list(SERVERS_WORST_FIRST)
    per_server = {name: {probe_of(v) for v in group} for name, group in by_server(verdicts).items()}
    shared = set.intersection(*per_server.values())
    assert len(shared) >= 55
    same_probes = [v for v in verdicts if probe_of(v) in shared]
    order = [name for name, _ in ranked(same_probes)]
    assert [name for name in order if name in SERVERS_WORST_FIRST] == list(SERVERS_WORST_FIRST)
