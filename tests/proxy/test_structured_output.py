"""``response_format: json_schema`` as each upstream enforces it (proxy/adapters/structured_output.py):
llama-cpp-python's ``json_object`` with ``schema``, llama-server's native ``json_schema`` key, OpenAI's
shape for the rest; a 400 ``unsupported_parameter`` where nothing would enforce it, never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from conformance.api_errors import APIError
from conformance.json_patterns import json_text_pattern
from proxy.adapters import LlamaCppAdapter, OpenAIAdapter
from proxy.adapters.base import UpstreamCall
from proxy.adapters.llamacpp import native_completion_body
from proxy.adapters.structured_output import for_llama_cpp_python, llama_cpp_patterns
from proxy.upstream_traits import UpstreamTraits
from tests.proxy.conftest import run_proxy, upstream_answer
from tests.support.servers import run_asgi

SCHEMA = {
    "type": "object",
    "properties": {"mood": {"type": "string", "enum": ["happy", "sad"]}, "ok": {"type": "boolean"}},
    "required": ["mood", "ok"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "Feeling", "schema": SCHEMA, "strict": True}}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "How are you?"}], "response_format": FORMAT}
# llama-cpp-python 0.3.36's /v1/models entry (llama_cpp/server/app.py ``get_models``).
LLAMA_CPP_PYTHON_MODEL = {"id": "gemma", "object": "model", "owned_by": "me", "permissions": []}


def test_llama_cpp_python_gets_json_object_with_the_schema() -> None:
    assert for_llama_cpp_python(CHAT)["response_format"] == {"type": "json_object", "schema": SCHEMA}
    bare = {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "Any"}}}
    assert for_llama_cpp_python(bare)["response_format"] == {"type": "json_object"}
    plain = {**CHAT, "response_format": {"type": "json_object"}}
    assert for_llama_cpp_python(plain) is plain


def test_the_openai_adapter_translates_only_for_llama_cpp_python() -> None:
    taught = OpenAIAdapter(traits=UpstreamTraits(schema_format="json_object_schema"))
    assert taught.call("chat", CHAT).body["response_format"]["type"] == "json_object"
    assert OpenAIAdapter().call("chat", CHAT).body["response_format"] == FORMAT
    other = OpenAIAdapter(traits=UpstreamTraits(schema_format="json_schema"))
    assert other.call("chat", CHAT).body["response_format"] == FORMAT


def test_the_llamacpp_native_route_gets_the_schema_as_json_schema() -> None:
    body = {"model": "m", "prompt": "Feeling:", "stream": True, "response_format": FORMAT}
    call = LlamaCppAdapter().call("completions", body)
    assert call.path == "/completion"
    assert call.body["json_schema"] == SCHEMA
    assert "response_format" not in call.body
    assert native_completion_body({**body, "response_format": {"type": "json_object"}})["json_schema"] == {}
    given = native_completion_body({**body, "grammar": 'root ::= "x"'})
    assert "json_schema" not in given  # the client's own grammar is the more precise ask
    unstreamed = LlamaCppAdapter().call("completions", {**body, "stream": False, "n": 2})
    assert unstreamed.path == "/v1/completions"
    assert (unstreamed.body["json_schema"], "response_format" in unstreamed.body) == (SCHEMA, False)
    # llama-server's chat endpoint reads OpenAI's json_schema itself.
    assert LlamaCppAdapter().call("chat", CHAT).body["response_format"] == FORMAT


def _upstream(listing: list[dict[str, Any]], seen: list[tuple[str, dict[str, Any]]]) -> Starlette:
    async def answer(request: Request) -> Response:
        body = await request.json()
        seen.append((request.url.path, body))
        if "chat" in request.url.path:
            if body.get("response_format", {}).get("type") == "json_schema":
                # llama-cpp-python's answer to OpenAI's shape (its response_format knows no json_schema).
                return JSONResponse({"error": {"message": "Internal Server Error"}}, status_code=500)
            message = {"role": "assistant", "content": '{"mood": "happy", "ok": true}'}
            return JSONResponse(
                upstream_answer(True, [{"index": 0, "message": message, "finish_reason": "stop"}])
            )
        choice = {"index": 0, "text": "{}", "finish_reason": "stop"}
        return JSONResponse(upstream_answer(False, [choice]))

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": listing})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", answer, methods=["POST"]),
            Route("/v1/completions", answer, methods=["POST"]),
            Route("/v1/models", models),
        ]
    )


def test_the_proxy_asks_llama_cpp_python_for_a_schema_as_it_reads_one() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    with run_asgi(_upstream([LLAMA_CPP_PYTHON_MODEL], seen)) as upstream, run_proxy(upstream) as proxy:
        answer = httpx.post(proxy + "/v1/chat/completions", json=CHAT, timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == '{"mood": "happy", "ok": true}'
        refused = httpx.post(
            proxy + "/v1/completions",
            json={"model": "m", "prompt": "x", "response_format": FORMAT},
            timeout=30,
        )
    assert seen[0][1]["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (
        "unsupported_parameter",
        "response_format",
        "invalid_request_error",
    )
    assert [path for path, _ in seen] == ["/v1/chat/completions"]  # the refused one never went out


@pytest.mark.parametrize("listing", [[{"id": "m", "object": "model", "owned_by": "vllm"}], []])
def test_other_upstreams_get_the_schema_as_the_client_sent_it(listing: list[dict[str, Any]]) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    with run_asgi(_upstream(listing, seen)) as upstream, run_proxy(upstream) as proxy:
        httpx.post(proxy + "/v1/chat/completions", json=CHAT, timeout=30)
    assert seen[0][1]["response_format"] == FORMAT


def test_a_listing_read_for_a_schema_does_not_unlearn_a_serial_upstream() -> None:
    traits = UpstreamTraits()
    traits.broke_off_stream()
    traits.learn_listing([{"id": "m", "object": "model", "owned_by": "vllm"}])
    assert (traits.serial, traits.schema_format) == (True, "json_schema")
    fresh = UpstreamTraits()
    fresh.learn_listing([LLAMA_CPP_PYTHON_MODEL])
    assert (fresh.serial, fresh.schema_format) == (True, "json_object_schema")


QUOTED = {
    "type": "object",
    "properties": {"q": {"type": "string", "pattern": '^a"b$'}},
    "const": {"pattern": "^("},
}
QUOTED_FORMAT = {"type": "json_schema", "json_schema": {"name": "Quoted", "schema": QUOTED}}


def test_both_llama_cpp_servers_get_patterns_their_converter_writes_as_json_and_no_other_does() -> None:
    # llama.cpp's converter grammars a pattern as raw text: '^a"b$' was llama-server's 500, and an
    # escape such as \d an unenforced schema (conformance/json_patterns.py).
    rewritten = json_text_pattern('^a"b$')
    chat = {**CHAT, "response_format": QUOTED_FORMAT}
    sent = LlamaCppAdapter().call("chat", chat).body["response_format"]["json_schema"]["schema"]
    assert sent["properties"]["q"]["pattern"] == rewritten
    assert sent["const"] == {"pattern": "^("}  # (data, not a schema)
    assert chat["response_format"] == QUOTED_FORMAT  # (the client's body is left as it was)
    native = {"model": "m", "prompt": "x", "stream": True, "response_format": QUOTED_FORMAT}
    assert LlamaCppAdapter().call("completions", native).body["json_schema"]["properties"]["q"][
        "pattern"
    ] == (rewritten)
    taught = OpenAIAdapter(traits=UpstreamTraits(schema_format="json_object_schema"))
    assert (
        taught.call("chat", chat).body["response_format"]["schema"]["properties"]["q"]["pattern"] == rewritten
    )
    other = OpenAIAdapter(traits=UpstreamTraits(schema_format="json_schema"))
    assert other.call("chat", chat).body["response_format"] == QUOTED_FORMAT
    assert llama_cpp_patterns(CHAT) == CHAT


def test_a_pattern_llama_cpp_python_cannot_enforce_is_a_400_before_it_is_sent() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    broken = {
        "type": "json_schema",
        "json_schema": {"name": "B", "schema": {"type": "string", "pattern": "^(a$"}},
    }
    with run_asgi(_upstream([LLAMA_CPP_PYTHON_MODEL], seen)) as upstream, run_proxy(upstream) as proxy:
        refused = httpx.post(
            proxy + "/v1/chat/completions", json={**CHAT, "response_format": broken}, timeout=30
        )
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == ("unsupported_schema", "response_format")
    assert "not a valid regular expression" in error["message"]
    assert [path for path, _ in seen if "chat" in path] == []


def test_llama_cpp_python_gets_the_named_functions_patterns_rewritten_and_no_other_tools() -> None:
    # It makes the named function's parameters a grammar with llama.cpp's converter (a \d ended its
    # process); other tools' schemas only reach the prompt, as written.
    digits = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^\\d$"}}}
    tools = [{"type": "function", "function": {"name": name, "parameters": digits}} for name in ("a", "b")]
    body = {
        **CHAT,
        "response_format": None,
        "tools": tools,
        "tool_choice": {"type": "function", "function": {"name": "a"}},
    }
    traits = UpstreamTraits(schema_format="json_object_schema", named_tool_choice_only=True)
    sent = OpenAIAdapter(traits=traits).call("chat", body).body["tools"]
    assert sent[0]["function"]["parameters"]["properties"]["code"]["pattern"] == json_text_pattern("^\\d$")
    assert sent[1] == tools[1]
    assert OpenAIAdapter().call("chat", body).body["tools"] == tools


def test_a_call_made_again_through_json_output_has_its_tools_patterns_rewritten_once() -> None:
    # A server that refuses tools ("tools param requires --jinja flag") is asked again through JSON
    # output, whose schema is made of the tools' parameters: their patterns went raw on that second
    # call (found reviewing), and the client's own schema must not be rewritten a second time.
    digits = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^\\d$"}}}
    tool = {"type": "function", "function": {"name": "f", "parameters": digits}}
    body = {
        **CHAT,
        "response_format": None,
        "json_schema": QUOTED,
        "tools": [tool],
        "tool_choice": "required",
    }
    adapter = LlamaCppAdapter()
    first = adapter.call("chat", body)
    refused = APIError.make("tools param requires --jinja flag", 500)
    again = adapter.instead_of_refused(first, refused)
    assert isinstance(again, UpstreamCall)
    made = again.body["response_format"]["json_schema"]["schema"]["properties"]["tool_call"]
    assert made["properties"]["arguments"]["properties"]["code"]["pattern"] == json_text_pattern("^\\d$")
    assert again.body["json_schema"]["properties"]["q"]["pattern"] == json_text_pattern('^a"b$')
