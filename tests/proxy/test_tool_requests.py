"""Tool requests as llama-cpp-python serves them (proxy/adapters/tool_requests.py): ``tool_choice:
"required"`` with one tool sent as that function named (Q80), several refused with a 400; an assistant
call's ``content: null`` sent as ``""`` (Q81). Only to llama-cpp-python, known from its model listing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from conformance.probe import TIME, WEATHER
from tests.proxy.conftest import run_proxy, upstream_answer
from tests.proxy.forced_answers import forced_answer
from tests.proxy.test_structured_output import LLAMA_CPP_PYTHON_MODEL
from tests.support.servers import RecordingUpstream, run_asgi

CHAT = "/v1/chat/completions"
ASK = [{"role": "user", "content": "Weather in Paris?"}]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'},
}
ROUND_TRIP = [
    *ASK,
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 18}'},
]
VLLM_MODEL = {"id": "m", "object": "model", "owned_by": "vllm"}


def _upstream(listing: list[dict[str, Any]]) -> RecordingUpstream:
    async def chat(request: Request) -> Response:
        body = await request.json()
        upstream.seen.append((request.url.path, body))
        if any(m.get("content", "") is None for m in body["messages"]):
            # llama-cpp-python's answer: its assistant message content is a str, not nullable.
            return JSONResponse({"error": {"message": "Input should be a valid string"}}, status_code=500)
        message = forced_answer(body) or {"role": "assistant", "content": "It is sunny."}
        return JSONResponse(
            upstream_answer(True, [{"index": 0, "message": message, "finish_reason": "stop"}])
        )

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": listing})

    upstream = RecordingUpstream([Route(CHAT, chat, methods=["POST"]), Route("/v1/models", models)])
    return upstream


def _post(
    listing: list[dict[str, Any]], *bodies: dict[str, Any]
) -> tuple[list[httpx.Response], RecordingUpstream]:
    upstream = _upstream(listing)
    with run_asgi(upstream.app) as url, run_proxy(url) as proxy:
        answers = [httpx.post(proxy + CHAT, json={"model": "m", **body}, timeout=30) for body in bodies]
    return answers, upstream


def test_required_with_one_tool_is_sent_to_llama_cpp_python_as_that_function_named() -> None:
    body = {"messages": ASK, "tools": [WEATHER], "tool_choice": "required"}
    [answer], upstream = _post([LLAMA_CPP_PYTHON_MODEL], body)
    assert answer.status_code == 200, answer.text
    [sent] = upstream.bodies(CHAT)
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["tools"] == [WEATHER]


@pytest.mark.parametrize("parallel", [None, True])
def test_required_with_several_tools_is_refused_for_llama_cpp_python(parallel: bool | None) -> None:
    body: dict[str, Any] = {
        "messages": ASK,
        "tools": [WEATHER, TIME],
        "tool_choice": "required",
        "stream": True,
    }
    if parallel is not None:
        body["parallel_tool_calls"] = parallel
    [answer], upstream = _post([LLAMA_CPP_PYTHON_MODEL], body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (
        "unsupported_parameter",
        "tool_choice",
        "invalid_request_error",
    )
    assert upstream.bodies(CHAT) == []  # never sent: its text answer would pass for a served request


def test_an_assistant_call_without_text_is_sent_to_llama_cpp_python_with_empty_content() -> None:
    [answer], upstream = _post([LLAMA_CPP_PYTHON_MODEL], {"messages": ROUND_TRIP, "tools": [WEATHER]})
    assert answer.status_code == 200, answer.text
    [sent] = upstream.bodies(CHAT)
    assert sent["messages"][1] == {"role": "assistant", "content": "", "tool_calls": [CALL]}
    assert sent["messages"][0::2] == [ROUND_TRIP[0], ROUND_TRIP[2]]


@pytest.mark.parametrize("listing", [[VLLM_MODEL], []], ids=["vllm", "unread"])
def test_other_upstreams_get_tool_requests_as_the_client_sent_them(listing: list[dict[str, Any]]) -> None:
    one = {"messages": ASK, "tools": [WEATHER], "tool_choice": "required"}
    several = {**one, "tools": [WEATHER, TIME]}
    answers, upstream = _post(listing, one, several, {"messages": ROUND_TRIP, "tools": [WEATHER]})
    assert [a.status_code for a in answers] == [200, 200, 500]
    sent = upstream.bodies(CHAT)
    assert [s["tool_choice"] for s in sent[:2]] == ["required", "required"]
    assert sent[2]["messages"][1]["content"] is None


def _allowed(mode: str, *names: str) -> dict[str, Any]:
    tools = [{"type": "function", "function": {"name": name}} for name in names]
    return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": tools}}


@pytest.mark.parametrize(
    "listing", [[VLLM_MODEL], [LLAMA_CPP_PYTHON_MODEL]], ids=["vllm", "llama-cpp-python"]
)
def test_an_allowed_tools_choice_is_sent_as_the_tools_it_allows_and_its_mode(
    listing: list[dict[str, Any]],
) -> None:
    # llama-server takes an object tool_choice as "auto" (every tool callable), llama-cpp-python
    # refuses it: every upstream gets the allowed tools alone and the mode.
    auto = {"messages": ASK, "tools": [WEATHER, TIME], "tool_choice": _allowed("auto", "get_time")}
    required = {**auto, "tool_choice": _allowed("required", "get_time")}
    unknown = {**auto, "tool_choice": _allowed("auto", "get_date")}  # OpenAI's 400, never sent
    malformed = {**auto, "tool_choice": _allowed("auto", ["get_time"])}  # type: ignore[arg-type]
    answers, upstream = _post(listing, auto, required, unknown, malformed)
    assert [a.status_code for a in answers] == [200, 200, 400, 200]
    assert "no function named 'get_date'" in answers[2].json()["error"]["message"]
    sent = upstream.bodies(CHAT)
    assert [[t["function"]["name"] for t in s["tools"]] for s in sent] == [
        ["get_time"],
        ["get_time"],
        ["get_weather", "get_time"],  # not a list of names: sent as the client wrote it
    ]
    named = {"type": "function", "function": {"name": "get_time"}}  # "required" with one tool (Q80)
    required_sent = named if listing == [LLAMA_CPP_PYTHON_MODEL] else "required"
    assert [s["tool_choice"] for s in sent] == ["auto", required_sent, malformed["tool_choice"]]


def test_an_allowed_tools_choice_of_several_is_refused_for_llama_cpp_python() -> None:
    body = {
        "messages": ASK,
        "tools": [WEATHER, TIME],
        "tool_choice": _allowed("required", "get_weather", "get_time"),
    }
    answers, upstream = _post([LLAMA_CPP_PYTHON_MODEL], body)
    assert answers[0].status_code == 400
    assert answers[0].json()["error"]["param"] == "tool_choice"
    assert upstream.bodies(CHAT) == []


@pytest.mark.parametrize("asking", [{"tools": [WEATHER]}, {"n": 2}], ids=["tools", "fan-out"])
@pytest.mark.parametrize(
    ("status", "asked"), [(404, 1), (200, 1), (503, 3), (429, 3)], ids=["404", "no-list", "503", "429"]
)
def test_an_upstream_without_a_listing_is_asked_for_it_once_not_on_every_tool_request(
    status: int, asked: int, asking: dict[str, Any]
) -> None:
    # An answer about the route tells the upstream is not llama-cpp-python (which lists its models); a
    # refusal that may pass (a 5xx, a 429) is asked again. Before, each tool request to such an upstream
    # cost a round trip more, and each fan-out (n: 2) one more again, to learn whether it serves one
    # request at a time.
    listings: list[int] = []

    async def chat(request: Request) -> Response:
        message = {"role": "assistant", "content": "It is sunny."}
        return JSONResponse(
            upstream_answer(True, [{"index": 0, "message": message, "finish_reason": "stop"}])
        )

    async def models(_: Request) -> Response:
        listings.append(status)
        return JSONResponse({"object": "list"} if status == 200 else {"error": "no"}, status_code=status)

    upstream = RecordingUpstream([Route(CHAT, chat, methods=["POST"]), Route("/v1/models", models)])
    body = {"model": "m", "messages": ASK, **asking}
    with run_asgi(upstream.app) as url, run_proxy(url) as proxy:
        answers = [httpx.post(proxy + CHAT, json=body, timeout=30) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200], answers[0].text
    assert len(listings) == asked


@pytest.mark.parametrize(
    "listing", [[VLLM_MODEL], [LLAMA_CPP_PYTHON_MODEL]], ids=["vllm", "llama-cpp-python"]
)
def test_a_tool_choice_without_tools_is_openais_400_never_sent(listing: list[dict[str, Any]]) -> None:
    # llama-server answered "required" without tools with text: a forced call that never came.
    named = {"type": "function", "function": {"name": "get_weather"}}
    bodies = [{"messages": ASK, "tool_choice": choice} for choice in ("required", "none", named)]
    answers, upstream = _post(listing, *bodies, {"messages": ASK, "tools": [], "tool_choice": "auto"})
    assert [a.status_code for a in answers] == [400] * 4
    for answer in answers:
        error = answer.json()["error"]
        assert error["param"] == "tool_choice"
        assert "only allowed when 'tools' are specified" in error["message"]
    assert upstream.bodies(CHAT) == []


@pytest.mark.parametrize(
    "listing", [[VLLM_MODEL], [LLAMA_CPP_PYTHON_MODEL]], ids=["vllm", "llama-cpp-python"]
)
def test_a_tool_answer_to_no_call_is_openais_400_never_sent(listing: list[dict[str, Any]]) -> None:
    """A ``tool`` message that answers no call an earlier assistant message made: OpenAI's 400 (the
    bundled backend's words), for every upstream. A whole round trip still goes."""
    orphan = [*ASK, {"role": "tool", "tool_call_id": "call_9", "content": "18"}]
    wrong_id = [*ROUND_TRIP[:2], {**ROUND_TRIP[2], "tool_call_id": "call_2"}]
    round_trip = [*ROUND_TRIP[:1], {**ROUND_TRIP[1], "content": ""}, *ROUND_TRIP[2:]]
    answers, upstream = _post(
        listing, {"messages": orphan}, {"messages": wrong_id}, {"messages": round_trip, "tools": [WEATHER]}
    )
    assert [a.status_code for a in answers] == [400, 400, 200], answers[0].text
    for answer, at in zip(answers[:2], (1, 2), strict=True):
        error = answer.json()["error"]
        assert error["param"] == f"messages[{at}].role"
        assert "must be a response to a preceding message with 'tool_calls'" in error["message"]
    assert len(upstream.bodies(CHAT)) == 1


def test_a_tool_messages_call_id_that_is_no_string_is_openais_400() -> None:
    """A missing, null, empty or non-string ``tool_call_id`` is named as such (a dict was a 500 of the
    proxy's own), and a call whose id is not a string is refused where it is made."""
    tool = {"role": "tool", "content": "18"}
    bodies = [
        {"messages": [*ROUND_TRIP[:2], tool]},
        *(
            {"messages": [*ROUND_TRIP[:2], {**tool, "tool_call_id": bad}]}
            for bad in (None, "", 1, {"a": 1}, ["c"])
        ),
    ]
    odd_call = {**CALL, "id": {"a": 1}}
    bodies.append(
        {"messages": [*ASK, {"role": "assistant", "content": None, "tool_calls": [odd_call]}, ROUND_TRIP[2]]}
    )
    answers, upstream = _post([LLAMA_CPP_PYTHON_MODEL], *bodies)
    assert [a.status_code for a in answers] == [400] * len(bodies), [a.text for a in answers]
    params = [a.json()["error"]["param"] for a in answers]
    assert params == ["messages[2].tool_call_id"] * 6 + ["messages[1].tool_calls[0].id"]
    assert answers[0].json()["error"]["message"] == "Missing required parameter: 'messages[2].tool_call_id'."
    assert "expected a non-empty string, but got an integer" in answers[3].json()["error"]["message"]
    assert upstream.bodies(CHAT) == []


def test_an_assistant_call_of_the_wrong_shape_is_openais_400_where_it_is() -> None:
    """An assistant turn's ``tool_calls`` entry without an id, a function or its arguments, or with
    arguments that are not a string, went to llama-server, which took it (the bundled backend refused it
    in words of its own); one without ``type`` was llama-server's 500 ("Missing tool call type"): now
    OpenAI's 400 naming the entry's field, for every upstream."""
    function = CALL["function"]
    odd = [
        {"type": "function", "function": function},
        {**CALL, "id": 5},
        {k: v for k, v in CALL.items() if k != "type"},
        {"id": "call_1", "type": "function"},
        {**CALL, "function": {"name": "get_weather"}},
        {**CALL, "function": {**function, "arguments": {"city": "Paris"}}},
        "call_1",
    ]
    bodies = [
        {"messages": [*ASK, {"role": "assistant", "content": None, "tool_calls": [call]}]} for call in odd
    ]
    answers, upstream = _post([LLAMA_CPP_PYTHON_MODEL], *bodies)
    assert [a.status_code for a in answers] == [400] * len(bodies), [a.text for a in answers]
    errors = [a.json()["error"] for a in answers]
    assert [e["param"] for e in errors] == [
        "messages[1].tool_calls[0].id",
        "messages[1].tool_calls[0].id",
        "messages[1].tool_calls[0].type",
        "messages[1].tool_calls[0].function",
        "messages[1].tool_calls[0].function.arguments",
        "messages[1].tool_calls[0].function.arguments",
        "messages[1].tool_calls[0]",
    ]
    assert errors[0]["message"] == "Missing required parameter: 'messages[1].tool_calls[0].id'."
    assert errors[5]["message"] == (
        "Invalid type for 'messages[1].tool_calls[0].function.arguments': expected a string, but got an "
        "object instead."
    )
    assert upstream.bodies(CHAT) == []


def test_a_call_not_answered_right_after_it_is_openais_400() -> None:
    """A call without its tool message before the next message, or answered only after a user's message,
    went to every upstream (found by black-box testing); OpenAI refuses both."""
    later = {"role": "user", "content": "Thanks."}
    bodies = [
        {"messages": [*ROUND_TRIP[:2], later]},
        {"messages": [*ROUND_TRIP[:2], later, ROUND_TRIP[2]]},
    ]
    answers, upstream = _post([LLAMA_CPP_PYTHON_MODEL], *bodies)
    assert [a.status_code for a in answers] == [400, 400], [a.text for a in answers]
    error = answers[0].json()["error"]
    assert error["param"] == "messages[2].role"
    assert error["message"].endswith("The following tool_call_ids did not have response messages: call_1")
    assert upstream.bodies(CHAT) == []
    # Answered right after, then the conversation goes on; or it ends with the calls (to be answered).
    taken = [{"messages": [*ROUND_TRIP, later]}, {"messages": ROUND_TRIP[:2]}]
    answers, _ = _post([LLAMA_CPP_PYTHON_MODEL], *taken)
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]


def test_a_messages_tool_result_without_its_tool_use_is_refused_in_anthropics_words() -> None:
    result = {"type": "tool_result", "tool_use_id": "toolu_9", "content": "18"}
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [result]}]}
    upstream = _upstream([LLAMA_CPP_PYTHON_MODEL])
    with run_asgi(upstream.app) as url, run_proxy(url) as proxy:
        refused = httpx.post(proxy + "/v1/messages", json=body, timeout=30)
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    assert "unexpected `tool_use_id` found in `tool_result` blocks: toolu_9" in message
    assert "tool_calls" not in message  # (chat's words, which an Anthropic client never sends)
