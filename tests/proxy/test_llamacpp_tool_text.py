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


def _kimi_call(arguments: str) -> str:
    return (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        f"{arguments}<|tool_call_end|><|tool_calls_section_end|>"
    )


# The chat probes' get_weather takes a city and a unit; the Responses probe's, a city alone.
CASES = {
    "chat": (_kimi_call('{"city": "Paris", "unit": "celsius"}'), ("tools", "tools-stream")),
    "responses": (_kimi_call('{"city": "Paris"}'), ("responses-tool-call",)),
}


@pytest.fixture(scope="module", params=list(CASES))
def leaking_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, tuple[str, ...]]]:
    from backend.synthetic import HERMES_TOOLS_TEMPLATE, SyntheticSpec, write_synthetic  # (needs numpy)

    reply, probes = CASES[request.param]
    spec = SyntheticSpec(reply=reply, chat_template=HERMES_TOOLS_TEMPLATE, n_ctx_train=4096)
    model = write_synthetic(tmp_path_factory.mktemp("models") / f"kimi-caller-{request.param}.gguf", spec)
    with llama_server_on(str(model), "--jinja") as url:
        yield url, probes


def test_check_reports_the_call_the_server_left_as_text(
    leaking_server: tuple[str, tuple[str, ...]], tmp_path: Path
) -> None:
    url, probes = leaking_server
    errors = errors_by_probe(check_results(url, tmp_path, "--only", *probes))
    for probe in probes:
        # Chat: the markup in the content. Responses (llama-server's own /v1/responses): the named
        # function never called, its call being text in the output.
        leak = "tool-choice-named-ignored:" if probe.startswith("responses") else "tool-call-in-content:"
        assert any(e.startswith(leak) for e in errors.get(probe, [])), errors


def test_through_the_proxy_the_same_probes_get_the_call(
    leaking_server: tuple[str, tuple[str, ...]], tmp_path: Path
) -> None:
    url, probes = leaking_server
    with run_proxy(url) as proxy:
        results = check_results(proxy, tmp_path, "--only", *probes)
    assert errors_by_probe(results) == {}
    assert {r["source"] for r in results} >= set(probes)
