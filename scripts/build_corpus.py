"""Copy bug-report transcripts into the shipped corpus (conformance/corpus/), each with a sidecar.

The reports are bare ``.sse`` quotes; the sidecar makes them replayable: a request (endpoint from the
chunks' ``object``, ``model`` = the transcript name so it is unique, ``stream: true``), status 200,
``text/event-stream``, a synthetic per-event timing (the reports carry none), and ``"excerpt": true``:
a report quotes a few events, not the whole stream, so where the quote stops says nothing about the
server (its ``.source.txt`` says which events were quoted). Only a transcript rebuilt from the server's
code (its note begins ``RECONSTRUCTED``) is whole.
Usage: python scripts/build_corpus.py [SOURCE_DIR]   (default tests/data/transcripts/reports)

Recordings made with ``conformant check --record DIR`` already have sidecars; they are copied under a
sub-folder, each name prefixed so it stays unique in the corpus:
       python scripts/build_corpus.py --recorded DIR PREFIX
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from conformance.sse import parse_sse
from conformance.transcript import load_transcript, save_transcript

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "conformance" / "corpus"
FIRST_EVENT_S = 0.05
BETWEEN_EVENTS_S = 0.02


def request_for(stem: str, body: bytes) -> dict[str, object]:
    chat = b'"text_completion"' not in body
    payload: dict[str, object] = {"model": stem, "stream": True}
    if chat:
        payload["messages"] = [{"role": "user", "content": "Hello"}]
        return {"method": "POST", "path": "/v1/chat/completions", "body": payload}
    payload["prompt"] = "Hello"
    return {"method": "POST", "path": "/v1/completions", "body": payload}


def synthetic_timing(body: bytes) -> list[tuple[float, int]]:
    """One read per SSE event, the way a server flushes them, evenly spaced."""
    ends = [*[block.offset for block in parse_sse([body])][1:], len(body)]
    starts = [0, *ends[:-1]]
    sizes = [end - start for start, end in zip(starts, ends, strict=True) if end > start]
    return [(round(FIRST_EVENT_S + i * BETWEEN_EVENTS_S, 3), size) for i, size in enumerate(sizes)]


def main(source: Path) -> int:
    for body_path in sorted(source.glob("*.sse")):
        # A dotted stem ("x.reconstructed") would lose its last part to with_suffix() in the core.
        stem = body_path.name[: -len(".sse")].replace(".", "-")
        body = body_path.read_bytes()
        src = body_path.with_name(body_path.name[: -len(".sse")] + ".source.txt")
        note = src.read_text(encoding="utf-8") if src.exists() else ""
        save_transcript(
            CORPUS / stem,
            body,
            request=request_for(stem, body),
            status=200,
            headers={"content-type": "text/event-stream"},
            chunk_timing=synthetic_timing(body),
            server=stem.split("-", 1)[0],
            excerpt=not note.startswith("RECONSTRUCTED"),
        )
        if src.exists():
            shutil.copyfile(src, CORPUS / (stem + ".source.txt"))
        assert load_transcript(CORPUS / (stem + ".sse")).read_body() == body
        print(f"{stem}: {len(body)} bytes")
    return 0


def import_recorded(source: Path, prefix: str) -> int:
    target = CORPUS / prefix
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("*.json")):
        for part in (path, path.with_suffix(".sse")):
            if part.exists():
                shutil.copyfile(part, target / f"{prefix}-{part.name}")
        print(f"{prefix}-{path.stem}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--recorded"]:
        sys.exit(import_recorded(Path(sys.argv[2]), sys.argv[3]))
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/data/transcripts/reports"))
