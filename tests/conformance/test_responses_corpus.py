"""The Responses transcripts in tests/data/transcripts/responses, judged whole: OpenAI's (a body its SDK's
tests recorded from the live API, and streams built from its API reference) pass with no finding;
llama-server's own ``/v1/responses`` (reconstructed from its source, with what clients.md recorded of it)
is flagged for exactly what it got wrong. Each transcript's ``.source.txt`` says where it comes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.judge import judge_transcript
from conformance.transcript import load_transcript

DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts" / "responses"

CASES = {
    "openai-output-text-body.json": (set(), set()),
    "openai-text-stream.sse": (set(), set()),
    "openai-function-call-stream.sse": (set(), set()),
    "openai-incomplete-stream.sse": (set(), set()),
    # No sequence_number, output_index or content_index, and a Response without most required keys
    # (required-key); the model named by its file (model-is-local-path); "completed" when max_output_tokens
    # 16 cut the answer at 16 tokens (responses-limit-completed).
    "llama-server-native-stream.sse": (
        {"required-key", "responses-limit-completed"},
        {"model-is-local-path"},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_transcript(name: str) -> None:
    verdict = judge_transcript(load_transcript(DATA / name))
    errors, warnings = CASES[name]
    assert verdict.endpoint == "responses"
    assert ({f.rule for f in verdict.errors}, {f.rule for f in verdict.warnings}) == (errors, warnings)


def test_llama_server_lacks_the_indices_openai_sends() -> None:
    verdict = judge_transcript(load_transcript(DATA / "llama-server-native-stream.sse"))
    missing = next(f for f in verdict.errors if f.rule == "required-key")
    places = {missing.pointer, *missing.pointers}
    assert {"/sequence_number", "/output_index", "/content_index"} <= places


def test_every_transcript_is_listed_with_its_source() -> None:
    bodies = {p.name for p in DATA.iterdir() if p.suffix == ".sse"} | {
        p.name for p in DATA.glob("*.json") if not (DATA / f"{p.stem}.sse").exists()
    }
    assert bodies == set(CASES)
    assert all((DATA / f"{Path(name).stem}.source.txt").exists() for name in CASES)
