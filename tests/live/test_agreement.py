"""``check --record`` and ``validate`` of the recording give the same findings, rule for rule.

Against llama-cpp-python's recording replayed (no llama.cpp needed), its real server and the bundled
backend (``backend``): ``validate`` reads the request and the probe's intent from each sidecar and judges
with the same judge ``check`` used.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cli import main
from conformance.live.probes import PROBES
from conformance.replay import create_replay_app
from conformance.transcript import discover
from tests.live.agreement import HANG_UP_RECORDING, by_source, check_then_validate, disagreements, totals
from tests.live.conftest import OVERFLOW_WORDS
from tests.support.servers import run_asgi


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
    assert sorted(set(checked) - {HANG_UP_RECORDING}) == sorted(p.name for p in PROBES)


BATTERIES = Path(__file__).resolve().parents[1] / "data" / "batteries"


@pytest.mark.parametrize("folder", sorted(p for p in BATTERIES.iterdir() if p.is_dir()), ids=lambda p: p.name)
def test_replayed_batteries(folder: Path, tmp_path: Path) -> None:
    # Issue 33: each reviewed battery (tests/conformance/test_batteries.py) replayed byte for byte;
    # check judging the replay and validate judging the recording agree, probe for probe, and with
    # validate of the battery itself (the bytes the review read).
    recorded = discover([str(folder)])
    probes = sorted({t.name.rsplit("/", 1)[-1] for t in recorded} - {HANG_UP_RECORDING})
    model = next(t.request_body["model"] for t in recorded if t.name.endswith("/chat"))
    extra = ("--model", model, "--overflow-words", OVERFLOW_WORDS, "--only", *probes)
    with run_asgi(create_replay_app(recorded, pace=None)) as url:
        checked, validated = check_then_validate(url, tmp_path, *extra)
    assert sorted(set(checked) - {HANG_UP_RECORDING}) == probes  # every probe replayed and judged
    assert disagreements(checked, validated) == []
    # The same summary, harm per answer included: the exchange hung up on is judged by both and is an
    # answer in neither (validate counted it as one: 1.31 against check's 1.34 on one recording).
    checked_totals, validated_totals = totals(tmp_path)
    assert checked_totals == validated_totals
    if HANG_UP_RECORDING in checked:
        assert checked_totals["answered"] < checked_totals["responses"]
    assert sum(len(found) for found in checked.values()) > 50  # deviations of every kind, not silence
    original = tmp_path / "original.json"
    main(["validate", str(folder), "--format", "json", "-o", str(original)])
    assert by_source(original) == validated
