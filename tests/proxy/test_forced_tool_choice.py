"""A forced ``tool_choice`` is a call or an honest error, whatever the upstream (issue 37, point 3; Q86).

An upstream that ignores ``required`` (or a named function) answered text with ``finish_reason:
"stop"``, and the proxy passed it on: chat ``stop``, Responses ``completed``, Messages ``end_turn``.
Each upstream here is a raw one (forced_upstream.py), scripted to honour some ways of asking for a call
and answer text to the others. It records what it was asked, so the tests also see that what was
learned sends a later request straight to the way that works.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from proxy.sources.forced_call import HELD_CHARS, HELD_EVENTS

from .forced_upstream import ARGUMENTS, TEXT, proxied, way

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
]
TWO_TOOLS = [
    *TOOLS,
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


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
    with proxied({"named"}) as (url, asked):
        client = _openai(url)
        first = client.chat.completions.create(**_chat())
        assert [way(body) for body in asked] == ["required", "named"]
        streamed = list(client.chat.completions.create(**_chat(stream=True)))
        assert [way(body) for body in asked[2:]] == ["named"]  # learned: straight to the named choice
    assert _called(first) == [("get_weather", ARGUMENTS)]
    assert _streamed(streamed) == ("", [("get_weather", ARGUMENTS)], ["tool_calls"])


@pytest.mark.slow
def test_an_ignored_required_in_a_stream_sends_no_text_before_the_call() -> None:
    """The first request streams: the text answer is held and never sent, the named one goes out."""
    with proxied({"named"}) as (url, asked):
        streamed = list(_openai(url).chat.completions.create(**_chat(stream=True)))
    assert [way(body) for body in asked] == ["required", "named"]
    assert _streamed(streamed) == ("", [("get_weather", ARGUMENTS)], ["tool_calls"])


# -- an upstream that ignores any choice but enforces a JSON Schema --------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_ignored_named_choice_is_served_as_json_output(stream: bool) -> None:
    with proxied({"json_output"}) as (url, asked):
        client = _openai(url)
        body = _chat(tools=TWO_TOOLS, tool_choice=NAMED, stream=stream)
        answer = client.chat.completions.create(**body)
        again = client.chat.completions.create(**{**body, "stream": False})
    assert [way(sent) for sent in asked] == ["named", "json_output", "json_output"]
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
    with proxied({"json_output"}) as (url, asked):
        client = _openai(url)
        whole = client.responses.create(**body)
        events = list(client.responses.create(**body, stream=True))
    assert [way(sent) for sent in asked] == ["required", "json_output", "json_output"]
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
    with proxied(set()) as (url, asked):
        client = _openai(url)
        with pytest.raises(openai.InternalServerError) as failed:
            client.chat.completions.create(**_chat())
        assert [way(sent) for sent in asked] == ["required", "named", "json_output"]
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(**_chat(stream=True))
        assert len(asked) == 3  # learned: nothing more is sent
    assert failed.value.status_code == 502
    assert failed.value.code == "tool_choice_not_honoured"
    assert "did not honour tool_choice 'required'" in failed.value.message
    assert refused.value.code == "unsupported_parameter"
    assert refused.value.param == "tool_choice"


@pytest.mark.slow
def test_a_way_the_upstream_refuses_counts_as_failed_not_as_the_clients_error() -> None:
    """A server without ``response_format`` refuses JSON output with a 400: the client, who sent no
    ``response_format``, gets the 502 that no way gave a call, and the next request the 400 before
    anything is sent."""
    with proxied(set(), refuses=frozenset({"json_output"})) as (url, asked):
        client = _openai(url)
        with pytest.raises(openai.InternalServerError) as failed:
            client.chat.completions.create(**_chat(tool_choice=NAMED))
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(**_chat(tool_choice=NAMED))
    assert [way(sent) for sent in asked] == ["named", "json_output"]
    assert failed.value.code == "tool_choice_not_honoured"
    assert (refused.value.code, refused.value.param) == ("unsupported_parameter", "tool_choice")


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
    with proxied(set()) as (url, _):
        streamed = httpx.post(url + path, json={**body, "stream": True}, timeout=10)
    assert streamed.status_code == 502, streamed.text
    error = streamed.json()["error"]
    assert "did not honour tool_choice naming a function" in error["message"]
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
    with proxied({"named"}) as (url, asked):
        message = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0).messages.create(**body)
    assert [way(sent) for sent in asked] == ["required", "named"]
    assert message.stop_reason == "tool_use"
    assert [(block.type, getattr(block, "input", None)) for block in message.content] == [
        ("tool_use", json.loads(ARGUMENTS))
    ]
    # The SDK's ``_request_id`` reads Anthropic's ``request-id`` header (None before: found by black-box
    # testing).
    assert message._request_id is not None
    assert message._request_id.startswith("req_")


# -- a text answer cut by the limit teaches nothing ------------------------------------------------


@pytest.mark.slow
def test_text_cut_by_the_limit_before_any_call_is_asked_again_the_next_way_and_not_learned() -> None:
    """llama-server's grammar for ``required`` lets text come first (Q83): Gemma 3 270M wrote text to the
    limit, which went out as text under a forced choice. The next way may call within the limit."""
    with proxied({"named"}, finish="length") as (url, asked):
        client = _openai(url)
        answer = client.chat.completions.create(**_chat(max_tokens=3))
        assert [way(sent) for sent in asked] == ["required", "named"]
        client.chat.completions.create(**_chat(max_tokens=3))
        assert [way(sent) for sent in asked][2:] == ["required", "named"]  # nothing learned of the cut
    assert answer.choices[0].finish_reason == "tool_calls"
    # Cut so on every way there is: the last one's answer goes out as cut.
    with proxied(set(), finish="length") as (url, asked):
        answer = _openai(url).chat.completions.create(**_chat(max_tokens=3))
        assert [way(sent) for sent in asked] == ["required", "named", "json_output"]
    assert answer.choices[0].finish_reason == "length"


# -- the held text is bounded ---------------------------------------------------------------------


@pytest.mark.slow
def test_text_before_a_call_is_held_up_to_the_bound_then_judged_as_no_call() -> None:
    """A few words before the call (llama-server's ``required`` grammar allows them) are held and the
    call goes out; past ``HELD_EVENTS`` the answer is judged as one without a call, and asked again."""
    with proxied({"named"}, preamble=3) as (url, asked):
        content, calls, _ = _streamed(list(_openai(url).chat.completions.create(**_chat(stream=True))))
        assert [way(sent) for sent in asked] == ["required"]
    assert (content, calls) == ("so so so ", [("get_weather", ARGUMENTS)])
    # Twice the bound: the call comes more reads after it than a read holds (256 KiB, proxy/transport.py).
    with proxied({"named"}, preamble=2 * HELD_EVENTS) as (url, asked):
        content, calls, _ = _streamed(list(_openai(url).chat.completions.create(**_chat(stream=True))))
        assert [way(sent) for sent in asked] == ["required", "named"]
    assert (content, calls) == ("", [("get_weather", ARGUMENTS)])


@pytest.mark.slow
def test_a_few_huge_text_events_before_a_call_are_held_only_up_to_the_text_bound() -> None:
    """Six events of ``HELD_CHARS`` characters each: few events, but more text than the bound holds;
    judged as an answer without a call, and asked again, rather than held whole (a hostile upstream's
    4 MiB lines would otherwise be held 4,096 times). Six: more than a read holds (256 KiB,
    proxy/transport.py), so the call cannot come in the read that passes the bound."""
    with proxied({"named"}, preamble=6, word="x" * HELD_CHARS) as (url, asked):
        content, calls, _ = _streamed(list(_openai(url).chat.completions.create(**_chat(stream=True))))
        assert [way(sent) for sent in asked] == ["required", "named"]
    assert (content, calls) == ("", [("get_weather", ARGUMENTS)])
