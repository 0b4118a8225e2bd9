"""A real llama-server whose model writes its calls in a syntax the server does not parse (issue 34,
acceptance 4): the model is a scripted synthetic GGUF (backend/synthetic.py) that answers every prompt
with a Kimi K2 call, served with a Hermes/Qwen chat template, so llama-server reads the answer with its
Hermes parser and its lazy grammar (which starts at ``<tool_call>``) never starts: the call reaches the
client as text, as with a model ahead of the server's parsers or a GGUF with another family's template.
``conformant check`` against the server reports the leak (``tool-call-in-content``); through the proxy,
the same probes get the call and no error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.check_report import check_results, errors_by_probe
from tests.support.llama_server import llama_server_on

from .conftest import run_proxy

pytestmark = [pytest.mark.backend, pytest.mark.llama_server]

KIMI_CALL = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
    '{"city": "Paris", "unit": "celsius"}<|tool_call_end|><|tool_calls_section_end|>'
)
PROBES = ("tools", "tools-stream", "responses-tool-call")


@pytest.fixture(scope="module")
def leaking_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from backend.synthetic import HERMES_TOOLS_TEMPLATE, SyntheticSpec, write_synthetic  # (needs numpy)

    spec = SyntheticSpec(reply=KIMI_CALL, chat_template=HERMES_TOOLS_TEMPLATE, n_ctx_train=4096)
    model = write_synthetic(tmp_path_factory.mktemp("models") / "kimi-caller.gguf", spec)
    with llama_server_on(str(model), "--jinja") as url:
        yield url


def test_check_reports_the_call_the_server_left_as_text(leaking_server: str, tmp_path: Path) -> None:
    errors = errors_by_probe(check_results(leaking_server, tmp_path, "--only", *PROBES))
    for probe in ("tools", "tools-stream"):
        assert any(e.startswith("tool-call-in-content:") for e in errors.get(probe, [])), errors


def test_through_the_proxy_the_same_probes_get_the_call(leaking_server: str, tmp_path: Path) -> None:
    with run_proxy(leaking_server) as proxy:
        results = check_results(proxy, tmp_path, "--only", *PROBES)
    assert errors_by_probe(results) == {}
    assert {r["source"] for r in results} >= set(PROBES)
