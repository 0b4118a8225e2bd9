"""``--responses native|auto``: an upstream's own /v1/responses, normalized as llama-server's needed
(events without ``sequence_number``/``output_index``/``content_index``, the model named by its path,
``completed`` where ``max_output_tokens`` cut the answer: docs/responses.md, `native`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from conformance.replay import create_replay_app
from conformance.transcript import load_transcript
from tests.support.responses_checks import check_events, check_response, judged, sse_events
from tests.support.servers import run_asgi

from .conftest import run_proxy
from .rawserver import Record, http_chunk, json_answer, raw_server, read_request, sse_head

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
        if b'"stream": true' not in raw and b'"stream":true' not in raw:
            body = json.dumps(_upstream_events()[-1]["response"]).encode()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
            writer.write(f"content-length: {len(body)}\r\n\r\n".encode() + body)
            continue
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in _upstream_events())
        writer.write(sse_head() + http_chunk(data) + b"0\r\n\r\n")
        await writer.drain()


def test_a_native_body_is_normalized() -> None:
    with raw_server(_handler) as (upstream, _), run_proxy(upstream, responses="native") as url:
        request = {"model": "/models/gemma.gguf", "input": "hi", "max_output_tokens": 16}
        response = httpx.post(url + "/v1/responses", json=request, timeout=10)
        assert response.status_code == 200, response.text
        judged(response.content, request, response.status_code, response.headers)
        body = response.json()
        check_response(body)
        assert body["status"] == "incomplete"
        assert body["model"] == "gemma"
        assert body["id"] != "resp_x"


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


KEY = "sk-upstream-secret-0123456789"


async def _echoes_its_key(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """An upstream that repeats the key it was sent, in an error and in a stream's text."""
    while (raw := await read_request(reader)) is not None:
        if raw.endswith(b"{}"):
            body = json.dumps({"error": {"message": f"bad key {KEY}", "type": "invalid_request_error"}})
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n")
            writer.write(f"content-length: {len(body)}\r\n\r\n".encode() + body.encode())
            continue
        events = _upstream_events()
        events[3]["delta"] = f"the key is {KEY}"
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        writer.write(sse_head() + http_chunk(data) + b"0\r\n\r\n")
        await writer.drain()


def test_the_upstream_key_never_reaches_the_client() -> None:
    with (
        raw_server(_echoes_its_key) as (upstream, _),
        run_proxy(upstream, responses="native", upstream_api_key=KEY) as url,
    ):
        refused = httpx.post(url + "/v1/responses", content=b"{}", timeout=10)
        assert refused.status_code == 400
        streamed = httpx.post(url + "/v1/responses", json={"input": "hi", "stream": True}, timeout=10)
        assert streamed.status_code == 200
        for response in (refused, streamed):
            assert KEY not in response.text
            assert "<redacted>" in response.text or "REDACTED" in response.text.upper()


async def _cut_after_a_delta(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record
) -> None:
    while (raw := await read_request(reader)) is not None:
        if raw.endswith(b"{}"):
            writer.write(
                b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
            )
            continue
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in _upstream_events()[:4])
        writer.write(sse_head() + http_chunk(data))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.transport.abort()
        return


def test_a_native_stream_cut_short_ends_with_response_failed() -> None:
    with raw_server(_cut_after_a_delta) as (upstream, _), run_proxy(upstream, responses="native") as url:
        request = {"input": "hi", "stream": True}
        response = httpx.post(url + "/v1/responses", json=request, timeout=10)
        assert response.status_code == 200
        judged(response.content, request, response.status_code, response.headers)
        events = sse_events(response.content)
        check_events(events)
        assert events[-1]["type"] == "response.failed"
        failed = events[-1]["response"]
        assert failed["error"]["code"] == "server_error"
        assert failed["output"][0]["status"] == "incomplete"
        assert failed["output"][0]["content"][0]["text"] == "Hi"


async def _events_then_not_json(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record
) -> None:
    """The first events and a block that is not JSON, in one write: one read of the proxy's."""
    await read_request(reader)
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in _upstream_events()[:4])
    writer.write(sse_head() + http_chunk(data + b"data: {not json\n\n") + b"0\r\n\r\n")
    await writer.drain()


def test_events_read_with_a_block_that_is_not_json_are_sent_before_response_failed() -> None:
    """The events made from the same read as the bad block are numbered already: sent, not lost (a
    gap in ``sequence_number``, and ``response.failed`` ending a message the client never saw begin)."""
    with raw_server(_events_then_not_json) as (upstream, _), run_proxy(upstream, responses="native") as url:
        request = {"input": "hi", "stream": True, "store": False}
        response = httpx.post(url + "/v1/responses", json=request, timeout=10)
        judged(response.content, request, response.status_code, response.headers)
        events = sse_events(response.content)
        check_events(events)
        assert (
            events[-1]["response"]["error"]["message"]
            == "the upstream server sent an event that is not valid JSON"
        )
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hi"


async def _chat_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """An upstream without /v1/responses: a whole chat completion for every chat request."""
    while (raw := await read_request(reader)) is not None:
        if not raw.startswith(b"POST /v1/chat/completions"):
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            continue
        record.requests += 1
        message = {"role": "assistant", "content": "Hi from chat"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        usage = {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
        answer = {"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
        writer.write(json_answer({**answer, "usage": usage}))
        await writer.drain()


def test_with_config_each_upstream_serves_the_route_as_its_table_says(tmp_path: Path) -> None:
    """One request path whatever the configuration: with ``--config``, an upstream whose table says
    ``responses = "native"`` gets the Responses API on its own endpoint, normalized, and one that says
    nothing (``--responses translate``) gets it as chat."""
    with raw_server(_handler) as (native, native_record), raw_server(_chat_only) as (chat, chat_record):
        path = tmp_path / "upstreams.toml"
        path.write_text(
            f'[[upstream]]\nurl = "{native}"\nmodels = ["native-model"]\nresponses = "native"\n\n'
            f'[[upstream]]\nurl = "{chat}"\nmodels = ["chat-model"]\n'
        )
        with run_proxy(native, config_file=str(path)) as url:
            streamed = {"model": "native-model", "input": "hi", "stream": True, "max_output_tokens": 16}
            response = httpx.post(url + "/v1/responses", json=streamed, timeout=10)
            assert response.status_code == 200, response.text
            events = sse_events(response.content)
            check_events(events)
            assert events[-1]["type"] == "response.incomplete"  # normalized: the limit was used up
            assert native_record.requests == 1
            translated = {"model": "chat-model", "input": "hi"}
            response = httpx.post(url + "/v1/responses", json=translated, timeout=10)
            assert response.status_code == 200, response.text
            check_response(response.json())
            assert response.json()["output"][0]["content"][0]["text"] == "Hi from chat"
            assert chat_record.requests == 1
            assert native_record.requests == 1


def _call_events() -> list[dict[str, Any]]:
    """A message, then a function call, as llama-server streams them."""
    opened = {"type": "function_call", "id": "fc_1", "name": "f", "call_id": "c1", "status": "in_progress"}
    closed = {**opened, "arguments": "{}", "status": "completed"}
    message = _upstream_events()[1:7]
    call = [
        {"type": "response.output_item.added", "item": opened},
        {"type": "response.output_item.done", "item": closed},
    ]
    done = [e["item"] for e in message + call if e["type"] == "response.output_item.done"]
    final = {**_RESPONSE, "status": "completed", "output": json.loads(json.dumps(done))}
    return [_upstream_events()[0], *message, *call, {"type": "response.completed", "response": final}]


@pytest.mark.parametrize(
    ("events", "phase"), [(_upstream_events, "final_answer"), (_call_events, "commentary")]
)
def test_a_native_message_gets_its_phase_when_what_follows_it_tells(events: Any, phase: str) -> None:
    """Open Responses' ``phase``, which llama-server's own route leaves out: a message's
    ``output_item.done`` waits for the next event (a call opening: ``commentary``), the sequence
    numbers still in order; the final Response and a whole answer say the same."""
    from conformance.protocols.responses.native import NativeEvents, normalize_response

    normalizer = NativeEvents({"model": "m", "input": "hi"}, None)
    sent = [out for event in events() for out in normalizer.feed(event)]
    assert [e["sequence_number"] for e in sent] == list(range(len(sent)))
    assert len(sent) == len(events())
    done = [
        e["item"]["phase"]
        for e in sent
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "message"
    ]
    assert done == [phase]
    final = [i["phase"] for i in sent[-1]["response"]["output"] if i["type"] == "message"]
    assert final == [phase]
    # The order the upstream sent them in: the message's done before the call opens.
    assert [(e["type"], e.get("item", {}).get("id")) for e in sent] == [
        (e["type"], e.get("item", {}).get("id")) for e in events()
    ]
    whole = normalize_response(events()[-1]["response"], {"input": "hi"}, response_id="resp_1", model=None)
    assert [i.get("phase") for i in whole["output"] if i["type"] == "message"] == [phase]


def test_a_held_message_is_sent_before_the_failure_of_a_stream_cut_after_it() -> None:
    from conformance.protocols.responses.native import NativeEvents

    normalizer = NativeEvents({"model": "m", "input": "hi"}, None)
    sent = [out for event in _upstream_events()[:-1] for out in normalizer.feed(event)]
    assert sent[-1]["type"] == "response.content_part.done"  # the message's done is held
    ended = normalizer.fail(None)
    assert [e["type"] for e in ended] == ["response.output_item.done", "response.failed"]
    assert ended[0]["item"]["phase"] == "final_answer"
    assert [e["sequence_number"] for e in sent + ended] == list(range(len(sent) + len(ended)))
    assert [i["id"] for i in ended[-1]["response"]["output"]] == ["msg_1"]


def test_a_message_done_after_the_call_opened_is_commentary_at_once() -> None:
    """An upstream that opens the call before it ends the message: the item after the message is known,
    and the stream says what the final Response says."""
    from conformance.protocols.responses.native import NativeEvents

    events = _call_events()
    message_done = events[6]
    reordered = [*events[:6], events[7], message_done, *events[8:]]
    normalizer = NativeEvents({"model": "m", "input": "hi"}, None)
    sent = [out for event in reordered for out in normalizer.feed(event)]
    assert [(e["type"], e.get("item", {}).get("id")) for e in sent] == [
        (e["type"], e.get("item", {}).get("id")) for e in reordered
    ]
    [done] = [e for e in sent if e["type"] == "response.output_item.done" and e["item"]["type"] == "message"]
    assert done["item"]["phase"] == "commentary"
    assert [i.get("phase") for i in sent[-1]["response"]["output"]] == ["commentary", None]


@pytest.mark.parametrize("item", [{"type": "message"}, {"type": "function_call"}, {}])
def test_an_item_done_that_was_never_added_gets_an_id_and_no_failure(item: dict[str, Any]) -> None:
    from conformance.protocols.responses.native import NativeEvents

    normalizer = NativeEvents({"model": "m", "input": "hi"}, None)
    sent = normalizer.feed({"type": "response.output_item.done", "item": dict(item)})
    sent += normalizer.feed(_upstream_events()[-1])
    [done] = [e for e in sent if e["type"] == "response.output_item.done"]
    assert done["item"]["id"]
    assert [e["sequence_number"] for e in sent] == list(range(len(sent)))
