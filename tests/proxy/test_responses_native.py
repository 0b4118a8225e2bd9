"""``--responses native|auto``: an upstream's own /v1/responses, normalized as llama-server's needed
(events without ``sequence_number``/``output_index``/``content_index``, the model named by its path,
``completed`` where ``max_output_tokens`` cut the answer: /work/shared/clients.md)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from conformance.replay import create_replay_app
from conformance.transcript import load_transcript
from tests.support.responses_checks import check_events, judged, sse_events
from tests.support.servers import run_asgi

from .conftest import run_proxy
from .rawserver import Record, http_chunk, raw_server, read_request, sse_head

_RESPONSE = {
    "id": "resp_x",
    "object": "response",
    "created_at": 1,
    "model": "/models/gemma.gguf",
    "output": [],
}


def _upstream_events() -> list[dict[str, Any]]:
    item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    done_item = {**item, "status": "completed", "content": [{**part, "text": "Hi"}]}
    final = {
        **_RESPONSE,
        "status": "completed",
        "output": [done_item],
        "usage": {"input_tokens": 3, "output_tokens": 16, "total_tokens": 19},
    }
    return [
        {"type": "response.created", "response": {**_RESPONSE, "status": "in_progress"}},
        {"type": "response.output_item.added", "item": item},
        {"type": "response.content_part.added", "item_id": "msg_1", "part": part},
        {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "Hi"},
        {"type": "response.output_text.done", "item_id": "msg_1", "text": "Hi"},
        {"type": "response.content_part.done", "item_id": "msg_1", "part": {**part, "text": "Hi"}},
        {"type": "response.output_item.done", "item": done_item},
        {"type": "response.completed", "response": final},
    ]


async def _handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    while (raw := await read_request(reader)) is not None:
        head = raw.split(b"\r\n", 1)[0]
        if not head.startswith(b"POST /v1/responses"):
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            continue
        record.requests += 1
        if raw.endswith(b"{}"):  # the auto mode's probe
            body = b'{"error": {"message": "input is required", "type": "invalid_request_error"}}'
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n")
            writer.write(f"content-length: {len(body)}\r\n\r\n".encode() + body)
            continue
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in _upstream_events())
        writer.write(sse_head() + http_chunk(data) + b"0\r\n\r\n")
        await writer.drain()


@pytest.mark.parametrize("mode", ["native", "auto"])
def test_native_events_are_normalized(mode: str) -> None:
    with raw_server(_handler) as (upstream, _), run_proxy(upstream, responses=mode) as url:
        request = {"model": "/models/gemma.gguf", "input": "hi", "stream": True, "max_output_tokens": 16}
        response = httpx.post(url + "/v1/responses", json=request, timeout=10)
        assert response.status_code == 200, response.text
        events = sse_events(response.content)
        check_events(events)
        final = events[-1]
        assert final["type"] == "response.incomplete"
        assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
        assert final["response"]["model"] == "gemma"
        assert {e["response"]["id"] for e in events if "response" in e} != {"resp_x"}


def test_translate_mode_does_not_reach_the_upstreams_own_endpoint() -> None:
    with raw_server(_handler) as (upstream, record), run_proxy(upstream, responses="translate") as url:
        response = httpx.post(url + "/v1/responses", json={"model": "m", "input": "hi"}, timeout=10)
        assert response.status_code != 200  # the raw upstream has no chat route
        assert record.requests == 0


DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts" / "responses"


def test_llama_servers_own_stream_is_judged_without_an_error_behind_the_proxy() -> None:
    """The suite flags llama-server's stream for missing keys, its model path and ``completed`` at the
    limit (tests/conformance/test_responses_corpus.py); served through ``--responses native``, none."""
    recorded = load_transcript(DATA / "llama-server-native-stream.sse")
    assert recorded.request_body is not None
    with (
        run_asgi(create_replay_app([recorded], pace=None)) as upstream,
        run_proxy(upstream, responses="native") as url,
    ):
        response = httpx.post(url + "/v1/responses", json=recorded.request_body, timeout=10)
        assert response.status_code == 200, response.text
        judged(response.content, recorded.request_body, response.status_code, response.headers)
        events = sse_events(response.content)
        check_events(events)
        assert events[-1]["type"] == "response.incomplete"
        assert events[-1]["response"]["model"] == "gemma"
