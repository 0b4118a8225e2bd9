"""Usage the proxy counts for tool calls and reasoning (issue 18 item 11).

An upstream that reports no usage in its stream (llama-cpp-python) has it counted by the proxy with the
upstream's tokenizer; tool calls and reasoning are completion tokens, and were counted as nothing:
streamed tool calls reported ``completion_tokens: 0``. The upstream here is a raw asyncio server whose
``/tokenize`` counts one token per character, so every count is known exactly.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from proxy.normalizer.usage import estimated_tokens, generated_tokens

from .conftest import metric, run_proxy, upstream_answer
from .rawserver import Record, http_chunk, raw_server, read_request, sse_head

pytestmark = pytest.mark.slow

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}
NAME, ARGUMENTS = "get_weather", ['{"city":', ' "Paris"}']
CALL_TOKENS = len(NAME + "".join(ARGUMENTS))  # one token per character
PROMPT_TOKENS = len("Weather in Paris?")


def _stream_events() -> list[dict[str, Any]]:
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": NAME, "arguments": ""}}
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": None, "tool_calls": [first]}]
    deltas += [{"tool_calls": [{"index": 0, "function": {"arguments": part}}]} for part in ARGUMENTS]
    events = [upstream_answer(True, [{"index": 0, "delta": d, "finish_reason": None}]) for d in deltas]
    events.append(upstream_answer(True, [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]))
    return [{**event, "object": "chat.completion.chunk"} for event in events]


def _whole() -> dict[str, Any]:
    call = {"id": "call_1", "type": "function", "function": {"name": NAME, "arguments": "".join(ARGUMENTS)}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return upstream_answer(True, [{"index": 0, "message": message, "finish_reason": "tool_calls"}])


def _upstream(
    tokenizer: bool, events: list[dict[str, Any]] | None = None, whole: dict[str, Any] | None = None
) -> Any:
    """Tool calls without usage, streamed or whole as asked (``events`` instead, when given, for
    both; ``whole`` instead of the whole answer, when given); ``/tokenize`` (llama.cpp's) when
    ``tokenizer``, else 404 for it."""

    def answer(status: str, content_type: str, data: bytes) -> bytes:
        head = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(data)}\r\n\r\n"
        return head.encode() + data

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (request := await read_request(reader)) is not None:
            head, _, raw = request.partition(b"\r\n\r\n")
            path = head.split(b" ")[1]
            body = json.loads(raw) if raw else {}
            if path == b"/tokenize" and tokenizer:
                tokens = list(range(len(body["content"])))
                writer.write(answer("200 OK", "application/json", json.dumps({"tokens": tokens}).encode()))
            elif path != b"/v1/chat/completions":
                writer.write(answer("404 Not Found", "text/plain", b"not found"))
            elif body.get("stream") or events is not None:
                sent = events if events is not None else _stream_events()
                data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in sent)
                writer.write(sse_head() + http_chunk(data + b"data: [DONE]\n\n") + b"0\r\n\r\n")
            else:
                sent = whole if whole is not None else _whole()
                writer.write(answer("200 OK", "application/json", json.dumps(sent).encode()))
            await writer.drain()

    return handler


def _usages(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The usage of the streamed answer (its usage chunk) and of the whole one."""
    asked = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    streamed = httpx.post(url + "/v1/chat/completions", json=asked, timeout=10)
    assert streamed.status_code == 200, streamed.text
    events = [json.loads(e[6:]) for e in streamed.text.split("\n\n") if e.startswith("data: {")]
    calls = [c for e in events for ch in e["choices"] for c in ch["delta"].get("tool_calls") or ()]
    assert "".join(c["function"]["arguments"] for c in calls) == "".join(ARGUMENTS)
    whole = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
    assert whole.status_code == 200, whole.text
    assert whole.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == NAME
    return events[-1]["usage"], whole.json()["usage"]


def test_streamed_tool_calls_count_their_tokens_as_the_whole_answer_does() -> None:
    with raw_server(_upstream(tokenizer=True)) as (upstream, _), run_proxy(upstream) as url:
        streamed, whole = _usages(url)
    assert streamed["completion_tokens"] == CALL_TOKENS
    # An upstream without a template endpoint that reports no usage even unstreamed: the prompt's texts
    # and tools counted, with the template's markup guessed (proxy/adapters/template_overhead.py).
    assert streamed["prompt_tokens"] > PROMPT_TOKENS
    assert streamed == whole


def test_without_a_tokenizer_streamed_tool_calls_are_still_counted() -> None:
    """The estimate without a tokenizer: a call's text by its pieces, streamed or whole (one token a
    streamed fragment counted two calls sent whole as 2, issue 37)."""
    with raw_server(_upstream(tokenizer=False)) as (upstream, _), run_proxy(upstream) as url:
        streamed, whole = _usages(url)
    pieces = estimated_tokens(NAME) + sum(estimated_tokens(part) for part in ARGUMENTS)
    assert streamed["completion_tokens"] == pieces == 9
    assert whole["completion_tokens"] == estimated_tokens(NAME + "".join(ARGUMENTS))


def test_streamed_reasoning_counts_as_completion_tokens() -> None:
    deltas = [{"role": "assistant", "reasoning_content": "Think"}, {"content": "Hi"}]
    events = [upstream_answer(True, [{"index": 0, "delta": d, "finish_reason": None}]) for d in deltas]
    events.append(upstream_answer(True, [{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    with raw_server(_upstream(True, events)) as (upstream, _), run_proxy(upstream) as url:
        for stream in (True, False):
            asked = {**CHAT, "stream": stream} | (
                {"stream_options": {"include_usage": True}} if stream else {}
            )
            response = httpx.post(url + "/v1/chat/completions", json=asked, timeout=10)
            assert response.status_code == 200, response.text
            usage = (
                json.loads(response.text.split("data: ")[-2])["usage"] if stream else response.json()["usage"]
            )
            assert usage["completion_tokens"] == len("ThinkHi")


def test_a_count_over_the_token_limit_is_held_to_it() -> None:
    """Generated text tokenized again can take more tokens than were generated (measured: 66 for a call
    llama-cpp-python cut at max_tokens 64): the count never says more than the request allowed."""
    limit = CALL_TOKENS - 3
    with raw_server(_upstream(tokenizer=True)) as (upstream, _), run_proxy(upstream) as url:
        for stream in (True, False):
            asked = {**CHAT, "max_tokens": limit, "stream": stream} | (
                {"stream_options": {"include_usage": True}} if stream else {}
            )
            response = httpx.post(url + "/v1/chat/completions", json=asked, timeout=10)
            assert response.status_code == 200, response.text
            usage = (
                json.loads(response.text.split("data: ")[-2])["usage"] if stream else response.json()["usage"]
            )
            assert usage["completion_tokens"] == limit
            assert usage["total_tokens"] == usage["prompt_tokens"] + limit


def test_two_calls_sent_whole_without_a_tokenizer_are_counted_by_their_text_and_marked_estimated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """llama-cpp-python streams each call whole in one event: counted one token an event, two calls
    came to ``completion_tokens: 2`` (issue 37). Without a tokenizer the count is an estimate, and the
    access log and /metrics say so."""
    calls = [
        {"index": i, "id": f"call_{i}", "type": "function", "function": {"name": NAME, "arguments": args}}
        for i, args in enumerate(['{"city": "Paris"}', '{"city": "Tokyo"}'])
    ]
    deltas = [{"role": "assistant", "content": None, "tool_calls": [call]} for call in calls]
    events = [upstream_answer(True, [{"index": 0, "delta": d, "finish_reason": None}]) for d in deltas]
    events.append(upstream_answer(True, [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]))
    events = [{**event, "object": "chat.completion.chunk"} for event in events]
    caplog.set_level("INFO", logger="conformant.access")
    with raw_server(_upstream(False, events)) as (upstream, _), run_proxy(upstream) as url:
        asked = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        response = httpx.post(url + "/v1/chat/completions", json=asked, timeout=10)
        page = httpx.get(url + "/metrics").text
    assert response.status_code == 200, response.text
    usage = json.loads(response.text.split("data: ")[-2])["usage"]
    texts = [call["function"]["name"] + call["function"]["arguments"] for call in calls]
    assert usage["completion_tokens"] == sum(estimated_tokens(text) for text in texts) == 18
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "conformant.access"]
    assert [line["usage_estimated"] for line in lines if line["path"] == "/v1/chat/completions"] == [True]
    assert metric(page, "conformant_usage_estimated_total", endpoint="chat") == 1


def test_a_whole_answer_without_usage_counts_the_tokens_the_server_says_it_generated() -> None:
    """llama.cpp's servers say in ``timings.predicted_n`` how many tokens they generated (Q35): JSON
    made under a grammar tokenizes again in fewer (llama-server: 31 for 61 on a call the proxy asked as
    JSON output, issue 37), so where no usage came their own count is taken, not the text's."""
    generated = CALL_TOKENS + 12  # more than the text tokenizes to (one token a character here)
    answer = {**_whole(), "timings": {"prompt_n": 3, "predicted_n": generated}}
    with raw_server(_upstream(True, whole=answer)) as (upstream, _), run_proxy(upstream) as url:
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["completion_tokens"] == generated
    assert usage["total_tokens"] == usage["prompt_tokens"] + generated
    assert "timings" not in response.json()  # (read, not relayed: Q35)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"choices": [{}], "timings": {"predicted_n": 7}}, 7),
        ({"content": "x", "timings": {"predicted_n": 7}}, 7),  # (llama.cpp's native route)
        ({"choices": [], "timings": {"predicted_n": 7}}, 7),  # (a stream's usage event)
        ({"choices": [{}], "timings": {"predicted_n": -1}}, None),
        ({"choices": [{}], "timings": {"predicted_n": True}}, None),
        ({"choices": [{}], "timings": {"predicted_n": "7"}}, None),
        ({"choices": [{}], "timings": [7]}, None),
        ({"choices": [{}]}, None),
        ([], None),
    ],
)
def test_the_generated_count_is_read_only_where_it_is_a_count(payload: Any, expected: Any) -> None:
    assert generated_tokens(payload) == expected


def test_a_stream_without_usage_counts_the_tokens_the_server_says_it_generated() -> None:
    """The same for a stream: llama.cpp's servers put ``timings`` on its last events (and on every event
    in some builds, counted so far); the last count is the completion's, not the events nor the text."""
    generated = CALL_TOKENS + 12
    events = _stream_events()
    events[1] = {**events[1], "timings": {"predicted_n": 2}}
    events[-1] = {**events[-1], "timings": {"predicted_n": generated}}
    with raw_server(_upstream(True, events)) as (upstream, _), run_proxy(upstream) as url:
        asked = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        response = httpx.post(url + "/v1/chat/completions", json=asked, timeout=10)
    assert response.status_code == 200, response.text
    usage = json.loads(response.text.split("data: ")[-2])["usage"]
    assert usage["completion_tokens"] == generated
    assert "timings" not in response.text  # (read, not relayed: Q35)
