"""A tool call the client receives is whole, whatever the upstream (issue 37, point 2).

llama-cpp-python finishes a named ``tool_choice`` call ``tool_calls`` whatever stopped it (Q84): with
``max_tokens`` 64 its JSON grammar's string ran on to the limit, the call came back with arguments
that are no JSON (``'{ "city":'``) and ``finish_reason: "tool_calls"``, and the usage said 71 output
tokens for a limit of 64. Through the proxy a call the limit cut is ``finish_reason: "length"`` (chat),
``status: "incomplete"`` with ``incomplete_details.reason: "max_output_tokens"`` and the call's item
``incomplete`` (Responses), ``stop_reason: "max_tokens"`` (Messages); the usage is within the limit
(Q85), whoever gave the limit (the client, or the operator's ``--default-max-tokens``); and a call that
is no JSON before the limit is no call at all: the answer fails as one the upstream could not make valid.

Each upstream here is a raw one, scripted as llama-cpp-python answers: one token a chunk, the call's
name in its first fragment, and the finish ``tool_calls``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from .conftest import run_proxy
from .rawserver import (
    Record,
    call_answer,
    chat_requests,
    chunk_payload,
    http_chunk,
    raw_server,
    sse_head,
)

LIMIT = 64
CUT = ["{", ' "', "city", '":', ' "'] + ["Par", "is"] * 29 + [" and"]
"""64 fragments, one token each: a call the limit cut inside its string."""
assert len(CUT) == LIMIT
CITY = "".join(CUT)

CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
MESSAGES_TOOLS = [{"name": "get_weather", "input_schema": {"type": "object"}}]


def _usage(completion: int) -> dict[str, int]:
    return {"prompt_tokens": 10, "completion_tokens": completion, "total_tokens": 10 + completion}


def _upstream(fragments: list[str], completion_tokens: int | None) -> Any:
    """A chat upstream that calls ``get_weather`` with ``fragments`` as its arguments and finishes
    ``tool_calls``, reporting ``completion_tokens`` (None: no usage, as llama-cpp-python's streams);
    streamed one fragment a chunk. Every other path (the tokenizers the proxy asks for) is a 404."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        async for request in chat_requests(reader, writer):
            record.requests += 1
            usage = None if completion_tokens is None else _usage(completion_tokens)
            if not request.get("stream"):
                function = {"name": "get_weather", "arguments": "".join(fragments)}
                writer.write(call_answer(function, usage=usage))
                await writer.drain()
                continue
            first = {"index": 0, "id": "call_1", "type": "function"}
            first["function"] = {"name": "get_weather", "arguments": ""}
            events = [chunk_payload({"role": "assistant", "tool_calls": [first]})]
            events += [
                chunk_payload({"tool_calls": [{"index": 0, "function": {"arguments": f}}]}) for f in fragments
            ]
            events.append(chunk_payload({}, "tool_calls"))
            if usage is not None:
                events.append({**chunk_payload({}), "choices": [], "usage": usage})
            data = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]
            writer.write(sse_head() + http_chunk(b"".join(data[:2])))
            await writer.drain()
            await asyncio.sleep(0.2)  # the rest in a read of its own: the stream is under way
            writer.write(http_chunk(b"".join(data[2:]) + b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()

    return handler


@contextlib.contextmanager
def _proxied(fragments: list[str], completion_tokens: int | None, **config: Any) -> Iterator[str]:
    with (
        raw_server(_upstream(fragments, completion_tokens)) as (upstream, _),
        run_proxy(upstream, upstream_kind="openai", **config) as url,
    ):
        yield url


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


def _chat(**extra: Any) -> dict[str, Any]:
    forced = {"type": "function", "function": {"name": "get_weather"}}
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    return {"model": "m", "messages": messages, "tools": CHAT_TOOLS, "tool_choice": forced, **extra}


def _responses(**extra: Any) -> dict[str, Any]:
    forced = {"type": "function", "name": "get_weather"}
    asked = "Weather in Paris?"
    return {"model": "m", "input": asked, "tools": RESPONSES_TOOLS, "tool_choice": forced, **extra}


def _messages(**extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": LIMIT,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": MESSAGES_TOOLS,
        "tool_choice": {"type": "tool", "name": "get_weather"},
        **extra,
    }


# -- a call the limit cut, the usage above the limit (71 of 64) -------------------------------------


@pytest.mark.slow
def test_a_cut_call_on_chat_finishes_length_with_its_arguments_and_usage_within_the_limit() -> None:
    with _proxied(CUT, 71) as url:
        client = _openai(url)
        whole = client.chat.completions.create(**_chat(max_tokens=LIMIT))
        streamed = list(
            client.chat.completions.create(
                **_chat(max_tokens=LIMIT, stream=True, stream_options={"include_usage": True})
            )
        )
    choice = whole.choices[0]
    assert choice.finish_reason == "length"
    calls = choice.message.tool_calls or []
    assert [c.function.arguments for c in calls] == [CITY]  # the partial arguments, kept as OpenAI does
    assert whole.usage is not None
    assert whole.usage.completion_tokens == LIMIT
    assert whole.usage.total_tokens == 10 + LIMIT
    finishes = [c.finish_reason for chunk in streamed for c in chunk.choices if c.finish_reason]
    assert finishes == ["length"]
    usage = streamed[-1].usage
    assert usage is not None
    assert usage.completion_tokens == LIMIT


@pytest.mark.slow
def test_a_cut_call_on_responses_is_incomplete_at_max_output_tokens_with_usage_within_it() -> None:
    with _proxied(CUT, 71) as url:
        client = _openai(url)
        whole = client.responses.create(**_responses(max_output_tokens=LIMIT))
        streamed = list(client.responses.create(**_responses(max_output_tokens=LIMIT, stream=True)))
    last = streamed[-1]
    assert last.type == "response.incomplete"
    for response in (whole, last.response):
        assert response.status == "incomplete"
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
        # The call's item is there with its partial arguments, and says it is not whole.
        (item,) = response.output
        assert (item.type, item.status, item.arguments) == ("function_call", "incomplete", CITY)
        assert response.usage is not None
        assert response.usage.output_tokens == LIMIT
    done = [e for e in streamed if e.type == "response.output_item.done"]
    assert [e.item.status for e in done] == ["incomplete"]
    assert not [e for e in streamed if e.type == "response.completed"]


@pytest.mark.slow
def test_a_cut_call_on_messages_stops_at_max_tokens_with_usage_within_them() -> None:
    """A call cut there is the Message's last block, as Anthropic keeps it (for the client to retry with a
    higher ``max_tokens``), its ``input`` the members that came whole (none here); a stream has sent its
    ``input_json_delta`` fragments, and ends ``stop_reason: "max_tokens"`` alike."""
    with _proxied(CUT, 71) as url:
        client = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0)
        whole = client.messages.create(**_messages())
        response = httpx.post(url + "/v1/messages", json=_messages(stream=True), timeout=10)
    assert whole.stop_reason == "max_tokens"
    assert [(block.type, getattr(block, "input", None)) for block in whole.content] == [("tool_use", {})]
    assert whole.usage.output_tokens == LIMIT
    assert response.status_code == 200
    events = _events(response.text)
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["delta"]["stop_reason"] == "max_tokens"
    assert delta["usage"]["output_tokens"] <= LIMIT


# -- the operator's limit -----------------------------------------------------------------------


@pytest.mark.slow
def test_a_call_cut_at_the_default_max_tokens_finishes_length_and_incomplete() -> None:
    """The client gives no limit; ``--default-max-tokens`` does, and cut the call (llama-cpp-python's
    stream: no usage, one token a chunk)."""
    with _proxied(CUT, None, default_max_tokens=LIMIT) as url:
        client = _openai(url)
        whole = client.chat.completions.create(**_chat())
        streamed = list(client.chat.completions.create(**_chat(stream=True)))
        response = client.responses.create(**_responses())
    assert whole.choices[0].finish_reason == "length"
    assert [c.finish_reason for chunk in streamed for c in chunk.choices if c.finish_reason] == ["length"]
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None
    assert response.usage.output_tokens <= LIMIT


# -- arguments that are no JSON before the limit: no cut, no call ---------------------------------

BROKEN = ['{ "city":', ' "Paris"', "}}"]
"""A call the upstream says it finished, 10 tokens into a limit of 64, whose arguments do not parse."""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", _chat(max_tokens=LIMIT)),
        ("/v1/responses", _responses(max_output_tokens=LIMIT)),
        ("/v1/messages", _messages()),
    ],
    ids=["chat", "responses", "messages"],
)
def test_arguments_that_are_no_json_before_the_limit_are_never_sent_as_a_whole_call(
    path: str, body: dict[str, Any]
) -> None:
    """Whole, a 502 in the protocol's words; streamed, the fragments went out as they came, and the
    stream ends in the protocol's error, never with ``tool_calls``, ``completed`` or ``tool_use``."""
    with _proxied(BROKEN, 10) as url:
        whole = httpx.post(url + path, json=body, timeout=10)
        streamed = httpx.post(url + path, json={**body, "stream": True}, timeout=10)
    assert whole.status_code == 502, whole.text
    assert "not one JSON object" in whole.text
    assert streamed.status_code == 200
    last = _events(streamed.text)[-1]
    if path == "/v1/responses":
        assert last["type"] == "response.failed"
        assert "not one JSON object" in last["response"]["error"]["message"]
    else:
        assert "not one JSON object" in last["error"]["message"]
    text = streamed.text.replace(" ", "")
    for whole_call in ('"finish_reason":"tool_calls"', '"response.completed"', '"stop_reason":"tool_use"'):
        assert whole_call not in text


@pytest.mark.slow
def test_a_whole_call_before_the_limit_is_the_call_the_upstream_made() -> None:
    """The counterpart: arguments that parse go out as the upstream's call, ``tool_calls``."""
    with _proxied(['{"city":', ' "Paris"}'], 10) as url:
        whole = _openai(url).chat.completions.create(**_chat(max_tokens=LIMIT))
    assert whole.choices[0].finish_reason == "tool_calls"
    assert [c.function.arguments for c in whole.choices[0].message.tool_calls or []] == ['{"city": "Paris"}']


@pytest.mark.slow
def test_a_call_cut_in_fragments_of_several_tokens_without_usage_finishes_length() -> None:
    """An upstream that sends several tokens a fragment and no usage: the call the limit cut came in 8
    fragments, fewer than the limit's 64 tokens, and was judged broken before the limit (a 502). A
    fragment count under the limit proves nothing, so the cut call finishes as cut."""
    fragments = ["".join(CUT[i : i + 8]) for i in range(0, LIMIT, 8)]
    with _proxied(fragments, None) as url:
        client = _openai(url)
        streamed = list(client.chat.completions.create(**_chat(max_tokens=LIMIT, stream=True)))
        events = list(client.responses.create(**_responses(max_output_tokens=LIMIT, stream=True)))
    assert [c.finish_reason for chunk in streamed for c in chunk.choices if c.finish_reason] == ["length"]
    calls = [call for chunk in streamed for c in chunk.choices for call in c.delta.tool_calls or []]
    assert "".join(call.function.arguments or "" for call in calls) == CITY
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details is not None
    assert last.response.incomplete_details.reason == "max_output_tokens"
