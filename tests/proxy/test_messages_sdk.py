"""anthropic-python's Messages client through the proxy (``messages.create`` streamed and not, the
``messages.stream`` helper, a tool round trip, ``count_tokens``) against a raw chat upstream that calls
a tool when given tools and answers the tool's output otherwise (tests/proxy/chat_upstream.py); and
the route's refusals and faults in Anthropic's words. Every raw answer is judged with no error."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from proxy.adapters.template_overhead import GENERIC
from tests.support.messages_checks import check_message, judged, message_events
from tests.support.servers import free_port

from .chat_upstream import handle_chat
from .conftest import metric, run_proxy
from .rawserver import (
    Record,
    answering,
    chunk,
    http_chunk,
    json_answer,
    raw_server,
    read_request,
    sse_head,
    streaming,
    wait_peer_close,
)

TOOL: Any = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
HELLO: dict[str, Any] = {
    "model": "gemma",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "Say hello"}],
}


@pytest.fixture(scope="module")
def proxy_url() -> Iterator[str]:
    with raw_server(handle_chat) as (upstream, _), run_proxy(upstream) as url:
        yield url


@pytest.fixture
def client(proxy_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy_url, api_key="none", max_retries=0)


def post(url: str, body: Any, **headers: str) -> httpx.Response:
    """``body`` posted to the proxy's ``/v1/messages?beta=true`` (as Claude Code posts it), judged."""
    response = httpx.post(url + "/v1/messages?beta=true", json=body, headers=headers, timeout=10)
    judged(response.content, body, response.status_code, response.headers)
    return response


def test_create_whole(client: anthropic.Anthropic, proxy_url: str) -> None:
    assert post(proxy_url, HELLO).status_code == 200
    message = client.messages.create(**HELLO)
    check_message(message.model_dump(mode="json"))
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Hello there"  # type: ignore[union-attr]
    assert message.model == "gemma"  # as asked, not the upstream's file path
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (9, 4)


def test_create_streamed_and_the_stream_helper(client: anthropic.Anthropic, proxy_url: str) -> None:
    events = message_events(post(proxy_url, {**HELLO, "stream": True}).content)
    assert [e["type"] for e in events][:2] == ["message_start", "ping"]
    assert events[-2]["delta"]["stop_reason"] == "end_turn"
    assert events[-1]["type"] == "message_stop"
    with client.messages.stream(**HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello there" == final.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_without_a_model_names_the_model_chat_names(proxy_url: str, stream: bool) -> None:
    # Local servers serve a request that names no model (conformance/schemas.py); the Message then
    # names the upstream's model as chat's answer does, not a made-up "model".
    asked = {key: value for key, value in HELLO.items() if key != "model"}
    chat = httpx.post(proxy_url + "/v1/chat/completions", json={"messages": asked["messages"]}, timeout=10)
    named = chat.json()["model"]
    assert named not in ("", "model")
    response = post(proxy_url, {**asked, "stream": stream})
    message = message_events(response.content)[0]["message"] if stream else response.json()
    assert message["model"] == named


def test_a_stream_opens_with_the_prompts_tokens(client: anthropic.Anthropic, proxy_url: str) -> None:
    # Q88: message_start's input_tokens, where Claude Code's context meter reads them, counted as
    # count_tokens counts them (this upstream sends its usage only at the end).
    events = message_events(post(proxy_url, {**HELLO, "stream": True}).content)
    started = events[0]["message"]["usage"]
    counted = client.messages.count_tokens(model="gemma", messages=HELLO["messages"]).input_tokens
    assert started["input_tokens"] == counted > 0
    assert events[-2]["type"] == "message_delta"  # with the answer's own count, as it came
    assert events[-2]["usage"]["input_tokens"] > 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_round_trip(client: anthropic.Anthropic, proxy_url: str, stream: bool) -> None:
    asked: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    body = {**HELLO, "messages": asked, "tools": [TOOL], "tool_choice": {"type": "any"}}
    post(proxy_url, {**body, "stream": stream})
    if stream:
        with client.messages.stream(**body) as events:
            first = events.get_final_message()
    else:
        first = client.messages.create(**body)
    check_message(first.model_dump(mode="json"))
    assert first.stop_reason == "tool_use"
    (call,) = [block for block in first.content if block.type == "tool_use"]
    assert call.name == "get_weather"
    assert call.input == {"city": "Paris"}
    follow_up = [
        *asked,
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]},
    ]
    post(proxy_url, {**HELLO, "messages": follow_up, "tools": [TOOL]})
    answer = client.messages.create(**{**HELLO, "messages": follow_up, "tools": [TOOL]})
    assert answer.content[0].text == "It is sunny"  # type: ignore[union-attr]


def test_count_tokens_counts_the_texts_and_tools_by_the_upstreams_tokenizer(
    client: anthropic.Anthropic,
) -> None:
    # The raw upstream counts words, has no template endpoint and reports no usage to learn its template
    # from: the proxy counts the texts and tools, with a template's markup guessed (3 + 5 a message,
    # proxy/adapters/template_overhead.py).
    plain = client.messages.count_tokens(
        model="gemma", messages=[{"role": "user", "content": "one two three"}]
    )
    assert plain.input_tokens == 3 + GENERIC.fixed + GENERIC.per_message
    with_tools = client.messages.count_tokens(
        model="gemma", messages=[{"role": "user", "content": "one two three"}], tools=[TOOL]
    )
    assert with_tools.input_tokens > plain.input_tokens
    slashed = httpx.post(
        str(client.base_url) + "/v1/messages/count_tokens/",
        json={"model": "gemma", "messages": [{"role": "user", "content": "one two three"}]},
    )
    assert (slashed.status_code, slashed.json()) == (200, {"input_tokens": plain.input_tokens})


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({**HELLO, "max_tokens": "eight"}, "max_tokens"),
        ({"model": "gemma", "messages": HELLO["messages"]}, "max_tokens"),
        ({**HELLO, "tools": [{"type": "computer_20250124", "name": "computer"}]}, "computer_20250124"),
        ({**HELLO, "stop_sequences": ["a"] * 5}, "stop_sequences"),
    ],
)
def test_refusals_are_anthropic_errors_the_sdk_raises(
    client: anthropic.Anthropic, proxy_url: str, body: dict[str, Any], named: str
) -> None:
    response = post(proxy_url, body)
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert named in error["error"]["message"]
    if isinstance(body.get("max_tokens"), int):  # (the SDK itself needs an integer there)
        with pytest.raises(anthropic.BadRequestError):
            client.messages.create(**body)


def test_not_json_and_a_body_too_large_are_anthropic_errors() -> None:
    with raw_server(handle_chat) as (upstream, record), run_proxy(upstream, max_body=2048) as url:
        response = httpx.post(url + "/v1/messages", content=b"{nope", timeout=10)
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "invalid_request_error"
        big = {**HELLO, "messages": [{"role": "user", "content": "x" * 4096}]}
        response = httpx.post(url + "/v1/messages", json=big, timeout=10)
        assert response.status_code == 413
        assert response.json() == {
            "type": "error",
            "error": {"type": "request_too_large", "message": "request body larger than 2048 bytes"},
        }
        assert record.requests == 0


def test_the_api_key_is_read_from_x_api_key() -> None:
    with raw_server(handle_chat) as (upstream, _), run_proxy(upstream, api_key="secret") as url:
        wrong = anthropic.Anthropic(base_url=url, api_key="nope", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as caught:
            wrong.messages.create(**HELLO)
        assert caught.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
        with pytest.raises(anthropic.AuthenticationError):
            wrong.messages.count_tokens(model="gemma", messages=HELLO["messages"])
        right = anthropic.Anthropic(base_url=url, api_key="secret", max_retries=0)
        assert right.messages.create(**HELLO).content[0].text == "Hello there"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("parts", "end", "kind"),
    [
        ((chunk("Hel"),), False, "api_error"),
        ((chunk("Hel"), b"data: {not json\n\n"), True, "api_error"),
        (
            (chunk("Hel"), b'data: {"error": {"message": "the KV cache is full", "code": 500}}\n\n'),
            True,
            "api_error",
        ),
    ],
    ids=["cut", "not json", "error event"],
)
def test_a_fault_mid_stream_ends_with_an_error_event_the_sdk_raises(parts: Any, end: bool, kind: str) -> None:
    with raw_server(streaming(*parts, end=end)) as (upstream, _), run_proxy(upstream) as url:
        response = httpx.post(url + "/v1/messages", json={**HELLO, "stream": True}, timeout=10)
        events = message_events(response.content)
        assert events[-1]["type"] == "error"
        assert events[-1]["error"]["type"] == kind, events[-1]
        assert "Traceback" not in response.text
        assert "/home/" not in response.text
        client = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0)
        with pytest.raises(anthropic.APIStatusError), client.messages.stream(**HELLO) as stream:
            stream.get_final_message()


def test_a_whole_stream_is_not_counted_as_a_client_that_left(caplog: pytest.LogCaptureFixture) -> None:
    # The count's closing, after the last byte, met uvicorn's disconnect message for a complete response:
    # every Messages stream was logged and counted as a client that went away (found black-box).
    caplog.set_level(logging.INFO, logger="conformant.access")
    with raw_server(handle_chat) as (upstream, _), run_proxy(upstream) as url:
        for _ in range(5):
            assert message_events(post(url, {**HELLO, "stream": True}).content)[-1]["type"] == "message_stop"
        metrics = httpx.get(url + "/metrics", timeout=10).text
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "conformant.access"]
    streams = [line for line in lines if line["path"] == "/v1/messages"]
    assert [(line["status"], line["client_disconnected"]) for line in streams] == [(200, False)] * 5
    assert metric(metrics, "conformant_client_disconnects_total") == 0


def _silent_counter(asked: list[str]) -> Any:
    """A chat upstream whose every other path (its tokenizer, its counting route) never answers."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (raw := await read_request(reader)) is not None:
            head = raw.split(b"\r\n", 1)[0].decode()
            asked.append(head)
            if not head.startswith("POST /v1/chat/completions "):
                await asyncio.sleep(3600)
            await handle_chat(_replay(raw), writer, record)
            return

    return handler


def _replay(raw: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(raw)
    reader.feed_eof()
    return reader


def test_a_count_that_never_comes_holds_the_stream_half_a_second_at_most() -> None:
    # Hostile: the prompt's count for message_start (Q88) is asked at once; one the upstream never gives
    # is given up 0.5 s after the first chunks, the stream opens with 0 and the answer's count comes at
    # its end, as before.
    asked: list[str] = []
    with raw_server(_silent_counter(asked)) as (upstream, _), run_proxy(upstream) as url:
        for _ in range(2):  # (the first two wait for the tokenizers the end's usage count probes)
            post(url, {**HELLO, "stream": True})
        started = time.monotonic()
        response = post(url, {**HELLO, "stream": True})
        took = time.monotonic() - started
        events = message_events(response.content)
        assert events[0]["message"]["usage"]["input_tokens"] == 0
        assert events[-2]["usage"]["input_tokens"] > 0
        assert "".join(e["delta"].get("text", "") for e in events if "delta" in e) == "Hello there"
        assert took < 0.5 + 1.0, took
        assert any(line.startswith("POST /tokenize") for line in asked), asked
        assert httpx.get(url + "/health", timeout=5).status_code == 200


def test_a_count_under_way_is_let_go_when_the_answer_fails() -> None:
    # Hostile: the chat request fails while the prompt's count waits on a tokenizer that never answers;
    # the error is the client's at once, and the count's connection is closed, not left to hang.
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        raw = await read_request(reader)
        assert raw is not None
        if raw.startswith(b"POST /v1/chat/completions "):
            loading = {"error": {"message": "the model is loading", "type": "server_error", "code": 503}}
            writer.write(json_answer(loading, "503 Service Unavailable"))
            await writer.drain()
            return
        await wait_peer_close(reader, record)  # (every other path: never answered)

    with raw_server(handler) as (upstream, record), run_proxy(upstream) as url:
        for _ in range(2):  # (the first also waits for the upstream's detection)
            response = post(url, {**HELLO, "stream": True})
            assert response.status_code == 503
            assert response.json()["error"]["type"] == "overloaded_error"
        waiting = len(record.peer_closed_at)
        started = time.monotonic()
        assert post(url, {**HELLO, "stream": True}).status_code == 503
        while len(record.peer_closed_at) == waiting and time.monotonic() - started < 3:
            time.sleep(0.02)
        assert len(record.peer_closed_at) > waiting  # the count's request, let go


def _hello_stream(prompt_tokens: int) -> bytes:
    """A whole streamed chat answer, "Hello there", with its usage."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 2, "total_tokens": prompt_tokens + 2}
    last = b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"
    parts = [chunk("Hello"), chunk(" there", "stop"), last, b"data: [DONE]\n\n"]
    return sse_head() + b"".join(http_chunk(part) for part in parts) + b"0\r\n\r\n"


def test_the_counts_wait_never_makes_a_timely_answer_a_504() -> None:
    # Found black-box: with --first-byte-timeout 1, an answer whose first chunk came at 0.8 s was a 504
    # "sent nothing before the first-byte timeout" on /v1/messages alone, the count's wait on top of it.
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        raw = await read_request(reader)
        assert raw is not None
        if raw.startswith(b"POST /v1/messages/count_tokens "):
            await wait_peer_close(reader, record)  # (never answered)
            return
        if not raw.startswith(b"POST /v1/chat/completions "):
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")  # (no tokenizer)
            return
        await asyncio.sleep(0.8)
        writer.write(_hello_stream(9))
        await writer.drain()

    with raw_server(handler) as (upstream, _), run_proxy(upstream, first_byte_timeout=1.0) as url:
        for _ in range(3):  # (the first also learns the upstream)
            response = post(url, {**HELLO, "stream": True})
            assert response.status_code == 200, response.text
            events = message_events(response.content)
            assert "".join(e["delta"].get("text", "") for e in events if "delta" in e) == "Hello there"


def _one_at_a_time() -> Any:
    """llama-cpp-python as Q71 has it: its listing says so, and a request that arrives while it streams
    breaks that stream off."""
    streaming_now: list[asyncio.StreamWriter] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (raw := await read_request(reader)) is not None:
            for other in streaming_now:
                other.transport.abort()
            if raw.startswith(b"GET /v1/models "):
                entry = {"id": "m", "object": "model", "owned_by": "me", "permissions": []}
                writer.write(json_answer({"object": "list", "data": [entry]}))
            elif not raw.startswith(b"POST /v1/chat/completions "):
                await handle_chat(_replay(raw), writer, record)  # (its tokenizer)
            else:
                streaming_now.append(writer)
                writer.write(sse_head())
                for part in (chunk("Hello"), chunk(" there", "stop"), b"data: [DONE]\n\n"):
                    await asyncio.sleep(0.05)
                    writer.write(http_chunk(part))
                writer.write(b"0\r\n\r\n")
                streaming_now.remove(writer)
            await writer.drain()

    return handler


def test_an_upstream_that_serves_one_request_at_a_time_is_counted_before_it_answers() -> None:
    # CI's run against llama-cpp-python: the count asked beside the answer broke its stream off (every
    # Messages stream there ended with an error event). Counted first, the stream is whole.
    with raw_server(_one_at_a_time()) as (upstream, _), run_proxy(upstream, upstream_kind="openai") as url:
        for _ in range(3):  # (the first also learns the template's markup, past the count's wait)
            events = message_events(post(url, {**HELLO, "stream": True}).content)
            assert events[-1]["type"] == "message_stop", events[-1]
        assert events[0]["message"]["usage"]["input_tokens"] > 0


def test_an_upstream_without_a_counting_route_is_asked_once() -> None:
    # The count route's 404 is learned: later streams count by the tokenizer alone.
    asked: list[str] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        raw = await read_request(reader)
        assert raw is not None
        asked.append(raw.split(b"\r\n", 1)[0].decode())
        await handle_chat(_replay(raw), writer, record)

    with raw_server(handler) as (upstream, _), run_proxy(upstream) as url:
        for _ in range(3):
            events = message_events(post(url, {**HELLO, "stream": True}).content)
            assert events[0]["message"]["usage"]["input_tokens"] > 0
    assert sum(line.startswith("POST /v1/messages/count_tokens") for line in asked) == 1, asked


def test_an_upstream_error_before_the_stream_is_anthropics_at_its_status() -> None:
    loading = {"error": {"message": "the model is loading", "type": "server_error", "code": 503}}
    handler = answering(json_answer(loading, "503 Service Unavailable"))
    with raw_server(handler) as (upstream, _), run_proxy(upstream) as url:
        response = post(url, {**HELLO, "stream": True})
        assert response.status_code == 503
        assert response.json()["error"]["type"] == "overloaded_error"
        assert "loading" in response.json()["error"]["message"]


def test_a_context_overflow_says_prompt_is_too_long() -> None:
    """An upstream's 400 for a prompt past its context, in Claude Code's words for compacting."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while await read_request(reader) is not None:
            body = json.dumps(
                {
                    "error": {
                        "code": 400,
                        "type": "exceed_context_size_error",
                        "message": "the request exceeds the available context size, try increasing it",
                    }
                }
            ).encode()
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n")
            writer.write(f"content-length: {len(body)}\r\n\r\n".encode() + body)
            await writer.drain()

    with raw_server(handler) as (upstream, _), run_proxy(upstream) as url:
        response = httpx.post(url + "/v1/messages", json=HELLO, timeout=10)
        assert response.status_code == 400
        assert response.json()["error"]["message"].startswith("prompt is too long")


def _counting(own_count: Any, status: str = "200 OK") -> Any:
    """An upstream without a tokenizer; its own count route answers ``own_count`` (None: 404 there too)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (raw := await read_request(reader)) is not None:
            if raw.startswith(b"POST /v1/messages/count_tokens ") and own_count is not None:
                body = json.dumps(own_count).encode()
                writer.write(f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n".encode())
                writer.write(b"content-length: %d\r\n\r\n" % len(body) + body)
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()

    return handler


@pytest.mark.parametrize(
    ("own_count", "status"),
    [({"input_tokens": 42}, 200), (None, 404), ({"input_tokens": -3}, 404), ({"input_tokens": "many"}, 404)],
)
def test_count_tokens_without_a_tokenizer_asks_the_upstreams_own_count(own_count: Any, status: int) -> None:
    with (
        raw_server(_counting(own_count)) as (upstream, _),
        run_proxy(upstream, upstream_kind="openai") as url,
    ):
        body = {"model": "gemma", "messages": HELLO["messages"]}
        response = httpx.post(url + "/v1/messages/count_tokens", json=body, timeout=10)
        assert response.status_code == status, response.text
        judged(response.content, body, status, response.headers, path="/v1/messages/count_tokens")
        if status == 200:
            assert response.json() == {"input_tokens": 42}
        else:
            assert response.json()["error"]["type"] == "not_found_error"


def test_count_tokens_passes_on_the_upstreams_refusal_of_the_request() -> None:
    # Found black-box: an image the bundled backend's model cannot read was its 400 on create, but a
    # 404 "cannot count tokens for the model" on count_tokens.
    # Hostile too: the upstream's words carry its key and a traceback, which never reach the client.
    words = "image input is not supported (key sk-upstream-123)\nTraceback (most recent call last):"
    refused = {"type": "error", "error": {"type": "invalid_request_error", "message": words}}
    with (
        raw_server(_counting(refused, "400 Bad Request")) as (upstream, _),
        run_proxy(upstream, upstream_kind="openai", upstream_api_key="sk-upstream-123") as url,
    ):
        body = {"model": "gemma", "messages": HELLO["messages"]}
        response = httpx.post(url + "/v1/messages/count_tokens", json=body, timeout=10)
    assert response.status_code == 400, response.text
    judged(response.content, body, 400, response.headers, path="/v1/messages/count_tokens")
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("image input is not supported")
    assert "sk-upstream-123" not in response.text
    assert "Traceback" not in response.text


def test_count_tokens_while_the_upstream_is_down_is_a_502_the_sdk_retries() -> None:
    # Nothing listens there: the upstream said nothing about its counting, so not the 404 of an upstream
    # that has no tokenizer, which the SDKs take as final.
    with run_proxy(f"http://127.0.0.1:{free_port()}", upstream_kind="openai") as url:
        body = {"model": "gemma", "messages": HELLO["messages"]}
        response = httpx.post(url + "/v1/messages/count_tokens", json=body, timeout=30)
        assert response.status_code == 502, response.text
        assert response.json()["type"] == "error"
        assert response.json()["error"]["type"] == "api_error"
        judged(response.content, body, 502, response.headers, path="/v1/messages/count_tokens")


def test_an_upstreams_error_beneath_the_messages_path_is_relayed_as_an_anthropic_error() -> None:
    """llama-server's 404 for ``/v1/messages/batches`` (its own words, b11434) was relayed with OpenAI's
    body, which the Anthropic SDK cannot read (found by black-box testing): now its status in
    Anthropic's shape, as every error there."""
    missing = {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
    with (
        raw_server(answering(json_answer(missing, "404 Not Found"))) as (upstream, _),
        run_proxy(upstream) as url,
    ):
        response = httpx.post(url + "/v1/messages/batches", json={"requests": []}, timeout=10)
        client = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0)
        with pytest.raises(anthropic.NotFoundError):
            client.messages.batches.list()
    assert response.status_code == 404
    assert response.json() == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "File Not Found"},
    }


def test_the_proxys_own_refusals_under_the_messages_path_are_anthropic_errors() -> None:
    # Off the route's own method, and on a path beneath it the proxy relays: an Anthropic client there
    # gets a body its SDK reads (they were OpenAI's).
    with raw_server(handle_chat) as (upstream, record), run_proxy(upstream, api_key="secret") as url:
        key = {"x-api-key": "secret"}
        for method, path, headers, status in [
            ("GET", "/v1/messages", key, 405),
            ("PUT", "/v1/messages", key, 405),
            ("GET", "/v1/messages", {}, 401),
            ("POST", "/v1/messages/batches", {}, 401),
            ("GET", "/v1/messages/count_tokens", key, 405),
        ]:
            response = httpx.request(method, url + path, headers=headers, timeout=10)
            assert response.status_code == status, (method, path, response.text)
            body = response.json()
            assert body["type"] == "error", (method, path, body)
            assert set(body["error"]) == {"type", "message"}, body
            if status == 405:
                assert response.headers["allow"] == "POST"
        client = anthropic.Anthropic(base_url=url, api_key="nope", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError):
            client.messages.batches.list()
        # Elsewhere the words stay OpenAI's.
        response = httpx.get(url + "/v1/chat/completions", headers={"authorization": "Bearer secret"})
        assert response.status_code == 405
        assert set(response.json()) == {"error"}
        assert record.requests == 0


def _llama_server_counting_slowly(record_order: list[str]) -> Any:
    """llama-server as its ``/props`` shows it, whose count of the prompt takes 0.3 s and whose answer
    starts at once."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (raw := await read_request(reader)) is not None:
            if raw.startswith(b"GET /props "):
                writer.write(json_answer({"default_generation_settings": {"n_ctx": 4096}}))
            elif raw.startswith(b"POST /v1/messages/count_tokens "):
                record_order.append("count asked")
                await asyncio.sleep(0.3)
                writer.write(json_answer({"input_tokens": 42}))
            elif raw.startswith(b"POST /v1/chat/completions "):
                record_order.append("answer asked")
                writer.write(_hello_stream(42))
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()

    return handler


def test_llama_servers_count_is_asked_beside_the_answer_from_the_first_stream() -> None:
    # Its /props tells a server that answers beside a stream. Before, such an upstream was not known so
    # until a client read its listing (Claude Code never does): each stream asked its count first and
    # waited 0.1 s at most, so a count of 0.3 s was given up and the stream opened with 0.
    order: list[str] = []
    with raw_server(_llama_server_counting_slowly(order)) as (upstream, _), run_proxy(upstream) as url:
        for _ in range(2):
            order.clear()
            events = message_events(post(url, {**HELLO, "stream": True}).content)
            assert events[-1]["type"] == "message_stop", events[-1]
            assert events[0]["message"]["usage"]["input_tokens"] == 42, events[0]
            assert sorted(order) == ["answer asked", "count asked"], order
