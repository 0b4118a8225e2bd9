"""The pytest plugin in a separate pytest run: one test per probe with --conformant-url, nothing without."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from conformance.live.probes import PROBES


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_one_junit_testcase_per_probe(
    replayed_llama_cpp_python: str, recorded_model: str, tmp_path: Path
) -> None:
    junit = tmp_path / "junit.xml"
    run = _pytest(
        tmp_path,
        f"--conformant-url={replayed_llama_cpp_python}",
        f"--conformant-model={recorded_model}",
        "--conformant-overflow-words=3000",
        f"--junitxml={junit}",
    )
    assert run.returncode == 1, run.stdout[-2000:]
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert set(cases) == {f"conformant[{p.name}]" for p in PROBES}
    usage = cases["conformant[chat-stream-usage]"].find("failure")
    assert usage is not None
    assert "usage-missing [Q28]" in (usage.text or "")
    assert cases["conformant[context-overflow]"].find("failure") is None


def test_inert_without_url(tmp_path: Path) -> None:
    (tmp_path / "test_own.py").write_text("def test_own():\n    assert True\n")
    run = _pytest(tmp_path)
    assert run.returncode == 0, run.stdout[-2000:]
    assert "1 passed" in run.stdout
    assert "conformant[" not in run.stdout
