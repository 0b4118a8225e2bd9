"""openai-python, openai-node and the Vercel AI SDK, through the proxy, get the calls an upstream left as
text in ``content``, in every syntax of conformance/tool_formats/catalog.py (issue 34): as ``tool_calls``
finished ``tool_calls`` on chat, as ``function_call`` items on responses, with only the prose around them
left as text.

The upstream is scripted: it answers a request for model ``<syntax>`` with that syntax's sample
(tests/support/tool_syntax_samples.py) as ``content`` finished ``stop``, streamed in pieces of a few
characters (cut inside the markers, as a stream may be) or whole. Before the repair, every client got the
markup as the answer's text and no call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.clients.node import NodeClients
from tests.proxy.conftest import run_proxy
from tests.proxy.rawserver import (
    Record,
    chat_requests,
    chunk_payload,
    http_chunk,
    json_answer,
    raw_server,
    sse_head,
)
from tests.support.tool_syntax_samples import CALLS, SAMPLES, TOOLS, Sample

PROMPT = "What is the weather in Paris for two days, and the time in Tokyo?"
PIECE = 9
"""Characters per streamed piece: every marker longer than this is cut across events."""
BY_SYNTAX = {sample.syntax: sample for sample in SAMPLES}
IDS = [sample.syntax for sample in SAMPLES]


def _pieces(text: str) -> list[str]:
    return [text[start : start + PIECE] for start in range(0, len(text), PIECE)]


def _events(sample: Sample) -> list[dict[str, Any]]:
    """The sample as a stream: the role, then the text in pieces, the last one finished ``stop``."""
    events = [chunk_payload({"role": "assistant", "content": ""})]
    events += [chunk_payload({"content": piece}) for piece in _pieces(sample.text)]
    events[-1]["choices"][0]["finish_reason"] = "stop"
    return events


def _whole(sample: Sample) -> dict[str, Any]:
    """The sample as one chat completion."""
    message = {"role": "assistant", "content": sample.text}
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    head = {"id": "x", "object": "chat.completion", "created": 1, "model": sample.syntax}
    return {**head, "choices": [choice], "usage": usage}


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
    """Answers each chat request with the sample its model names, as text finished ``stop``."""
    async for body in chat_requests(reader, writer):
        sample = BY_SYNTAX[body["model"]]
        if not body.get("stream"):
            writer.write(json_answer(_whole(sample)))
            await writer.drain()
            continue
        data = b"".join(
            b"data: " + json.dumps(e, ensure_ascii=False).encode() + b"\n\n" for e in _events(sample)
        )
        writer.write(sse_head() + http_chunk(data + b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


@pytest.fixture(scope="module")
def proxy() -> Iterator[str]:
    """The proxy's URL, in front of the scripted upstream."""
    with raw_server(_upstream) as (upstream, _), run_proxy(upstream, upstream_kind="openai") as url:
        yield url


@pytest.fixture
def client(proxy: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proxy + "/v1", api_key="not-checked", max_retries=0, timeout=30) as made:
        yield made


def _chat_request(sample: Sample) -> dict[str, Any]:
    return {"model": sample.syntax, "messages": [{"role": "user", "content": PROMPT}], "tools": TOOLS}


def _check_ids(ids: list[str]) -> None:
    """Every call has an id of its own."""
    assert all(ids), ids
    assert len(set(ids)) == len(ids), ids


def _check_chat(choice: dict[str, Any], sample: Sample) -> None:
    """A chat choice (as JSON) holds the sample's calls, finished ``tool_calls``, and only its prose."""
    message = choice["message"]
    calls = message.get("tool_calls") or []
    got = [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in calls]
    assert got == CALLS, message
    assert choice["finish_reason"] == "tool_calls", choice
    assert all(call["type"] == "function" for call in calls), calls
    _check_ids([call["id"] for call in calls])
    assert (message.get("content") or "").strip() == sample.content, message


def _check_responses(response: dict[str, Any], streamed_text: str | None, sample: Sample) -> None:
    """A Response (as JSON) holds the sample's calls as ``function_call`` items and only its prose."""
    assert response["status"] == "completed", response
    output = response["output"]
    calls = [item for item in output if item["type"] == "function_call"]
    assert [(item["name"], json.loads(item["arguments"])) for item in calls] == CALLS, output
    _check_ids([item["call_id"] for item in calls])
    texts = [
        part["text"]
        for item in output
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    ]
    assert "".join(texts).strip() == sample.content, output
    if streamed_text is not None:
        assert streamed_text.strip() == sample.content, streamed_text


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_openai_python_chat_gets_the_calls(client: openai.OpenAI, sample: Sample) -> None:
    completion = client.chat.completions.create(**_chat_request(sample))
    _check_chat(completion.choices[0].model_dump(), sample)


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_openai_python_chat_stream_helper_gets_the_calls(client: openai.OpenAI, sample: Sample) -> None:
    done: list[tuple[str, dict[str, Any]]] = []
    text = ""
    with client.chat.completions.stream(**_chat_request(sample)) as stream:
        for event in stream:
            if event.type == "tool_calls.function.arguments.done":
                done.append((event.name, json.loads(event.arguments)))
            elif event.type == "content.delta":
                text += event.delta
        final = stream.get_final_completion()
    assert done == CALLS
    assert text.strip() == sample.content, text
    _check_chat(final.choices[0].model_dump(), sample)


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    """A chat tool in the Responses API's form."""
    return {"type": "function", **tool["function"]}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_openai_python_responses_gets_function_call_items(
    client: openai.OpenAI, sample: Sample, stream: bool
) -> None:
    tools: Any = [_function(tool) for tool in TOOLS]
    if not stream:
        response = client.responses.create(model=sample.syntax, input=PROMPT, tools=tools)
        _check_responses(response.model_dump(), None, sample)
        return
    events = list(client.responses.create(model=sample.syntax, input=PROMPT, tools=tools, stream=True))
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert events[-1].type == "response.completed", [event.type for event in events]
    _check_responses(events[-1].response.model_dump(), text, sample)


@pytest.fixture(scope="module")
def node_results(node_clients: NodeClients, proxy: str) -> dict[str, dict[str, Any]]:
    """What js/tool_syntaxes.mjs got for every sample, in one Node.js process: openai-node's chat stream
    helper and streamed responses, the AI SDK's streamText."""
    spec = {"baseURL": proxy + "/v1", "prompt": PROMPT, "tools": TOOLS, "models": IDS}
    got = node_clients.run("tool_syntaxes.mjs", spec)
    assert "error" not in got, got
    cases = got["cases"]
    assert [case["model"] for case in cases] == IDS, got
    return {case["model"]: case for case in cases}


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_openai_node_chat_stream_helper_gets_the_calls(
    node_results: dict[str, dict[str, Any]], sample: Sample
) -> None:
    helper = node_results[sample.syntax]["chat"]
    assert "error" not in helper, helper
    done = [(call["name"], json.loads(call["arguments"])) for call in helper["argumentsDone"]]
    assert done == CALLS, helper
    assert helper["text"].strip() == sample.content, helper
    _check_chat(helper["final"]["choices"][0], sample)


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_openai_node_responses_gets_function_call_items(
    node_results: dict[str, dict[str, Any]], sample: Sample
) -> None:
    got = node_results[sample.syntax]["responses"]
    assert "error" not in got, got
    assert got["types"][-1] == "response.completed", got["types"]
    _check_responses(got["response"], got["text"], sample)


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_the_ai_sdk_gets_the_calls(node_results: dict[str, dict[str, Any]], sample: Sample) -> None:
    got = node_results[sample.syntax]["aiSdk"]
    assert "error" not in got, got
    assert got["errors"] == [], got
    assert got["finishReason"] == "tool-calls", got
    calls = got["toolCalls"]
    assert not any(call["invalid"] for call in calls), calls
    assert [(call["toolName"], call["input"]) for call in calls] == CALLS, got
    assert got["text"].strip() == sample.content, got
