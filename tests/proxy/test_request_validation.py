"""The proxy's request validation: bad input is a 400 naming the parameter, good input passes untouched."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from conformance.api_errors import APIError
from conformance.judge import judge_response
from conformance.protocols import PROTOCOLS, protocol_named
from conformance.request import Endpoint
from conformance.request_validation import parse_request, validate_request
from conformance.schemas import request_schema
from tests.support.servers import run_asgi

from .conftest import run_proxy

_SCHEMA_NAMES = {protocol.name: protocol.request_schema for protocol in PROTOCOLS}
_SCHEMAS = {endpoint: request_schema(name) for endpoint, name in _SCHEMA_NAMES.items()}

MESSAGES = [{"role": "user", "content": "hi"}]


def _rejection(endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(APIError) as caught:
        validate_request(_SCHEMA_NAMES[endpoint], body)
    assert caught.value.status == 400
    error: dict[str, Any] = caught.value.body["error"]
    assert error["type"] == "invalid_request_error"
    return error


@pytest.mark.parametrize(
    ("endpoint", "body", "param", "code"),
    [
        ("completions", {"prompt": "x", "max_tokens": "eight"}, "max_tokens", "invalid_type"),
        ("chat", {"messages": MESSAGES, "temperature": 7}, "temperature", "integer_above_maximum_value"),
        ("chat", {"messages": MESSAGES, "temperature": -0.5}, "temperature", "decimal_below_minimum_value"),
        ("completions", {"model": "m", "max_tokens": 2}, "prompt", "missing_required_parameter"),
        ("chat", {"model": "m", "max_tokens": 2}, "messages", "missing_required_parameter"),
        ("chat", {"messages": []}, "messages", "empty_array"),
        ("chat", {"messages": "hi"}, "messages", "invalid_type"),
        ("chat", {"messages": [*MESSAGES, "hi"]}, "messages[1]", "invalid_type"),
        (
            "chat",
            {"messages": [*MESSAGES, {"role": "bot", "content": "x"}]},
            "messages[1].role",
            "invalid_value",
        ),
        ("chat", {"messages": [{"role": "user"}]}, "messages[0].content", "missing_required_parameter"),
        ("chat", {"messages": [{"content": "x"}]}, "messages[0].role", "missing_required_parameter"),
        ("completions", {"prompt": "x", "top_p": 1.5}, "top_p", "decimal_above_maximum_value"),
        ("completions", {"prompt": "x", "n": 0}, "n", "integer_below_minimum_value"),
        ("chat", {"messages": MESSAGES, "n": 129}, "n", "integer_above_maximum_value"),
        ("completions", {"prompt": "x", "max_tokens": -1}, "max_tokens", "integer_below_minimum_value"),
        ("completions", {"prompt": "x", "max_tokens": 2.5}, "max_tokens", "invalid_type"),
        ("completions", {"prompt": "x", "logprobs": 6}, "logprobs", "integer_above_maximum_value"),
        ("completions", {"prompt": "x", "logprobs": True}, "logprobs", "invalid_type"),
        ("chat", {"messages": MESSAGES, "logprobs": 2}, "logprobs", "invalid_type"),
        ("chat", {"messages": MESSAGES, "top_logprobs": 21}, "top_logprobs", "integer_above_maximum_value"),
        (
            "chat",
            {"messages": MESSAGES, "presence_penalty": 3},
            "presence_penalty",
            "integer_above_maximum_value",
        ),
        (
            "completions",
            {"prompt": "x", "frequency_penalty": -2.5},
            "frequency_penalty",
            "decimal_below_minimum_value",
        ),
        ("completions", {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop", "array_above_max_length"),
        ("completions", {"prompt": "x", "stop": []}, "stop", "empty_array"),
        ("completions", {"prompt": "x", "stop": 3}, "stop", "invalid_type"),
        ("completions", {"prompt": "x", "stop": ["a", 1]}, "stop[1]", "invalid_type"),
        ("chat", {"messages": MESSAGES, "stream": "yes"}, "stream", "invalid_type"),
        ("completions", {"prompt": {}}, "prompt", "invalid_type"),
        ("completions", {"prompt": []}, "prompt", "empty_array"),
        ("completions", {"prompt": [*range(10), -1]}, "prompt[10]", "integer_below_minimum_value"),
        ("completions", {"prompt": [[1, 2], [3, 4], [5, 6.5]]}, "prompt[2][1]", "invalid_type"),
        (
            "completions",
            {"prompt": "x", "logit_bias": {"5": 200}},
            "logit_bias.5",
            "integer_above_maximum_value",
        ),
        ("chat", {"messages": MESSAGES, "model": 5}, "model", "invalid_type"),
    ],
)
def test_a_bad_parameter_is_named(endpoint: str, body: dict[str, Any], param: str, code: str) -> None:
    for _ in range(2):  # the second time a seen shape is looked up, never passed
        error = _rejection(endpoint, body)
        assert (error["param"], error["code"]) == (param, code)
        assert f"'{param}'" in error["message"]


def test_a_name_that_breaks_its_pattern_is_told_the_pattern() -> None:
    """OpenAI's words: the client learns which characters a name may have."""
    tool = {"type": "function", "function": {"name": "get weather!", "parameters": {"type": "object"}}}
    error = _rejection("chat", {"messages": MESSAGES, "tools": [tool]})
    assert (error["param"], error["code"]) == ("tools[0].function.name", "invalid_value")
    assert error["message"] == (
        "Invalid 'tools[0].function.name': string does not match pattern. Expected a string that matches "
        "the pattern '^[a-zA-Z0-9_-]{1,64}$'."
    )


def test_messages_say_what_was_expected_and_what_came() -> None:
    error = _rejection("completions", {"prompt": "x", "max_tokens": "eight"})
    assert error["message"] == "Invalid type for 'max_tokens': expected an integer, but got a string instead."
    error = _rejection("chat", {"messages": MESSAGES, "temperature": 7})
    assert "Expected a value <= 2, but got 7" in error["message"]
    assert _rejection("chat", {"messages": MESSAGES, "n": 0})["message"].endswith("but got 0.")
    stop = _rejection("completions", {"prompt": "x", "stop": list("abcdefg")})
    assert stop["message"].endswith("got 7.")  # the client's length, not the shortened one checked


@pytest.mark.parametrize("stream", [None, False])
def test_stream_options_without_stream_is_refused_as_openai_does(stream: bool | None) -> None:
    body: dict[str, Any] = {"messages": MESSAGES, "stream_options": {"include_usage": True}}
    if stream is not None:
        body["stream"] = stream
    error = _rejection("chat", body)
    assert error == {
        "message": "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
        "type": "invalid_request_error",
        "param": "stream_options",
        "code": "invalid_value",
    }


@pytest.mark.parametrize(
    ("endpoint", "body"),
    [
        ("chat", {"messages": MESSAGES}),  # no model: local clients often leave it out
        (
            "chat",
            {"model": "m", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}},
        ),
        ("chat", {"messages": MESSAGES, "temperature": None, "stop": None, "stream_options": None}),
        (
            "chat",
            {
                "messages": [
                    {"role": "assistant"},
                    {"role": "user", "content": [{"type": "text", "text": "x"}]},
                ]
            },
        ),
        ("chat", {"messages": MESSAGES, "logprobs": True, "top_logprobs": 20, "n": 128, "temperature": 2}),
        ("completions", {"prompt": "x", "logprobs": 5, "echo": True, "stop": ["a", "b", "c", "d"]}),
        ("completions", {"prompt": ["a", "b"]}),
        ("completions", {"prompt": list(range(50))}),
        ("completions", {"prompt": [[1, 2], [3]]}),
        ("completions", {"prompt": [12, "text", 34]}),  # llama.cpp's mixed prompt
        ("completions", {"prompt": None}),  # nullable in the spec
        # Extensions pass through whatever their type: the upstream defines them.
        ("completions", {"prompt": "x", "top_k": 40, "min_p": "0.1", "grammar": 5, "mirostat": [1]}),
    ],
)
def test_good_requests_and_extensions_pass(endpoint: str, body: dict[str, Any]) -> None:
    assert parse_request(_SCHEMA_NAMES[endpoint], json.dumps(body).encode()) == body


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"model": "x", "messages": [{"role": "user"', "not valid JSON (line 1, column 44)"),
        (b'{"messages": [], "temperature": NaN}', "not valid JSON"),
        (b'{"messages": [], "temperature": Infinity}', "not valid JSON"),
        (b"\xff\xfe\x00", "not valid JSON"),
        (b"", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object, not an array"),
        # Half of a surrogate pair: Python's parser reads it, UTF-8 cannot hold it (a 500 in the proxy).
        (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "half of a UTF-16 surrogate pair"),
        (b'{"messages": [], "metadata": {"\\uDFFFa": 1}}', "half of a UTF-16 surrogate pair"),
        # Nested past orjson's limit (so Python's parser reads it) and past what the shape walk recurses.
        (b'{"messages": [], "metadata": ' + b"[" * 3000 + b"]" * 3000 + b"}", "nested too deeply"),
        (b'{"messages": [], "metadata": ' + b'{"a":' * 600 + b"1" + b"}" * 600 + b"}", "nested too deeply"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_400(raw: bytes, message: str) -> None:
    with pytest.raises(APIError) as caught:
        parse_request("chat_completion_request", raw)
    assert caught.value.status == 400
    assert message in caught.value.message
    assert caught.value.body["error"]["param"] is None


def test_a_surrogate_pair_escaped_whole_is_read_as_its_character() -> None:
    # Python's json.dumps writes an emoji so: only half of a pair is refused.
    raw = json.dumps({"messages": [{"role": "user", "content": "hi \U0001f600"}]}).encode()
    assert b"\\ud83d\\ude00" in raw
    assert parse_request("chat_completion_request", raw)["messages"][0]["content"] == "hi \U0001f600"


def test_a_long_token_prompt_is_checked_without_walking_every_id_through_jsonschema() -> None:
    body = {"prompt": list(range(200_000))}
    validate_request("completion_request", body)
    bad = {"prompt": [*range(200_000), -5]}
    assert _rejection("completions", bad)["param"] == "prompt[200000]"


def test_the_shape_cache_is_bounded_in_bytes_not_only_in_entries() -> None:
    """A free-form object's keys are kept in its shape: 40 bodies with a 15,000-key object each once
    held 200 MiB of cache. Such shapes are validated uncached; usual bodies are still cached."""
    from conformance import request_validation

    request_validation._valid_shapes.clear()
    request_validation._held_bytes = 0
    usual = {"messages": [{"role": "user", "content": "hi"}], "metadata": {"user": "u", "team": "t"}}
    validate_request("chat_completion_request", usual)
    assert len(request_validation._valid_shapes) == 1
    for i in range(40):
        extra = {f"field-{i}-{k}-" + "x" * 40: k for k in range(15_000)}
        validate_request("chat_completion_request", {**usual, "extra": extra})
    assert len(request_validation._valid_shapes) == 1  # the usual body only
    assert request_validation._held_bytes < 4096
    assert _rejection("chat", {**usual, "extra": extra, "n": -1})["param"] == "n"  # still validated


def test_a_tools_schema_is_shaped_as_an_object_and_what_is_around_it_still_checked() -> None:
    """A function's ``parameters`` (any JSON Schema) is shaped as an object, whatever it holds: an agent
    sends its tools' schemas on every turn, and two turns' schemas share one cached shape; what is not
    an object there, or a bad value beside it, is still refused."""
    from conformance import request_validation

    def body(parameters: Any, **function: Any) -> dict[str, Any]:
        tool = {"type": "function", "function": {"name": "f", "parameters": parameters, **function}}
        return {"messages": [{"role": "user", "content": "hi"}], "tools": [tool]}

    request_validation._valid_shapes.clear()
    request_validation._held_bytes = 0
    one = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris"]}}}
    other = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(30)}, "x": [1, {}]}
    validate_request("chat_completion_request", body(one))
    validate_request("chat_completion_request", body(other))
    assert len(request_validation._valid_shapes) == 1  # one shape for both
    assert _rejection("chat", body("a schema"))["param"] == "tools[0].function.parameters"
    assert _rejection("chat", body(one, strict="yes"))["param"] == "tools[0].function.strict"
    assert _rejection("chat", body(other, name="no spaces allowed"))["param"] == "tools[0].function.name"


_JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-300, 300),
    st.floats(-3, 3, allow_nan=False),
    st.sampled_from(["", "x", "user", "assistant", "bot", "system"]),
)
_JSON = st.recursive(
    _JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=7) | st.dictionaries(st.sampled_from(["role", "content", "a"]), inner)
    ),
    max_leaves=12,
)
_MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "system", "assistant", "tool", "bot", 3]),
        "content": st.one_of(
            st.text(max_size=3), st.none(), st.integers(), st.lists(st.just({"type": "text"}))
        ),
    },
)
_PARAMS = st.dictionaries(
    st.sampled_from(
        [
            "model",
            "temperature",
            "top_p",
            "n",
            "max_tokens",
            "stop",
            "stream",
            "stream_options",
            "logprobs",
            "top_logprobs",
            "presence_penalty",
            "logit_bias",
            "echo",
            "best_of",
            "top_k",
        ]
    ),
    _JSON,
    max_size=5,
)


@settings(max_examples=400, deadline=None)
@given(
    endpoint=st.sampled_from(["chat", "completions"]),
    params=_PARAMS,
    main=st.one_of(st.lists(_MESSAGE, max_size=8), st.lists(st.integers(-2, 5), max_size=9), _JSON),
    drop=st.booleans(),
)
def test_the_shape_cache_agrees_with_jsonschema_on_the_whole_body(
    endpoint: str, params: dict[str, Any], main: Any, drop: bool
) -> None:
    body = dict(params)
    if not drop:
        body["messages" if endpoint == "chat" else "prompt"] = main
    reference = Draft202012Validator(_SCHEMAS[endpoint])
    expected = reference.is_valid(body)
    known = {*_SCHEMAS[endpoint]["properties"]}
    for _ in range(2):
        error = _outcome(endpoint, body)
        assert (error is None) == expected, error
        assert error is None or error["param"].split(".")[0].split("[")[0] in known


def _outcome(endpoint: str, body: dict[str, Any]) -> dict[str, Any] | None:
    try:
        validate_request(_SCHEMA_NAMES[endpoint], body)
    except APIError as exc:
        error: dict[str, Any] = exc.body["error"]
        return error
    return None


# Through the proxy: the SDK raises BadRequestError, and the upstream never sees the request.


@pytest.fixture(scope="module")
def counting_upstream() -> Iterator[tuple[str, list[Any]]]:
    """A small OpenAI-style upstream that records every completion request it gets."""
    seen: list[Any] = []

    async def completions(request: Request) -> JSONResponse:
        seen.append(await request.json())
        choice = {"index": 0, "text": "ok", "logprobs": None, "finish_reason": "stop"}
        body = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}
        body["usage"] = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        return JSONResponse(body)

    app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    with run_asgi(app) as url:
        yield url, seen


@pytest.fixture(scope="module")
def proxy_before_counter(counting_upstream: tuple[str, list[Any]]) -> Iterator[str]:
    with run_proxy(counting_upstream[0], upstream_kind="openai") as url:
        yield url


def test_the_sdk_raises_bad_request_naming_the_param(
    proxy_before_counter: str, counting_upstream: tuple[str, list[Any]]
) -> None:
    _, seen = counting_upstream
    before = len(seen)
    client = openai.OpenAI(base_url=proxy_before_counter + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="m", prompt="x", temperature=7)
    assert caught.value.param == "temperature"
    assert caught.value.code == "integer_above_maximum_value"
    assert len(seen) == before  # refused before forwarding
    reply = client.completions.create(model="m", prompt="x", max_tokens=2, extra_body={"top_k": 40})
    assert reply.choices[0].text == "ok"
    assert seen[-1]["top_k"] == 40  # extensions reach the upstream


@pytest.mark.parametrize(
    ("body", "param"),
    [({"model": "m"}, "prompt"), ({"model": "m", "prompt": "x", "max_tokens": "eight"}, "max_tokens")],
)
def test_the_proxy_answers_an_openai_error_body(
    proxy_before_counter: str, body: dict[str, Any], param: str
) -> None:
    response = httpx.post(proxy_before_counter + "/v1/completions", json=body, timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    verdict = judge_response(
        response.content,
        request={"method": "POST", "path": "/v1/completions", "body": body},
        status=400,
        headers=dict(response.headers),
    )
    assert verdict.errors == []


def test_malformed_json_through_the_proxy_is_400(proxy_before_counter: str) -> None:
    response = httpx.post(
        proxy_before_counter + "/v1/chat/completions",
        content=b'{"model": "x", "messages": [{"role": "user"',
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "x", "messages": [{"role": "user", "content": "A"}]}),
        ("/v1/completions", {"model": "x", "prompt": "A"}),
        ("/v1/responses", {"model": "x", "input": "A"}),
        ("/v1/messages", {"model": "x", "max_tokens": 4, "messages": [{"role": "user", "content": "A"}]}),
        ("/v1/messages/count_tokens", {"model": "x", "messages": [{"role": "user", "content": "A"}]}),
    ],
)
def test_half_a_surrogate_pair_is_the_protocols_400_never_sent(
    proxy_before_counter: str, counting_upstream: tuple[str, list[Any]], path: str, body: dict[str, Any]
) -> None:
    """Found by black-box testing: ``"\\ud800"`` in a prompt was a 500 (the prompt's encoding failed
    in the proxy, its traceback in the log)."""
    _, seen = counting_upstream
    before = len(seen)
    raw = json.dumps(body).replace('"A"', '"a \\ud800"').encode()
    response = httpx.post(
        proxy_before_counter + path, content=raw, headers={"content-type": "application/json"}, timeout=10
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "surrogate" in error["message"]
    if path.startswith("/v1/messages"):
        assert response.json()["type"] == "error"
        assert error["type"] == "invalid_request_error"
    else:
        assert error["code"] == "invalid_json"
    assert len(seen) == before


def test_the_proxy_checks_requests_with_the_suites_request_schemas() -> None:
    """One statement of OpenAI's request facts: what the proxy refuses, the judge calls invalid."""
    from conformance.rules.acceptance import refusal

    assert _SCHEMAS["chat"]["$id"].endswith("/chat_completion_request.json")
    assert _SCHEMAS["completions"]["$id"].endswith("/completion_request.json")
    invalid: list[tuple[Endpoint, dict[str, Any]]] = [
        ("completions", {"model": "m", "max_tokens": 8}),
        ("chat", {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "temperature": 7}),
        ("completions", {"model": "m", "prompt": "Hi", "max_tokens": "eight"}),
    ]
    for endpoint, body in invalid:
        assert _outcome(endpoint, body) is not None
        protocol = protocol_named(endpoint)
        assert protocol is not None
        assert refusal(protocol.read_request(body)) is not None


@pytest.mark.parametrize(
    ("endpoint", "valid", "invalid", "param"),
    [
        ("responses", {"truncation": "auto"}, {"truncation": "middle"}, "truncation"),
        (
            "responses",
            {"reasoning": {"effort": "low"}},
            {"reasoning": {"effort": "extreme"}},
            "reasoning.effort",
        ),
        ("chat", {"reasoning_effort": "low"}, {"reasoning_effort": "extreme"}, "reasoning_effort"),
        (
            "chat",
            {"tools": [{"type": "function", "function": {"name": "get_weather"}}]},
            {"tools": [{"type": "function", "function": {"name": "get weather"}}]},
            "tools[0].function.name",
        ),
    ],
)
def test_a_valid_body_seen_first_does_not_let_an_invalid_value_of_its_shape_pass(
    endpoint: str, valid: dict[str, Any], invalid: dict[str, Any], param: str
) -> None:
    """The shape cache kept only ``role``'s text: once a body with ``truncation: "auto"`` had passed,
    the same body with ``"middle"`` passed too, and was echoed into a Response the judge refuses."""
    main = {"input": "hi"} if endpoint == "responses" else {"messages": [{"role": "user", "content": "hi"}]}
    assert _outcome(endpoint, {"model": "m", **main, **valid}) is None
    error = _outcome(endpoint, {"model": "m", **main, **invalid})
    assert error is not None
    assert error["param"] == param
