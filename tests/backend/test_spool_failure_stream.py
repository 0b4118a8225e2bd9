"""The bundled backend's Responses stream when a long text cannot be kept in a temporary file (issue 32,
hardening; the proxy's: tests/proxy/test_spool_failures.py).

With no writable temporary directory, a text past ``SPOOL_CHARS`` characters raised ``FileNotFoundError``
out of the stream's events: uvicorn logged a traceback and cut the connection, with no terminal event.
Now the stream ends with ``response.failed`` saying why (no path in it), the item ``incomplete``.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from backend import generation
from conformance.protocols import spooled_text
from conformance.protocols.responses.output import ResponsesOutput
from conformance.protocols.responses.translation import translate_request


def _delta(text: str) -> dict[str, Any]:
    return {"model": "m", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def test_a_long_text_with_no_temporary_directory_ends_the_backends_stream_with_response_failed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-directory"
    monkeypatch.setattr(spooled_text, "SPOOL_CHARS", 1000)
    monkeypatch.setattr(tempfile, "tempdir", str(missing))
    engine_chunks = [[_delta("x" * 100)] for _ in range(40)]

    async def chunks(_generation: Any, _started: Any) -> AsyncIterator[list[dict[str, Any]]]:
        for each in engine_chunks:  # what the engine made of 40 steps
            yield each

    monkeypatch.setattr(generation, "_chunks", chunks)
    request = {"model": "m", "input": "go on", "stream": True, "store": False}
    output = ResponsesOutput(translate_request(request), "m")

    async def run() -> bytes:
        stream = generation._streamed(None, None, output)  # type: ignore[arg-type]
        return b"".join([piece async for piece in stream])

    body = asyncio.run(run())
    events = [json.loads(block.partition(b"\ndata: ")[2]) for block in body.split(b"\n\n") if block]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    failed = events[-1]
    assert failed["type"] == "response.failed"
    assert "temporary file" in failed["response"]["error"]["message"]
    assert str(missing) not in body.decode()
    (item,) = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert item["status"] == "incomplete"
    assert item["content"][0]["text"] == ""
