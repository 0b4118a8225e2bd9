"""``check --record`` and ``validate`` of the recording give the same findings, rule for rule.

Against llama-cpp-python's recording replayed (no llama.cpp needed), its real server and the bundled
backend (``backend``): ``validate`` reads the request and the probe's intent from each sidecar and judges
with the same judge ``check`` used.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.live.probes import PROBES
from tests.live.agreement import check_then_validate, disagreements
from tests.live.conftest import OVERFLOW_WORDS


def test_replayed_llama_cpp_python(
    replayed_llama_cpp_python: str, recorded_model: str, tmp_path: Path
) -> None:
    extra = ("--model", recorded_model, "--overflow-words", OVERFLOW_WORDS)
    checked, validated = check_then_validate(replayed_llama_cpp_python, tmp_path, *extra)
    assert disagreements(checked, validated) == []
    # The recording holds deviations of every kind the request and the intents decide, so agreement
    # is not that of two empty reports.
    assert ("invalid-request-accepted", "errors", ("spec",)) in validated["missing-prompt"]
    assert ("invalid-request-status", "errors", ("Q43",)) in validated["malformed-json"]
    assert ("feature-server-error", "errors", ("Q73",)) in validated["prompt-array"]
    assert ("stream-empty", "errors", ("Q52",)) in validated["context-overflow-stream"]
    # and the judge's leak and meaning rules, which check used to leave to the probes alone.
    assert ("error-leaks-traceback", "errors", ("spec",)) in validated["invalid-type"]
    assert ("error-message-empty", "errors", ("spec",)) in validated["prompt-array"]
    assert ("max-tokens-zero-generated", "errors", ("spec",)) in validated["max-tokens-zero-echo"]
    assert validated["disconnect-hangup"].keys() <= {("model-is-local-path", "warnings", ("Q09",))}


@pytest.mark.backend
def test_llama_cpp_python_server(llama_cpp_python_url: str, tmp_path: Path) -> None:
    checked, validated = check_then_validate(
        llama_cpp_python_url, tmp_path, "--overflow-words", OVERFLOW_WORDS
    )
    assert disagreements(checked, validated) == []
    assert ("invalid-request-accepted", "errors", ("spec",)) in validated["missing-prompt"]


@pytest.mark.backend
def test_bundled_backend(backend_url: str, tmp_path: Path) -> None:
    checked, validated = check_then_validate(backend_url, tmp_path)
    assert disagreements(checked, validated) == []
    assert len(checked) == len(PROBES)
