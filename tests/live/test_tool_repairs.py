"""``conformant check``'s tool and JSON probes through the proxy in front of llama-cpp-python's own server
(issue 20, acceptance 3): 0 errors, where the server alone ignores ``tool_choice: "required"`` (Q80),
answers a tool round trip with a 500 (Q81) and ``json_schema`` with a 500 (tests/live/expected.py).
Two calls in one turn (``required`` among two tools) it cannot be made to give: the proxy declines that
with a 400, which ``check`` reports as ``unsupported``. Gemma 3 270M is a base model: the calls are
valid because the grammar a named ``tool_choice`` gets makes them so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.live.probes import PROBES
from tests.proxy.conftest import run_proxy

pytestmark = pytest.mark.backend

TOOL_AND_JSON_PROBES = [
    p.name for p in PROBES if p.name.startswith(("tool", "parallel-tool", "json-", "responses-tool"))
] + ["responses-json-schema"]


@pytest.fixture(scope="module")
def proxy_url(llama_cpp_python_url: str) -> Iterator[str]:
    with run_proxy(llama_cpp_python_url) as url:
        yield url


def test_tool_and_json_probes_find_no_error_through_the_proxy(proxy_url: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    # A generous timeout: on a loaded CPU host the grammar-constrained answers take minutes.
    args = ["check", proxy_url, "--timeout", "300", "--format", "json", "-o", str(report)]
    status = main([*args, "--only", *TOOL_AND_JSON_PROBES])
    results = {r["source"]: r for r in json.loads(report.read_text())["results"]}
    assert {name: r["errors"] for name, r in results.items() if r["errors"]} == {}
    assert status == 0
    assert set(results) == set(TOOL_AND_JSON_PROBES)
    declined = {w["rule"] for w in results["parallel-tool-calls"]["warnings"]}
    assert declined == {"feature-unsupported"}
    # The base model's free text after a tool result may hold a chat template's control token, which
    # llama-cpp-python leaves in the content and the proxy does not strip yet: the judge's warning
    # (template-token-in-content, issue 33) is a true one, and the only other warning allowed.
    others = {w["rule"] for n, r in results.items() if n != "parallel-tool-calls" for w in r["warnings"]}
    assert others <= {"template-token-in-content"}, others
