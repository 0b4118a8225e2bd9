"""The stream's last event cut off before its blank line (issue 18 item 10).

An upstream that sends its only event, ``data: {"error": ...}``, and closes without the closing blank
line (as quoted in public bug reports) gave every client a 502 "ended the stream without a completion":
the SSE spec drops an unterminated event. The proxy recovers the upstream's meaning from a complete JSON
payload at the end of the stream; the suite still reports the stream as cut off (``sse-cut-off``).
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from conformance.judge import judge_response

from .conftest import run_proxy, upstream_answer
from .rawserver import Record, http_chunk, raw_server, read_request, sse_head

pytestmark = pytest.mark.slow

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
MESSAGE = "Invalid 'tools': empty array. Expected an array with minimum length 1, but got an empty array."
ERROR = {"error": {"code": 400, "message": MESSAGE, "type": "invalid_request_error"}}


def _closing_after(body: bytes) -> object:
    """An upstream that answers a 200 stream of ``body`` and ends the response (chunked terminator)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        await read_request(reader)
        writer.write(sse_head() + http_chunk(body) + b"0\r\n\r\n")
        await writer.drain()

    return handler


@pytest.mark.parametrize("end", [b"", b"\n", b"\r\n"], ids=["no-line-end", "lf", "crlf"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_an_error_event_cut_before_its_blank_line_is_the_upstreams_error(end: bytes, stream: bool) -> None:
    body = b"data: " + json.dumps(ERROR).encode() + end
    path = "/v1/chat/completions"
    assert "sse-cut-off" in {
        f.rule for f in judge_response(body, request=None, status=200, headers=None).errors
    }  # the suite still says what the upstream did
    with raw_server(_closing_after(body)) as (upstream, _), run_proxy(upstream) as url:
        response = httpx.post(url + path, json={**CHAT, "stream": stream}, timeout=10)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["message"] == MESSAGE
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="empty array"):
            client.chat.completions.create(**CHAT, stream=stream)  # type: ignore[call-overload]


def test_a_last_chunk_cut_before_its_blank_line_still_counts() -> None:
    """A whole chunk at the end is recovered too: its finish is the one the upstream sent."""
    first = upstream_answer(True, [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}])
    last = upstream_answer(True, [{"index": 0, "delta": {}, "finish_reason": "length"}])
    body = b"data: " + json.dumps(first).encode() + b"\n\ndata: " + json.dumps(last).encode() + b"\n"
    with raw_server(_closing_after(body)) as (upstream, _), run_proxy(upstream) as url:
        response = httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": False}, timeout=10)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["finish_reason"] == "length"


def test_a_payload_cut_mid_json_is_still_a_stream_closed_too_early() -> None:
    first = upstream_answer(True, [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}])
    body = b"data: " + json.dumps(first).encode() + b'\n\ndata: {"choices": [{"index": 0, "del'
    with raw_server(_closing_after(body)) as (upstream, _), run_proxy(upstream) as url:
        response = httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=10)
        assert response.status_code == 200
        last = json.loads(response.text.rsplit("data: ", 1)[-1])
        assert "closed the stream before its final chunk" in last["error"]["message"]
