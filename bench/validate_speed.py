"""How fast ``conformant validate`` judges a large stream, against the naive way, measured in one run.

Writes a synthetic OpenAI-style chat stream (default 200,000 chunks), runs ``conformant validate`` on it
in-process (parse, json.loads, schemas, all stream rules, report) and, on the same events, the naive
way: ``jsonschema.validate(chunk, schema)`` per event. Prints events/s for both and the ratio.
Times are CPU seconds of this (single-threaded) process, so a busy machine does not skew them.

    python bench/validate_speed.py [--chunks N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

import jsonschema

from conformance.cli import main as conformant
from conformance.schemas import load_schema, registry


def write_stream(path: Path, chunks: int) -> None:
    base = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1727346169,
        "model": "gpt-4o-2024-08-06",
        "system_fingerprint": "fp_5050236cbd",
    }
    words = ["The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."]
    with path.open("wb") as fh:
        first = {
            **base,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": "", "refusal": None},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
        }
        fh.write(b"data: " + json.dumps(first, separators=(",", ":")).encode() + b"\n\n")
        for i in range(chunks - 3):
            chunk = {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": words[i % len(words)]},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
            }
            fh.write(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")
        last = {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]}
        fh.write(b"data: " + json.dumps(last, separators=(",", ":")).encode() + b"\n\n")
        usage = {
            **base,
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": chunks - 2, "total_tokens": chunks + 7},
        }
        fh.write(b"data: " + json.dumps(usage, separators=(",", ":")).encode() + b"\n\n")
        fh.write(b"data: [DONE]\n\n")


def time_validate(path: Path) -> tuple[float, int]:
    out = io.StringIO()
    start = time.process_time()
    with contextlib.redirect_stdout(out):
        status = conformant(["validate", str(path), "--format", "json"])
    return time.process_time() - start, status


def time_naive(path: Path) -> float:
    """The naive way on the same events: split the data lines, json.loads, jsonschema.validate() each."""
    schema = load_schema("chat_completion_chunk")
    start = time.process_time()
    with path.open("rb") as fh:
        for line in fh:
            if line.startswith(b"data: ") and line != b"data: [DONE]\n":
                jsonschema.validate(json.loads(line[6:]), schema, registry=registry())
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument(
        "--naive-sample",
        type=int,
        default=1_000,
        help="events the naive way validates (it is slow; events/s is per event either way)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.sse"
        write_stream(path, args.chunks)
        size = path.stat().st_size
        elapsed, status = time_validate(path)
        sample = Path(tmp) / "sample.sse"
        write_stream(sample, min(args.naive_sample, args.chunks))
        naive = time_naive(sample)
    events = args.chunks + 1
    ours = events / elapsed
    theirs = (min(args.naive_sample, args.chunks) + 1) / naive
    print(f"stream: {args.chunks} chunks, {size / 1e6:.1f} MB; validate exit status {status}")
    print(f"conformant validate: {elapsed:.2f} CPU s, {ours:,.0f} events/s")
    print(f"naive jsonschema.validate() per event: {theirs:,.0f} events/s")
    print(f"ratio: {ours / theirs:.1f}x")


if __name__ == "__main__":
    main()
