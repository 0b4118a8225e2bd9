"""A client's stop sequences with tools offered (proxy/adapters/base.py ``fitted_request``): not sent to
the upstream, whose server reads calls out of the model's text and cut them there (llama-server with a
tool template: ``"stop": ["Paris"]`` left the call ``{"city": "`` and the client a 502), but applied by
the proxy to the text (Q76), whatever comes after dropped.

The upstream here writes as such a server does: its text is the model's reply, then the calls' JSON
after ``<tool_call>``, and it cuts that text at the first stop sequence it is given, calls included.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from conformance.probe import WEATHER
from conformance.stop_sequences import earliest_stop
from tests.proxy.conftest import run_proxy, upstream_answer
from tests.support.servers import RecordingUpstream, run_asgi

CHAT = "/v1/chat/completions"
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
CALL_TEXT = '<tool_call>{"city": "Paris"}'


def _answer(reply: str, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]], str]:
    """The text, calls and finish of ``reply`` (text, then maybe a call) cut at ``body``'s stop."""
    stops = body.get("stop") or []
    found = earliest_stop(reply, tuple([stops] if isinstance(stops, str) else stops))
    cut = reply if found is None else reply[: found[0]]
    text, _, call = cut.partition("<tool_call>")
    calls = []
    if call:
        function = {"name": "get_weather", "arguments": call}
        calls.append({"index": 0, "id": "call_1", "type": "function", "function": function})
    return text, calls, "tool_calls" if calls and found is None else "stop"


def _upstream(reply: str) -> RecordingUpstream:
    async def chat(request: Request) -> Response:
        body = await request.json()
        upstream.seen.append((request.url.path, body))
        text, calls, finish = _answer(reply, body)
        if not body.get("stream"):
            message = {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}
            return JSONResponse(
                upstream_answer(True, [{"index": 0, "message": message, "finish_reason": finish}])
            )

        async def events() -> AsyncIterator[bytes]:
            deltas = [{"role": "assistant", "content": piece} for piece in text.split(" ") if piece]
            deltas = [{**d, "content": d["content"] + " "} for d in deltas[:-1]] + deltas[-1:]
            deltas += [{"tool_calls": [call]} for call in calls]
            for delta in [*deltas, {}]:
                choice = {"index": 0, "delta": delta, "finish_reason": None if delta else finish}
                chunk = upstream_answer(True, [choice]) | {"object": "chat.completion.chunk"}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    upstream = RecordingUpstream([Route(CHAT, chat, methods=["POST"])])
    return upstream


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[tuple[RecordingUpstream, str]]:
    upstream = _upstream(request.param)
    with run_asgi(upstream.app) as url, run_proxy(url, upstream_kind="openai") as proxy:
        yield upstream, proxy


def _ask(proxy: str, stream: bool, **extra: Any) -> dict[str, Any]:
    """The proxy's answer as one message: its content, calls and finish, streamed or not."""
    body = ASK | {"stop": ["Paris"], "stream": stream} | extra
    if not stream:
        answer = httpx.post(proxy + CHAT, json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        choice = answer.json()["choices"][0]
        return {key: choice["message"].get(key) for key in ("content", "tool_calls")} | {
            "finish_reason": choice["finish_reason"]
        }
    content, calls, finish = "", [], None
    with httpx.stream("POST", proxy + CHAT, json=body, timeout=30) as answer:
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    content += choice["delta"].get("content") or ""
                    calls += choice["delta"].get("tool_calls") or []
                    finish = choice["finish_reason"] or finish
    return {"content": content or None, "tool_calls": calls or None, "finish_reason": finish}


@pytest.mark.parametrize("served", ["Let me look. " + CALL_TEXT], indirect=True)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_stop_sequence_in_a_calls_arguments_leaves_the_call_whole(
    served: tuple[RecordingUpstream, str], stream: bool
) -> None:
    upstream, proxy = served
    answer = _ask(proxy, stream)
    assert "stop" not in upstream.bodies(CHAT)[0]
    assert answer["finish_reason"] == "tool_calls", answer
    (call,) = answer["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


@pytest.mark.parametrize("served", ["It is sunny in Paris today. " + CALL_TEXT], indirect=True)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_stop_sequence_in_the_text_ends_the_answer_there_without_the_calls_after(
    served: tuple[RecordingUpstream, str], stream: bool
) -> None:
    upstream, proxy = served
    answer = _ask(proxy, stream)
    assert "stop" not in upstream.bodies(CHAT)[0]
    assert (answer["content"], answer["tool_calls"], answer["finish_reason"]) == (
        "It is sunny in ",
        None,
        "stop",
    )


@pytest.mark.parametrize("served", ["It is sunny in Paris today."], indirect=True)
def test_without_a_call_to_make_the_stop_sequence_is_the_upstreams(
    served: tuple[RecordingUpstream, str],
) -> None:
    upstream, proxy = served
    _ask(proxy, False, tool_choice="none")
    assert upstream.bodies(CHAT)[0]["stop"] == ["Paris"]
