"""What a hostile client's grammar or schema did to the bundled backend (found by black-box testing):
a NUL asked for in a grammar literal, or written by a schema's const, aborted the whole process; 20,000
nested groups overflowed llama.cpp's parser's stack; a quote in an enum value or property name was a 400
"could not be parsed as GBNF"; an earlier call's arguments nested past Python's parser were a 500. Each
is now the 400 it should be, or served, and the server goes on."""

from __future__ import annotations

import concurrent.futures
import json
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.backend

pytest.importorskip("llama_cpp")

_HI = [{"role": "user", "content": "Hi"}]


def _chat(url: str, **fields: Any) -> httpx.Response:
    body = {"model": "m", "messages": _HI, "max_tokens": 24, "temperature": 0, **fields}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=120)


def _schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}}


@pytest.mark.parametrize("value", ['a"b', "a\\b", "a\u0000b", "line\nbreak"])
def test_a_const_with_what_a_literal_must_escape_is_served_as_that_value(gemma_url: str, value: str) -> None:
    answered = _chat(gemma_url, response_format=_schema({"const": value}))
    assert answered.status_code == 200, answered.text
    assert json.loads(answered.json()["choices"][0]["message"]["content"]) == value


def test_a_property_name_with_a_quote_or_a_newline_is_served(gemma_url: str) -> None:
    names = ['q"', "a\nb"]
    schema = {
        "type": "object",
        "properties": {name: {"type": "boolean"} for name in names},
        "required": names,
        "additionalProperties": False,
    }
    answered = _chat(gemma_url, response_format=_schema(schema), max_tokens=48)
    assert answered.status_code == 200, answered.text
    assert set(json.loads(answered.json()["choices"][0]["message"]["content"])) == set(names)


@pytest.mark.parametrize(
    "pattern",
    [
        '^a"b$',
        "^x[^y]{3}$",
        "^.{2}\\\\$",
        "^\\d{3}\\.\\w$",
        '^["z]+$',
        "^\\s?q$",
        "^[[:alpha:]]}$",
        "^x\\({2}$",
        "^a|bc$",
        "^(xy)+?$",
    ],
    ids=[
        "quote",
        "negated",
        "dot-backslash",
        "escapes",
        "quote-class",
        "space",
        "lone-brackets",
        "escape-repeated",
        "alternation",
        "lazy",
    ],
)
def test_a_pattern_is_served_as_json_text_of_a_string_it_matches(gemma_url: str, pattern: str) -> None:
    # A quote in a pattern came as a raw quote inside the JSON string (invalid JSON), `.` and `[^y]` let
    # one in too, and `\d` or `\.` were GBNF escapes llama.cpp cannot parse (found by black-box testing).
    answered = _chat(gemma_url, response_format=_schema({"type": "string", "pattern": pattern}))
    assert answered.status_code == 200, answered.text
    value = json.loads(answered.json()["choices"][0]["message"]["content"])
    assert re.fullmatch(pattern, value), value


def test_a_property_named_empty_is_a_property_of_the_object(gemma_url: str) -> None:
    # The top object's property "" took the grammar's root: the answer was a bare string.
    schema = {"type": "object", "properties": {"": {"type": "boolean"}}, "required": [""]}
    answered = _chat(gemma_url, response_format=_schema(schema))
    assert answered.status_code == 200, answered.text
    assert set(json.loads(answered.json()["choices"][0]["message"]["content"])) == {""}


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("^(a$", "not a valid regular expression"),
        ("^a$|^b$", "anchor"),
        ("^a\\Bb$", "\\B"),
        ("^" + "(" * 500 + "a" + ")" * 500 + "$", "groups nested deeper than 100"),
    ],
    ids=["unbalanced", "anchor", "boundary", "nested"],
)
def test_a_pattern_that_cannot_be_enforced_is_a_400(gemma_url: str, pattern: str, words: str) -> None:
    # An unbalanced group was accepted and enforced as another pattern.
    refused = _chat(gemma_url, response_format=_schema({"type": "string", "pattern": pattern}))
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "response_format", refused.text
    assert words in refused.json()["error"]["message"], refused.text


def _enum(count: int) -> dict[str, Any]:
    return {"enum": [f"v{i}" for i in range(count)]}


_PROPERTIES = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(100_000)}}
# Within the 5,000 properties, but chained by the converter past Python's recursion limit: its message was
# the 400 (black-box testing).
_OPTIONAL = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(5000)}}


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("response_format", _schema(_PROPERTIES), "100000 object properties in all, more than the 5000"),
        ("response_format", _schema({"anyOf": [_enum(600), _enum(401)]}), "1001 enum values"),
        ("tools", [{"type": "function", "function": {"name": "f", "parameters": _enum(1001)}}], "1001 enum"),
        ("response_format", _schema(_OPTIONAL), "an object of 5000 optional properties, more than the 500"),
    ],
    ids=["properties", "enum-values", "tool", "optional"],
)
def test_a_schema_past_openais_bounds_is_a_400(gemma_url: str, field: str, value: Any, words: str) -> None:
    # 10,000 enum values cost about 30 s a token, every other slot waiting (black-box testing).
    extra = {"tool_choice": "required"} if field == "tools" else {}
    refused = _chat(gemma_url, **{field: value}, **extra)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == field, refused.text
    assert words in refused.json()["error"]["message"], refused.text


def _timed(call: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    return call(), time.monotonic() - started


def test_a_schema_slow_to_convert_is_converted_off_the_event_loop(gemma_url: str) -> None:
    # 500 optional properties: the converter's rules grow with the square of them (0.9 s here), and a
    # request's schema was checked and converted on the event loop (100,000 properties held /health
    # 9.7 s, black-box testing). /health must answer in a small part of the time the request takes.
    optional = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(500)}}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        heavy = pool.submit(_timed, lambda: _chat(gemma_url, response_format=_schema(optional), max_tokens=2))
        time.sleep(0.3)  # (its body read and its schema's conversion begun)
        health, waited = _timed(lambda: httpx.get(gemma_url + "/health", timeout=120))
        answered, took = heavy.result()
    assert answered.status_code == 200, answered.text
    assert health.status_code == 200
    assert waited < took / 4, (waited, took)


@pytest.mark.parametrize(
    ("grammar", "words"),
    [
        ('root ::= "a\\x00b"', "NUL"),
        ("root ::= " + "(" * 20000 + '"a"' + ")" * 20000, "nests groups deeper than 1000"),
        ("root ::= " + " | ".join(f'"w{i}"' for i in range(1001)), "more than 1000 alternatives"),
    ],
    ids=["nul", "deep", "wide"],
)
def test_a_grammar_the_engine_cannot_take_is_a_400_and_the_server_goes_on(
    gemma_url: str, grammar: str, words: str
) -> None:
    refused = httpx.post(
        gemma_url + "/v1/completions", json={"model": "m", "prompt": "x", "grammar": grammar}, timeout=60
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "grammar"
    assert words in refused.json()["error"]["message"]
    assert _chat(gemma_url, max_tokens=2).status_code == 200


def test_earlier_arguments_nested_past_the_parser_are_no_500(gemma_url: str) -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": "[" * 100000 + "]" * 100000},
    }
    messages = [
        *_HI,
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    answered = _chat(gemma_url, messages=messages, max_tokens=2)
    assert answered.status_code in (200, 400), answered.text
    if answered.status_code == 400:  # the prompt it makes is past the context, said as such
        assert answered.json()["error"]["code"] == "context_length_exceeded", answered.text


def test_a_prompt_slow_to_tokenize_leaves_the_server_answering(gemma_url: str) -> None:
    # 10,000 one-word messages: llama.cpp's tokenizer takes seconds over their special tokens (time past
    # linear in them), and that ran on the event loop: /health waited for it (found by black-box testing).
    messages = [{"role": ("user", "assistant")[i % 2], "content": "x"} for i in range(10_000)]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        heavy = pool.submit(_chat, gemma_url, messages=messages, max_tokens=1)
        time.sleep(0.5)  # (its body read and its tokenizing begun)
        health = httpx.get(gemma_url + "/health", timeout=120)
        answered_while_heavy_ran = not heavy.done()
        assert heavy.result().status_code == 400  # (past this test server's context)
    assert health.status_code == 200
    assert answered_while_heavy_ran


def test_a_grammar_made_of_a_schema_that_llama_cpp_refuses_names_the_schemas_parameter(
    gemma_url: str,
) -> None:
    # It named 'grammar', a parameter the request never sent (found by black-box testing).
    refused = _chat(gemma_url, response_format=_schema({"enum": []}))
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "response_format", refused.text
    looping = {"$defs": {"n": {"$ref": "#/$defs/n"}}, "$ref": "#/$defs/n"}
    tool = {"type": "function", "function": {"name": "f", "parameters": looping}}
    refused = _chat(gemma_url, tools=[tool], tool_choice="required")
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "tools", refused.text


@pytest.mark.parametrize("token", ["99999999", "-1", str(2**64)])
def test_a_logit_bias_outside_the_vocabulary_is_a_400(gemma_url: str, token: str) -> None:
    # It was dropped without a word, where the same id in a token prompt is a 400.
    refused = _chat(gemma_url, logit_bias={token: 5}, max_tokens=1)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "logit_bias"


def test_too_many_prompts_name_the_prompt_not_n(gemma_url: str) -> None:
    refused = httpx.post(
        gemma_url + "/v1/completions", json={"model": "m", "prompt": [[1]] * 2000}, timeout=60
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "prompt"
