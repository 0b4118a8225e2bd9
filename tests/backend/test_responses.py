"""``POST /v1/responses`` on the bundled backend (issue 21, item 5) and through the proxy in front of it
(acceptance 1): openai-python's ``responses.create`` streamed and not, the ``responses.stream`` helper,
a function-tool round trip, the stored responses; every exchange judged by the Responses rules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from conformance.protocols.front_end import named_events
from tests.backend.fixtures import RecordingTransport, assert_conformant, sdk_client
from tests.proxy.conftest import run_proxy
from tests.support.responses_checks import check_events, judged

PROMPT = "Write one sentence about the sea."
SHORT: Any = {
    "format": {
        "type": "json_schema",
        "name": "capital",
        "schema": {
            "type": "object",
            "properties": {"answer": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["answer"],
            "additionalProperties": False,
        },
        "strict": True,
    }
}
"""A text format whose grammar ends the answer: the stream helper's ``get_final_response`` wants
``response.completed``, which a base model reaches only when something ends its text."""
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


@pytest.fixture(params=["backend", "proxy"])
def client(
    request: pytest.FixtureRequest, gemma_url: str, recorder: RecordingTransport, tmp_path: Path
) -> Iterator[Any]:
    """openai-python on the backend itself, or on the proxy (translating) in front of it."""
    if request.param == "backend":
        yield sdk_client(gemma_url, recorder)
        return
    store = str(tmp_path / "proxy-responses.sqlite3")
    with run_proxy(gemma_url, upstream_kind="openai", responses_store=store) as url:
        yield sdk_client(url, recorder)


def test_create_whole_and_streamed_and_the_stream_helper(client: Any, recorder: RecordingTransport) -> None:
    whole = client.responses.create(model="gemma", input=PROMPT, max_output_tokens=16)
    assert whole.id.startswith("resp_")
    assert whole.status in ("completed", "incomplete")
    assert whole.output_text
    assert whole.usage.input_tokens > 0
    assert whole.usage.output_tokens > 0
    events = list(client.responses.create(model="gemma", input=PROMPT, max_output_tokens=16, stream=True))
    assert events[0].type == "response.created"
    assert events[-1].type in ("response.completed", "response.incomplete")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text
    with client.responses.stream(model="gemma", input=PROMPT, text=SHORT, max_output_tokens=64) as stream:
        texts = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed"
    assert "".join(texts) == final.output_text
    assert json.loads(final.output_text)["answer"] in ("Paris", "Rome")
    assert_conformant(recorder)


def test_a_response_states_the_sampling_it_used(gemma_url: str, tmp_path: Path) -> None:
    """Open Responses requires the sampling as numbers, "the values that were used" (issue 38): the
    backend's own defaults where the client sent none (llama.cpp's 0.8 / 0.95), on it and through the
    proxy, which reads them from its ``/props`` at detection (it asked the API's 1.0 / 1.0 before, and
    the base model behind Codex CLI wrote longer at those); told the upstream is a plain OpenAI one
    (``--upstream-kind openai``), the proxy reads nothing and sends the API's, which it then states."""
    extra = {"presence_penalty": 0.5}  # (openai-python does not name it: Open Responses does)
    store = str(tmp_path / "proxy-responses.sqlite3")
    with (
        run_proxy(gemma_url, upstream_kind="auto", responses_store=store) as detected,
        run_proxy(gemma_url, upstream_kind="openai", responses_store=store) as told,
    ):
        for url, used in ((gemma_url, (0.8, 0.95)), (detected, (0.8, 0.95)), (told, (1.0, 1.0))):
            recorder = RecordingTransport()
            client = sdk_client(url, recorder)
            response = client.responses.create(
                model="m", input=PROMPT, max_output_tokens=16, extra_body=extra
            )
            assert (response.presence_penalty, response.frequency_penalty, response.top_logprobs) == (
                0.5,
                0.0,
                0,
            )
            assert (response.temperature, response.top_p) == used
            assert_conformant(recorder)


def test_logprobs_when_included(client: Any, recorder: RecordingTransport) -> None:
    asked = {"include": ["message.output_text.logprobs"], "top_logprobs": 2, "max_output_tokens": 16}
    whole = client.responses.create(model="gemma", input=PROMPT, **asked)
    part = whole.output[-1].content[0]
    assert len(part.logprobs) == whole.usage.output_tokens  # one entry a token
    for entry in part.logprobs:
        assert entry.logprob <= 0
        assert 1 <= len(entry.top_logprobs) <= 2
        assert entry.top_logprobs[0].logprob >= entry.logprob
    events = list(client.responses.create(model="gemma", input=PROMPT, stream=True, **asked))
    streamed = [entry for e in events if e.type == "response.output_text.delta" for entry in e.logprobs]
    final = events[-1].response.output[-1].content[0].logprobs
    assert [e.token for e in streamed] == [e.token for e in final]
    assert len(final) == events[-1].response.usage.output_tokens
    plain = client.responses.create(model="gemma", input=PROMPT, max_output_tokens=16)
    assert plain.output[-1].content[0].logprobs == []
    assert_conformant(recorder)


def test_max_output_tokens_reached_is_incomplete(client: Any, recorder: RecordingTransport) -> None:
    response = client.responses.create(
        model="gemma", input="Count from one to one hundred in words.", max_output_tokens=16
    )
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 16
    assert_conformant(recorder)


@pytest.mark.parametrize("stream", [False, True])
def test_a_stored_response_is_continued_retrieved_and_deleted(
    client: Any, recorder: RecordingTransport, stream: bool
) -> None:
    def create(**fields: Any) -> Any:
        if not stream:
            return client.responses.create(model="gemma", text=SHORT, max_output_tokens=64, **fields)
        with client.responses.stream(model="gemma", text=SHORT, max_output_tokens=64, **fields) as events:
            return events.get_final_response()

    first = create(input="My name is Ada.", instructions="Answer briefly.")
    second = create(input="What is my name?", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert second.instructions is None  # instructions do not carry over
    # The second answer was generated from the first turn too: its input and its answer came first.
    assert second.usage.input_tokens > first.usage.output_tokens + len("What is my name?") // 8
    listed = client.responses.input_items.list(second.id, order="asc")
    texts = [part.text for item in listed.data for part in item.content]
    assert texts == ["My name is Ada.", first.output_text, "What is my name?"]
    retrieved = client.responses.retrieve(second.id)  # a Response; the stream helper's is a ParsedResponse
    assert (retrieved.id, retrieved.output_text, retrieved.usage) == (
        second.id,
        second.output_text,
        second.usage,
    )
    client.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)
    with pytest.raises(openai.BadRequestError) as raised:
        create(input="And now?", previous_response_id=second.id)
    assert raised.value.body["code"] == "previous_response_not_found"
    assert raised.value.body["param"] == "previous_response_id"


@pytest.mark.parametrize("stream", [False, True])
def test_a_function_tool_round_trip(client: Any, recorder: RecordingTransport, stream: bool) -> None:
    """``function_call`` -> ``function_call_output`` -> the answer, the call forced by ``tool_choice``
    (a base model calls no tool of its own accord), the second turn sent as items and as a
    continuation of the first by ``previous_response_id``."""

    def create(**fields: Any) -> Any:
        if not stream:
            return client.responses.create(model="gemma", **fields)
        with client.responses.stream(model="gemma", **fields) as events:
            return events.get_final_response()

    first = create(
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=64,
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert [call.name for call in calls] == ["get_weather"], first.output
    assert isinstance(json.loads(calls[0].arguments)["city"], str)
    result = {"type": "function_call_output", "call_id": calls[0].call_id, "output": "18 C and sunny"}
    given = [item.model_dump(exclude_none=True) for item in first.output]
    answer: dict[str, Any] = {
        "tools": [WEATHER],
        "tool_choice": "none",
        "text": SHORT,
        "max_output_tokens": 64,
    }
    for second in (
        create(input=[*given, result], **answer),
        create(input=[result], previous_response_id=first.id, **answer),
    ):
        assert [item.type for item in second.output] == ["message"]
        assert second.output_text
    assert_conformant(recorder)


def test_store_false_is_not_kept(client: Any) -> None:
    response = client.responses.create(model="gemma", input=PROMPT, max_output_tokens=16, store=False)
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_input_tokens_are_counted_by_both(client: Any) -> None:
    """``POST /v1/responses/input_tokens``: the backend counts with its own template, the proxy in front of
    it (an OpenAI-compatible upstream) asks the backend's route; both agree."""
    first = client.responses.input_tokens.count(model="gemma", input=PROMPT)
    longer = client.responses.input_tokens.count(
        model="gemma", input=PROMPT, instructions="Answer in French."
    )
    assert first.object == "response.input_tokens"
    assert 0 < first.input_tokens < longer.input_tokens


def test_a_bad_request_is_a_400_that_names_the_parameter(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="gemma", input=PROMPT, tools=[{"type": "code_interpreter"}])
    assert raised.value.body["param"] is not None
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="gemma", input=PROMPT, max_output_tokens=16, temperature=5)
    assert raised.value.body["param"] == "temperature"


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"truncation": "middle"}, "truncation"), ({"metadata": [1]}, "metadata"), ({"store": "no"}, "store")],
)
def test_what_the_judge_refuses_is_refused_by_both(client: Any, extra: dict[str, Any], param: str) -> None:
    """The backend served these and echoed them into a Response the judge's Response schema refuses; it
    now reads a request as the proxy does (the judge's request schema), on both routes."""
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="gemma", input=PROMPT, max_output_tokens=16, extra_body=extra)
    assert raised.value.body["param"] == param


def test_a_refusal_names_the_responses_parameter(client: Any) -> None:
    """The limit is refused by the chat reading of the translated request (the backend's own, or the
    upstream's behind the proxy), which named ``max_tokens``; the client sent ``max_output_tokens``."""
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="gemma", input=PROMPT, max_output_tokens=100_000)
    assert raised.value.body["param"] == "max_output_tokens"
    assert "max_tokens" not in raised.value.body["message"].replace("max_output_tokens", "")


def test_the_websocket_mode_continues_a_store_false_response(gemma_url: str) -> None:
    """The WebSocket mode on the backend itself (issue 38): a turn, its ``store: false`` continuation on
    the same socket, and the same id unknown on another socket; the events judged as HTTP's are."""

    def turn(ws: Any, **fields: Any) -> list[dict[str, Any]]:
        ws.send(json.dumps({"type": "response.create", "model": "gemma", "store": False, **fields}))
        events = []
        while not events or events[-1]["type"] not in ("response.completed", "response.incomplete", "error"):
            events.append(json.loads(ws.recv(timeout=60)))
        return events

    socket = "ws" + gemma_url.removeprefix("http") + "/v1/responses"
    with connect(socket) as ws:
        first = turn(ws, input="My name is Ada.", max_output_tokens=16)
        second = turn(
            ws,
            input="What is my name?",
            max_output_tokens=16,
            previous_response_id=first[-1]["response"]["id"],
        )
    for events in (first, second):
        check_events(events)
        request = {"model": "gemma", "input": "x", "max_output_tokens": 16, "store": False, "stream": True}
        judged(named_events(events), request, 200, {"content-type": "text/event-stream"})
    # The second turn was generated from the first too: its prompt held the first turn's input and answer.
    assert second[-1]["response"]["usage"]["input_tokens"] > first[-1]["response"]["usage"]["input_tokens"]
    with connect(socket) as ws:
        (missing,) = turn(ws, input="And now?", previous_response_id=first[-1]["response"]["id"])
    assert missing["error"]["code"] == "previous_response_not_found"


def test_a_browser_page_cannot_make_the_backend_act(gemma_url: str) -> None:
    """A page of any origin may send a text/plain POST without a preflight, and open a WebSocket, which
    no same-origin rule covers: the backend has no CORS to allow one, so each is a 403 in its
    protocol's words before anything is read or generated (conformance/browser_origin.py)."""
    page = {"origin": "https://evil.example", "content-type": "text/plain"}
    messages = {"model": "gemma", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    asked = [
        ("/v1/chat/completions", {"model": "gemma", "messages": messages["messages"], "max_tokens": 4}),
        ("/v1/responses", {"model": "gemma", "input": "hi", "max_output_tokens": 4}),
        ("/v1/messages", messages),
        ("/v1/messages/count_tokens", messages),
    ]
    for path, body in asked:
        refused = httpx.post(gemma_url + path, content=json.dumps(body), headers=page, timeout=30)
        assert refused.status_code == 403, (path, refused.text)
        error = refused.json()["error"]
        assert error["type" if path.startswith("/v1/messages") else "code"] in (
            "permission_error",
            "origin_not_allowed",
        ), refused.text
    deleted = httpx.delete(gemma_url + "/v1/responses/resp_1", headers=page, timeout=30)
    assert deleted.json()["error"]["code"] == "origin_not_allowed"
    socket = "ws" + gemma_url.removeprefix("http") + "/v1/responses"
    with pytest.raises(InvalidStatus) as handshake:
        connect(socket, origin="https://evil.example")
    assert handshake.value.response.status_code == 403
    assert httpx.get(gemma_url + "/v1/models", headers=page, timeout=30).status_code == 200


def test_a_compaction_is_read_back_as_input(gemma_url: str) -> None:
    """``POST /v1/responses/compact`` on the backend: the model's summary in a compaction item, which a
    request then takes as input."""
    conversation = [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello Ada."},
        {"role": "user", "content": "Remember it."},
    ]
    compacted = httpx.post(
        gemma_url + "/v1/responses/compact",
        json={"model": "gemma", "input": conversation, "max_output_tokens": 32},
        timeout=120,
    )
    assert compacted.status_code == 200, compacted.text
    body = compacted.json()
    assert body["object"] == "response.compaction"
    assert [item["type"] for item in body["output"]] == ["message", "message", "compaction"]
    assert body["usage"]["output_tokens"] > 0
    answer = httpx.post(
        gemma_url + "/v1/responses",
        json={
            "model": "gemma",
            "input": [*body["output"], {"role": "user", "content": "My name?"}],
            "max_output_tokens": 16,
        },
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["input_tokens"] > body["usage"]["output_tokens"]
    missing = httpx.post(gemma_url + "/v1/responses/compact", json={"input": conversation}, timeout=30)
    assert missing.status_code == 400
    assert missing.json()["error"]["param"] == "model"


def test_truncation_auto_answers_a_conversation_past_the_context(client: Any) -> None:
    """On the backend itself and through the proxy in front of it: its oldest exchanges go; the default
    (``disabled``) is the overflow."""
    items: list[dict[str, Any]] = []
    for n in range(30):
        items.append({"role": "user", "content": f"Question {n}: " + "Tell me about the old town. " * 12})
        items.append({"role": "assistant", "content": f"Answer {n}: " + "It has a market square. " * 12})
    items.append({"role": "user", "content": "Which number was the last question?"})
    asked: Any = {"model": "gemma", "instructions": "Be brief.", "input": items, "max_output_tokens": 16}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(**asked)
    assert refused.value.code == "context_length_exceeded"
    response = client.responses.create(**asked, truncation="auto")
    assert response.status in ("completed", "incomplete")
    assert response.truncation == "auto"
    assert response.usage is not None
    assert 0 < response.usage.input_tokens < 2048
