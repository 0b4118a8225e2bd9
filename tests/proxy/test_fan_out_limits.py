"""Fan-out amplification: a small request may not become thousands of upstream requests (--max-fan-out)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.servers import wait_for

from .conftest import run_proxy, upstream_answer
from .rawserver import Record, chunk, http_chunk, json_answer, raw_server, read_request, sse_head


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """One completion per completion request, as JSON, on a keep-alive connection; 404 to anything else
    (the proxy's look at the model listing)."""
    while (request := await read_request(reader)) is not None:
        await _answer_one(request, writer, record)


async def _answer_one(request: bytes, writer: asyncio.StreamWriter, record: Record) -> None:
    """A completion request's answer, as JSON; 404 to anything else."""
    if not request.startswith(b"POST /v1/completions "):
        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        return
    record.requests += 1
    prompt = json.loads(request.split(b"\r\n\r\n", 1)[1])["prompt"]
    choice = {"index": 0, "text": f"<{prompt}>", "finish_reason": "stop"}
    writer.write(json_answer(upstream_answer(False, [choice])))
    await writer.drain()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": [f"p{i}" for i in range(200)], "n": 128}, "prompt"),  # the 1 KB request of the audit
        ({"prompt": "x", "n": 9}, "n"),
        ({"prompt": ["a", "b", "c"], "n": 3}, "prompt"),
    ],
    ids=["200x128", "n", "prompts-x-n"],
)
def test_a_fan_out_past_the_limit_is_a_400_that_reaches_no_upstream(body: dict[str, Any], param: str) -> None:
    with (
        raw_server(_answer) as (upstream, record),
        run_proxy(upstream, upstream_kind="openai", max_fan_out=8) as url,
    ):
        response = httpx.post(url + "/v1/completions", json={"model": "m", **body}, timeout=10)
        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("fan_out_too_large", param)
        assert "at most 8" in error["message"]
        assert record.requests == 0


def test_a_fan_out_at_the_limit_is_served() -> None:
    with (
        raw_server(_answer) as (upstream, record),
        run_proxy(upstream, upstream_kind="openai", max_fan_out=8) as url,
    ):
        body = {"model": "m", "prompt": ["a", "b", "c", "d"], "n": 2}
        response = httpx.post(url + "/v1/completions", json=body, timeout=10)
        assert response.status_code == 200, response.text
        assert [c["text"] for c in response.json()["choices"]] == [
            "<a>",
            "<a>",
            "<b>",
            "<b>",
            "<c>",
            "<c>",
            "<d>",
            "<d>",
        ]
        assert record.requests == 8


def test_the_default_limit_refuses_the_audits_request() -> None:
    with raw_server(_answer) as (upstream, record), run_proxy(upstream, upstream_kind="openai") as url:
        body = {"model": "m", "prompt": [f"p{i}" for i in range(200)], "n": 128}
        response = httpx.post(url + "/v1/completions", json=body, timeout=10)
        assert response.status_code == 400
        assert "at most 256" in response.json()["error"]["message"]
        assert record.requests == 0


async def _stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """A slow stream (three chunks 0.1 s apart) per completion request; 404 to anything else."""
    while (request := await read_request(reader)) is not None:
        if not request.startswith(b"POST /v1/chat/completions "):
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            continue
        record.requests += 1
        writer.write(sse_head())
        for word in ("one ", "two ", "three"):
            writer.write(http_chunk(chunk(word)))
            await writer.drain()
            await asyncio.sleep(0.1)
        writer.write(http_chunk(chunk("", "stop") + b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


def _choice_texts(lines: list[str]) -> dict[int, str]:
    """Each choice's text in a chat stream's lines."""
    texts: dict[int, str] = {}
    for line in lines:
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                texts[choice["index"]] = texts.get(choice["index"], "") + (
                    choice["delta"].get("content") or ""
                )
    return texts


def test_fanned_out_streams_past_the_connection_cap_wait_their_turn_and_all_finish() -> None:
    """Four streams of n 3 at once through 4 upstream connections: those that do not fit wait, first
    come first served, instead of each holding part of what it needs until the first-byte timeout."""
    with (
        raw_server(_stream) as (upstream, record),
        run_proxy(upstream, upstream_kind="openai", max_upstream_connections=4, first_byte_timeout=10) as url,
    ):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 3, "stream": True}

        def one() -> list[str]:
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as response:
                assert response.status_code == 200
                return list(response.iter_lines())

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: one(), range(4)))
        for lines in answers:
            assert lines[-2] == "data: [DONE]"
            assert _choice_texts(lines) == {0: "one two three", 1: "one two three", 2: "one two three"}
        assert record.requests == 12


def test_a_fan_out_sends_none_of_its_requests_until_the_cap_has_room_for_all_of_them() -> None:
    """Two connections, one held by a stream: a request of n 2 sends nothing until both are free,
    instead of holding the free one while it waits for the other (fan-outs that each held part of
    what they needed waited on each other until the first-byte timeout: 504s)."""
    gate = threading.Event()

    async def held_then_streamed(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record
    ) -> None:
        while (request := await read_request(reader)) is not None:
            if not request.startswith(b"POST /v1/chat/completions "):
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                continue
            record.requests += 1
            if b'"held"' in request:
                await asyncio.to_thread(gate.wait, 20)  # (set by the test's thread)
            writer.write(sse_head() + http_chunk(chunk("done", "stop") + b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()

    def texts(url: str, content: str, n: int) -> dict[int, str]:
        body = {"model": "m", "messages": [{"role": "user", "content": content}], "n": n, "stream": True}
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as response:
            assert response.status_code == 200
            return _choice_texts(list(response.iter_lines()))

    with (
        raw_server(held_then_streamed) as (upstream, record),
        run_proxy(upstream, upstream_kind="openai", max_upstream_connections=2) as url,
        ThreadPoolExecutor(2) as pool,
    ):
        held = pool.submit(texts, url, "held", 1)
        wait_for(lambda: record.requests == 1, timeout=10)
        fanned = pool.submit(texts, url, "fanned", 2)
        time.sleep(1.0)  # (the code before sent one of the two at once)
        assert record.requests == 1  # not one of the two sent while only one could be
        gate.set()
        assert held.result(timeout=20) == {0: "done"}
        assert fanned.result(timeout=20) == {0: "done", 1: "done"}
        assert record.requests == 3


def test_a_fan_out_larger_than_the_connection_cap_is_a_400_that_names_it() -> None:
    """Its requests could never all be in flight at once."""
    with (
        raw_server(_answer) as (upstream, record),
        run_proxy(upstream, upstream_kind="openai", max_upstream_connections=4) as url,
    ):
        response = httpx.post(url + "/v1/completions", json={"model": "m", "prompt": "x", "n": 5}, timeout=10)
        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("fan_out_too_large", "n")
        assert "at most 4 for one request (--max-upstream-connections)" in error["message"]
        assert record.requests == 0


async def _one_at_a_time(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """llama-cpp-python's listing (it serves one request at a time), then a completion per request."""
    while (request := await read_request(reader)) is not None:
        if request.startswith(b"GET /v1/models "):
            entry = {"id": "m", "object": "model", "owned_by": "me", "permissions": []}
            writer.write(json_answer({"object": "list", "data": [entry]}))
            await writer.drain()
            continue
        await _answer_one(request, writer, record)


def test_a_fan_out_to_an_upstream_that_serves_one_at_a_time_is_not_held_to_the_connection_cap() -> None:
    """Its requests go one after another: none waits for another's place."""
    with (
        raw_server(_one_at_a_time) as (upstream, record),
        run_proxy(upstream, upstream_kind="openai", max_upstream_connections=2) as url,
    ):
        response = httpx.post(url + "/v1/completions", json={"model": "m", "prompt": "x", "n": 5}, timeout=10)
        assert response.status_code == 200, response.text
        assert [c["text"] for c in response.json()["choices"]] == ["<x>"] * 5
        assert record.requests == 5
