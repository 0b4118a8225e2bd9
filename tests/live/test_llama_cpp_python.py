"""`conformant check` against llama-cpp-python's real server: its known deviations, each with a rule id."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cli import main
from conformance.live.probes import PROBES
from tests.live.conftest import OVERFLOW_WORDS
from tests.live.expected import missing_deviations

pytestmark = pytest.mark.backend


def test_known_deviations_found(llama_cpp_python_url: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    args = ["check", llama_cpp_python_url, "--overflow-words", OVERFLOW_WORDS, "--format", "json"]
    assert main([*args, "-o", str(report), "--record", str(tmp_path / "rec")]) == 1
    assert missing_deviations(report) == []
    # Every exchange was kept as a transcript, the hang-up of the disconnect probe beside its second request.
    assert len(list((tmp_path / "rec").glob("*.sse"))) == len(PROBES) + sum(1 for p in PROBES if p.then)


def test_keeps_serving_after_a_client_hangs_up(llama_cpp_python_url: str) -> None:
    assert main(["check", llama_cpp_python_url, "--only", "disconnect", "--allow", "Q09"]) == 0
