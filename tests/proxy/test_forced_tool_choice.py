"""A forced ``tool_choice`` is a call or an honest error, whatever the upstream (issue 37, point 3; Q86).

An upstream that ignores ``required`` (or a named function) answered text with ``finish_reason:
"stop"``, and the proxy passed it on: chat ``stop``, Responses ``completed``, Messages ``end_turn``.
Each upstream here is a raw one, scripted to honour some ways of asking for a call and answer text to
the others: ``required``, a named function, JSON output (a ``response_format`` JSON Schema whose answer
is ``{"tool_call": ...}``, proxy/adapters/tool_emulation.py). It records what it was asked, so the tests
also see that what was learned sends a later request straight to the way that works.
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

from proxy.sources.forced_call import HELD_EVENTS

from .conftest import run_proxy
from .rawserver import Record, chunk_payload, http_chunk, json_answer, raw_server, read_request, sse_head

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
]
TWO_TOOLS = [
    *TOOLS,
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
TEXT = ["I think", " the weather", " is nice."]
ARGUMENTS = '{"city": "Paris"}'


def _way(body: dict[str, Any]) -> str:
    """How the request asks for a call: ``json_output``, ``named``, ``required``, or ``auto``."""
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema" and "tools" not in body:
        return "json_output"
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return "named"
    return "required" if choice == "required" else "auto"


def _events(body: dict[str, Any], honours: set[str], finish: str, preamble: int = 0) -> list[dict[str, Any]]:
    """The answer to ``body``: a call where its way is honoured (after ``preamble`` events of text
    under ``required``), else text."""
    way = _way(body)
    if way == "required" and preamble:
        text = [chunk_payload({"content": "so "}) for _ in range(preamble)]
        return text + _events(body, honours | {"required"}, finish)
    if way == "json_output" and way in honours:
        envelope = {"tool_call": {"name": "get_weather", "arguments": json.loads(ARGUMENTS)}}
        text = json.dumps(envelope)
        return [
            chunk_payload({"role": "assistant", "content": text[:10]}),
            chunk_payload({"content": text[10:]}, "stop"),
        ]
    if way in honours:
        first = {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        }
        rest = {"index": 0, "function": {"arguments": ARGUMENTS}}
        return [
            chunk_payload({"role": "assistant", "tool_calls": [first]}),
            chunk_payload({"tool_calls": [rest]}, "tool_calls"),
        ]
    events = [chunk_payload({"role": "assistant", "content": TEXT[0]})]
    events += [chunk_payload({"content": piece}) for piece in TEXT[1:]]
    events[-1]["choices"][0]["finish_reason"] = finish
    return events


def _whole(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The events as one chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish = None
    for event in events:
        choice = event["choices"][0]
        delta = choice["delta"]
        if "content" in delta:
            message["content"] = (message["content"] or "") + delta["content"]
        for call in delta.get("tool_calls") or ():
            if "id" in call:
                message["tool_calls"] = [
                    {"id": call["id"], "type": "function", "function": dict(call["function"])}
                ]
            else:
                message["tool_calls"][0]["function"]["arguments"] += call["function"]["arguments"]
        finish = choice["finish_reason"] or finish
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [choice],
        "usage": usage,
    }


def _upstream(honours: set[str], asked: list[dict[str, Any]], finish: str = "stop", preamble: int = 0) -> Any:
    """A chat upstream that calls ``get_weather`` when asked a way it ``honours``, else answers text
    finished ``finish``; each request's body goes into ``asked``. Every other path is a 404."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        while (raw := await read_request(reader)) is not None:
            head, payload = raw.split(b"\r\n\r\n", 1)
            if not head.startswith(b"POST /v1/chat/completions "):
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                continue
            body = json.loads(payload)
            asked.append(body)
            events = _events(body, honours, finish, preamble)
            if not body.get("stream"):
                writer.write(json_answer(_whole(events)))
                await writer.drain()
                continue
            data = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]
            writer.write(sse_head())
            if preamble:
                writer.write(http_chunk(b"".join(data[:preamble])))
                await writer.drain()
                await asyncio.sleep(0.2)  # the rest in a read of its own: the text came first
            writer.write(http_chunk(b"".join(data[preamble:]) + b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()

    return handler


@contextlib.contextmanager
def _proxied(
    honours: set[str], finish: str = "stop", preamble: int = 0
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    asked: list[dict[str, Any]] = []
    with (
        raw_server(_upstream(honours, asked, finish, preamble)) as (upstream, _),
        run_proxy(upstream, upstream_kind="openai") as url,
    ):
        yield url, asked


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


def _chat(**extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    return {"model": "m", "messages": messages, "tools": TOOLS, "tool_choice": "required", **extra}


def _called(completion: Any) -> list[tuple[str, str]]:
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert not choice.message.content
    return [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]


def _streamed(chunks: list[Any]) -> tuple[str, list[tuple[str, str]], list[str]]:
    """(the content, the calls (name, arguments), the finish reasons) of a chat stream."""
    content = ""
    calls: dict[int, list[str]] = {}
    finishes = []
    for chunk in chunks:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or ():
                named = calls.setdefault(call.index, ["", ""])
                named[0] += (call.function and call.function.name) or ""
                named[1] += (call.function and call.function.arguments) or ""
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    return content, [(name, arguments) for name, arguments in calls.values()], finishes


# -- an upstream that ignores ``required``, honours a named function -------------------------------


@pytest.mark.slow
def test_an_ignored_required_is_asked_again_named_and_later_requests_go_straight_there() -> None:
    with _proxied({"named"}) as (url, asked):
        client = _openai(url)
        first = client.chat.completions.create(**_chat())
        assert [_way(body) for body in asked] == ["required", "named"]
        streamed = list(client.chat.completions.create(**_chat(stream=True)))
        assert [_way(body) for body in asked[2:]] == ["named"]  # learned: straight to the named choice
    assert _called(first) == [("get_weather", ARGUMENTS)]
    assert _streamed(streamed) == ("", [("get_weather", ARGUMENTS)], ["tool_calls"])


@pytest.mark.slow
def test_an_ignored_required_in_a_stream_sends_no_text_before_the_call() -> None:
    """The first request streams: the text answer is held and never sent, the named one goes out."""
    with _proxied({"named"}) as (url, asked):
        streamed = list(_openai(url).chat.completions.create(**_chat(stream=True)))
    assert [_way(body) for body in asked] == ["required", "named"]
    assert _streamed(streamed) == ("", [("get_weather", ARGUMENTS)], ["tool_calls"])


# -- an upstream that ignores any choice but enforces a JSON Schema --------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_ignored_named_choice_is_served_as_json_output(stream: bool) -> None:
    with _proxied({"json_output"}) as (url, asked):
        client = _openai(url)
        body = _chat(tools=TWO_TOOLS, tool_choice=NAMED, stream=stream)
        answer = client.chat.completions.create(**body)
        again = client.chat.completions.create(**{**body, "stream": False})
    assert [_way(sent) for sent in asked] == ["named", "json_output", "json_output"]
    # Asked as JSON output, the named function alone is offered.
    assert "get_time" not in asked[1]["messages"][0]["content"]
    calls = _streamed(list(answer))[1] if stream else _called(answer)
    assert calls == [("get_weather", ARGUMENTS)]
    assert _called(again) == [("get_weather", ARGUMENTS)]


@pytest.mark.slow
def test_an_ignored_required_with_several_tools_is_served_as_json_output_on_responses() -> None:
    tools = [
        {"type": "function", "name": t["function"]["name"], "parameters": {"type": "object"}}
        for t in TWO_TOOLS
    ]
    body = {"model": "m", "input": "Weather in Paris?", "tools": tools, "tool_choice": "required"}
    with _proxied({"json_output"}) as (url, asked):
        client = _openai(url)
        whole = client.responses.create(**body)
        events = list(client.responses.create(**body, stream=True))
    assert [_way(sent) for sent in asked] == ["required", "json_output", "json_output"]
    last = events[-1]
    assert last.type == "response.completed"
    for response in (whole, last.response):
        assert response.status == "completed"
        (item,) = response.output
        assert (item.type, item.name, item.arguments) == ("function_call", "get_weather", ARGUMENTS)
    assert not [e for e in events if e.type == "response.output_text.delta"]


# -- an upstream that honours no way: an honest error ----------------------------------------------


@pytest.mark.slow
def test_a_forced_call_no_way_gives_is_a_502_then_a_400_before_anything_is_sent() -> None:
    with _proxied(set()) as (url, asked):
        client = _openai(url)
        with pytest.raises(openai.InternalServerError) as failed:
            client.chat.completions.create(**_chat())
        assert [_way(sent) for sent in asked] == ["required", "named", "json_output"]
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(**_chat(stream=True))
        assert len(asked) == 3  # learned: nothing more is sent
    assert failed.value.status_code == 502
    assert failed.value.code == "tool_choice_not_honoured"
    assert "did not honour tool_choice 'required'" in failed.value.message
    assert refused.value.code == "unsupported_parameter"
    assert refused.value.param == "tool_choice"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", _chat(tool_choice=NAMED)),
        (
            "/v1/responses",
            {
                "model": "m",
                "input": "Weather in Paris?",
                "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
                "tool_choice": {"type": "function", "name": "get_weather"},
            },
        ),
        (
            "/v1/messages",
            {
                "model": "m",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": "Weather in Paris?"}],
                "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
                "tool_choice": {"type": "tool", "name": "get_weather"},
            },
        ),
    ],
    ids=["chat", "responses", "messages"],
)
def test_a_streamed_forced_call_no_way_gives_sends_no_text_and_fails_in_the_protocols_words(
    path: str, body: dict[str, Any]
) -> None:
    with _proxied(set()) as (url, _):
        streamed = httpx.post(url + path, json={**body, "stream": True}, timeout=10)
    assert streamed.status_code == 502, streamed.text
    error = streamed.json()["error"]
    assert "did not honour tool_choice a named function" in error["message"]
    assert TEXT[1] not in streamed.text
    if path == "/v1/messages":
        assert streamed.json()["type"] == "error"


@pytest.mark.slow
def test_messages_tool_choice_any_ignored_is_a_tool_use_by_the_named_function() -> None:
    body = {
        "model": "m",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any"},
    }
    with _proxied({"named"}) as (url, asked):
        message = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0).messages.create(**body)
    assert [_way(sent) for sent in asked] == ["required", "named"]
    assert message.stop_reason == "tool_use"
    assert [(block.type, getattr(block, "input", None)) for block in message.content] == [
        ("tool_use", {"city": "Paris"})
    ]


# -- a text answer cut by the limit teaches nothing ------------------------------------------------


@pytest.mark.slow
def test_text_cut_by_the_limit_before_any_call_goes_out_as_cut_and_is_not_learned() -> None:
    with _proxied({"named"}, finish="length") as (url, asked):
        answer = _openai(url).chat.completions.create(**_chat(max_tokens=3))
        assert [_way(sent) for sent in asked] == ["required"]
    assert answer.choices[0].finish_reason == "length"


# -- the held text is bounded ---------------------------------------------------------------------


@pytest.mark.slow
def test_text_before_a_call_is_held_up_to_the_bound_then_judged_as_no_call() -> None:
    """A few words before the call (llama-server's ``required`` grammar allows them) are held and the
    call goes out; past ``HELD_EVENTS`` the answer is judged as one without a call, and asked again."""
    with _proxied({"named"}, preamble=3) as (url, asked):
        content, calls, _ = _streamed(list(_openai(url).chat.completions.create(**_chat(stream=True))))
        assert [_way(sent) for sent in asked] == ["required"]
    assert (content, calls) == ("so so so ", [("get_weather", ARGUMENTS)])
    with _proxied({"named"}, preamble=HELD_EVENTS + 10) as (url, asked):
        content, calls, _ = _streamed(list(_openai(url).chat.completions.create(**_chat(stream=True))))
        assert [_way(sent) for sent in asked] == ["required", "named"]
    assert (content, calls) == ("", [("get_weather", ARGUMENTS)])
