"""openai-python's ``client.chat.completions.parse()`` through the proxy in front of llama-cpp-python's
own server (Gemma 3 270M, a base model: the grammar alone makes its answer valid JSON). Without the
proxy's translation llama-cpp-python answers ``json_schema`` with a 500, which the SDK retries twice
and then raises as ``InternalServerError`` (issue 20)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from enum import StrEnum
from typing import Any

import openai
import pytest
from pydantic import BaseModel, Field

from tests.proxy.conftest import run_proxy

pytestmark = pytest.mark.backend


class Mood(StrEnum):
    happy = "happy"
    sad = "sad"


class Feeling(BaseModel):
    mood: Mood
    sunny: bool
    word: str = Field(max_length=12)


@pytest.fixture(scope="module")
def proxy_url(llama_cpp_python_url: str) -> Iterator[str]:
    with run_proxy(llama_cpp_python_url) as url:
        yield url


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)


def _parsed(url: str, ask: str, model: type[BaseModel], max_tokens: int) -> Any:
    """``parse()``'s object for ``model``, asked greedily through ``url``."""
    completion = _client(url).chat.completions.parse(
        model="gemma",
        messages=[{"role": "user", "content": ask}],
        response_format=model,
        max_tokens=max_tokens,
        temperature=0,
    )
    return completion.choices[0].message.parsed


def test_parse_returns_the_parsed_object_through_the_proxy(proxy_url: str) -> None:
    parsed = _parsed(proxy_url, "Describe the weather today as JSON.", Feeling, 200)
    assert isinstance(parsed, Feeling)
    assert parsed.mood in (Mood.happy, Mood.sad)
    assert isinstance(parsed.sunny, bool)


def test_llama_cpp_python_alone_fails_the_same_request(llama_cpp_python_url: str) -> None:
    """The deviation the proxy repairs: llama-cpp-python's own answer to OpenAI's json_schema."""
    with pytest.raises(openai.APIStatusError) as failed:
        _client(llama_cpp_python_url).chat.completions.parse(
            model="gemma",
            messages=[{"role": "user", "content": "Describe the weather today as JSON."}],
            response_format=Feeling,
            max_tokens=60,
        )
    assert failed.value.status_code >= 400


def test_a_schema_on_text_completions_is_refused_not_ignored(proxy_url: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        _client(proxy_url).completions.create(
            model="gemma",
            prompt="Weather:",
            max_tokens=5,
            extra_body={
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
            },
        )
    assert refused.value.code == "unsupported_parameter"


class Quoted(BaseModel):
    # pydantic writes the pattern into the schema: a quote and an escape its converter took as raw text.
    code: str = Field(pattern='^"\\d{2}"$')


def test_parse_holds_to_a_pattern_with_a_quote_and_an_escape(proxy_url: str) -> None:
    # Sent as written, llama-cpp-python's converter let the model write a raw quote inside the string
    # (JSON that does not parse) and wrote \d as a GBNF escape llama.cpp cannot read
    # (conformance/json_patterns.py).
    parsed = _parsed(proxy_url, "Give a code.", Quoted, 60)
    assert isinstance(parsed, Quoted)
    assert re.fullmatch('"\\d{2}"', parsed.code), parsed.code


def test_a_named_tools_pattern_reaches_llama_cpp_python_as_its_converter_reads_it(proxy_url: str) -> None:
    # Sent as written, a \d in the parameters of the function a named tool_choice picks ended
    # llama-cpp-python's process ("failed to parse grammar"): it makes that function's grammar with the
    # same converter. Then the server must still answer.
    code = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^\\d{2}$"}},
        "required": ["code"],
    }
    completion = _client(proxy_url).chat.completions.create(
        model="gemma",
        messages=[{"role": "user", "content": "Give a code."}],
        tools=[{"type": "function", "function": {"name": "set_code", "parameters": code}}],
        tool_choice={"type": "function", "function": {"name": "set_code"}},
        max_tokens=60,
        temperature=0,
    )
    (call,) = completion.choices[0].message.tool_calls or []
    assert re.fullmatch("\\d{2}", json.loads(call.function.arguments)["code"]), call.function.arguments
    assert _parsed(proxy_url, "Describe the weather today as JSON.", Feeling, 200) is not None
