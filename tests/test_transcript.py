"""Transcript loading: pairs of files, names with dots, bare bodies, scrubbing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.transcript import TranscriptError, discover, load_transcript, save_transcript

REPORTS = Path(__file__).parent / "data" / "transcripts" / "reports"


def test_name_with_inner_dot_finds_its_body() -> None:
    t = load_transcript(REPORTS / "llamacpp-14566.reconstructed.sse")
    assert t.body_path == REPORTS / "llamacpp-14566.reconstructed.sse"
    assert b"error:" in t.read_body()


def test_either_file_names_the_pair_once(tmp_path: Path) -> None:
    save_transcript(
        tmp_path / "a.b",
        b"data: [DONE]\n\n",
        request={"method": "POST", "path": "/v1/completions", "body": {"stream": True}},
        status=200,
        headers={"Content-Type": "text/event-stream"},
        chunk_timing=[(0.01, 14)],
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.b.json", "a.b.sse"]
    found = discover([tmp_path / "a.b.sse", tmp_path / "a.b.json", tmp_path])
    assert len(found) == 1
    assert found[0].request == {"method": "POST", "path": "/v1/completions", "body": {"stream": True}}
    assert found[0].stream is True
    assert found[0].chunk_timing == [(0.01, 14)]


def test_recording_scrubs_credentials(tmp_path: Path) -> None:
    save_transcript(
        tmp_path / "x",
        b"{}",
        request={
            "method": "POST",
            "path": "/v1/chat/completions",
            "headers": {"Authorization": "Bearer sk-1"},
        },
        status=200,
        headers={"Set-Cookie": "s=1", "content-type": "application/json"},
    )
    text = (tmp_path / "x.json").read_text()
    assert "sk-1" not in text
    assert "s=1" not in text
    assert json.loads(text)["response"]["headers"] == {"content-type": "application/json"}


def test_bare_json_body_is_a_non_streaming_response(tmp_path: Path) -> None:
    (tmp_path / "body.json").write_text('{"id": "cmpl-1", "object": "text_completion"}')
    t = load_transcript(tmp_path / "body.json")
    assert t.stream is False
    assert t.read_body().startswith(b"{")


def test_binary_junk_is_refused(tmp_path: Path) -> None:
    (tmp_path / "junk.sse").write_bytes(b"\x00\x01\x02garbage")
    with pytest.raises(TranscriptError, match="binary"):
        load_transcript(tmp_path / "junk.sse")
