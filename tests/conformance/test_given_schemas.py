"""A schema a client gives (a function's parameters, a structured output's) that is not a JSON Schema is
the protocol's 400 naming the parameter that holds it, on every front-end, before any upstream sees it:
llama-server answered one with its converter's words and ``param: null``, and a server that ignores what
it cannot read would answer under no constraint at all."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from conformance.api_errors import APIError
from conformance.given_schemas import schema_problem
from conformance.protocols.messages.serving import MessagesFrontEnd
from conformance.protocols.responses.serving import ResponsesFrontEnd
from conformance.protocols.responses.store import ResponseStore
from conformance.request_validation import parse_request

NOT_SCHEMAS = [
    {"type": "nonsense"},
    {"type": "object", "properties": {"city": {"type": "string", "required": True}}},
    {"type": "object", "required": "city"},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}},
]
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "a city", "enum": ["Paris", "Oslo"]},
        "days": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}},
    },
    "required": ["city"],
    "additionalProperties": False,
    "$defs": {"tag": {"type": "string", "pattern": "^[a-z]+$"}},
}


def _refused(front_end: Any, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    with pytest.raises(APIError) as caught:
        asyncio.run(front_end.translate(json.dumps(body).encode()))
    return caught.value.status, caught.value.body


def _chat_refusal(body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(APIError) as caught:
        parse_request("chat_completion_request", json.dumps(body).encode())
    assert caught.value.status == 400
    error: dict[str, Any] = caught.value.body["error"]
    return error


@pytest.fixture
def responses(tmp_path: Path) -> ResponsesFrontEnd:
    return ResponsesFrontEnd(ResponseStore(tmp_path / "r.sqlite3", max_bytes=1 << 20, max_age=60.0))


def test_a_json_schema_is_one_and_the_verdict_is_kept() -> None:
    assert schema_problem(SCHEMA) is None
    assert schema_problem({}) is None  # (any value)
    for schema in NOT_SCHEMAS:
        first = schema_problem(schema)
        assert first is not None
        assert first.startswith("In context=(")
        assert schema_problem(json.loads(json.dumps(schema))) == first  # (an equal schema, another object)


@pytest.mark.parametrize("schema", NOT_SCHEMAS)
def test_chat_names_the_function_and_its_parameters(schema: dict[str, Any]) -> None:
    tools = [
        {"type": "function", "function": {"name": "ok", "parameters": SCHEMA}},
        {"type": "function", "function": {"name": "get_weather", "parameters": schema}},
    ]
    error = _chat_refusal({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools})
    assert (error["param"], error["code"]) == ("tools[1].function.parameters", "invalid_json_schema")
    assert error["message"].startswith("Invalid schema for function 'get_weather': In context=(")


def test_chat_names_the_structured_outputs_schema() -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "reply", "schema": NOT_SCHEMAS[0]}}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "response_format": fmt}
    error = _chat_refusal(body)
    assert (error["param"], error["code"]) == ("response_format.json_schema.schema", "invalid_json_schema")
    assert "Invalid schema for response_format 'reply'" in error["message"]
    fmt["json_schema"]["schema"] = SCHEMA
    parse_request("chat_completion_request", json.dumps(body).encode())  # a JSON Schema passes


def test_responses_names_its_own_tool_and_format(responses: ResponsesFrontEnd) -> None:
    tools = [
        {"type": "function", "name": "ok", "parameters": SCHEMA},
        {"type": "web_search"},
        {
            "type": "namespace",
            "name": "files",
            "tools": [{"type": "function", "name": "read", "parameters": {}}],
        },
        {"type": "function", "name": "get_weather", "parameters": NOT_SCHEMAS[1]},
    ]
    status, body = _refused(responses, {"model": "m", "input": "hi", "tools": tools})
    assert (status, body["error"]["param"], body["error"]["code"]) == (
        400,
        "tools[3].parameters",
        "invalid_json_schema",
    )
    assert "'get_weather'" in body["error"]["message"]
    text = {"format": {"type": "json_schema", "name": "reply", "schema": NOT_SCHEMAS[0]}}
    status, body = _refused(responses, {"model": "m", "input": "hi", "text": text})
    assert (status, body["error"]["param"]) == (400, "text.format.schema")


def test_a_namespaced_function_is_named_as_the_client_named_it(responses: ResponsesFrontEnd) -> None:
    """The model sees ``files__read`` (the namespace's name joined to the function's); the client named
    the function ``read`` inside ``files``, and the refusal said ``'files__read'``."""
    inner = {"type": "function", "name": "read", "parameters": NOT_SCHEMAS[1]}
    tools = [{"type": "namespace", "name": "files", "tools": [inner]}]
    status, body = _refused(responses, {"model": "m", "input": "hi", "tools": tools})
    assert (status, body["error"]["param"]) == (400, "tools[0].tools[0].parameters")
    assert body["error"]["message"].startswith("Invalid schema for function 'read': ")
    assert "files__read" not in body["error"]["message"]


def test_messages_words_it_as_anthropic_does() -> None:
    tools = [{"name": "ok", "input_schema": SCHEMA}, {"name": "get_weather", "input_schema": NOT_SCHEMAS[1]}]
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    status, refused = _refused(MessagesFrontEnd(), body)
    assert (status, refused["type"], refused["error"]["type"]) == (400, "error", "invalid_request_error")
    assert refused["error"]["message"].startswith(
        "tools.1.custom.input_schema: JSON schema is invalid. It must match JSON Schema draft 2020-12"
    )
    del body["tools"]
    body["output_config"] = {"format": {"type": "json_schema", "schema": NOT_SCHEMAS[2]}}
    status, refused = _refused(MessagesFrontEnd(), body)
    assert status == 400
    assert refused["error"]["message"].startswith("output_config.format.schema: JSON schema is invalid.")


def test_a_schema_nested_past_the_validators_reach_is_a_400_on_every_front_end(
    responses: ResponsesFrontEnd,
) -> None:
    """200 nested ``items``: under the body parser's depth bound, past what the validator recurses
    through; Responses and Messages answered a 500 (a review's find)."""
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(200):
        deep = {"type": "array", "items": deep}
    assert schema_problem(deep) == "the schema is nested too deeply"
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"x": deep}}}]
    status, body = _refused(responses, {"model": "m", "input": "hi", "tools": tools})
    assert (status, body["error"]["code"]) == (400, "invalid_json_schema")
    messages = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    tool = {"name": "f", "input_schema": {"type": "object", "properties": {"x": deep}}}
    status, refused = _refused(MessagesFrontEnd(), {**messages, "tools": [tool]})
    assert (status, refused["type"]) == (400, "error")


def test_the_words_quote_the_clients_keys_and_values_cut_short() -> None:
    """A 200 KB property name came back whole in the 400, and was kept in the verdicts."""
    name = "p" * 200_000
    why = schema_problem({"type": "object", "properties": {name: {"type": "nonsense"}}})
    assert why is not None
    assert len(why) < 1000
    assert "ppp..." in why


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        # 2020-12's subschema keywords, which draft 7's meta-schema does not know (pydantic's $defs)
        (
            {
                "$defs": {"X": {"type": "integer", "minimum": "zero"}},
                "properties": {"x": {"$ref": "#/$defs/X"}},
            },
            "'$defs', 'X', 'minimum'",
        ),
        ({"type": "array", "prefixItems": [{"type": "bogus"}]}, "'prefixItems', '0', 'type'"),
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/nope"}}}, "'properties', 'x'"),
    ],
)
def test_what_reached_the_upstream_is_refused_here(schema: dict[str, Any], where: str) -> None:
    """Black-box testing found these sent on, answered by llama-server's converter with ``param: null``."""
    why = schema_problem({"type": "object", **schema})
    assert why is not None
    assert why.startswith(f"In context=({where})")


def test_a_ref_in_data_or_elsewhere_is_not_checked() -> None:
    assert schema_problem({"type": "object", "properties": {"x": {"enum": [{"$ref": "#/nope"}]}}}) is None
    assert schema_problem({"type": "object", "properties": {"x": {"$ref": "https://example.com/x"}}}) is None
    assert (
        schema_problem({"type": "object", "properties": {"x": {"$ref": "#anchor"}, "y": {"$ref": "#"}}})
        is None
    )
    # (a property named like a keyword is a schema still)
    assert schema_problem({"type": "object", "properties": {"enum": {"$ref": "#/nowhere"}}}) is not None
