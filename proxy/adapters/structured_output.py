"""``response_format`` as the upstream enforces it: OpenAI's ``json_schema`` translated per upstream family.

What each upstream reads (code reading, and measured where named):

- llama-cpp-python (0.3.36): ``ChatCompletionRequestResponseFormat`` is ``{"type": "text" | "json_object",
  "schema"?}`` (``llama_cpp/llama_types.py``); OpenAI's ``json_schema`` fails its request validation
  (measured: 500, "Input should be 'text' or 'json_object'"), and the proxy used to relay the 500, on
  which openai-python's ``.parse()`` retries twice and raises ``InternalServerError`` (issue 20). Its
  chat handlers build a grammar from ``json_object`` with a ``schema`` (``_grammar_for_response_format``
  -> ``LlamaGrammar.from_json_schema``), so the schema is sent that way. Its ``/v1/completions`` has
  no ``response_format`` at all (``CreateCompletionRequest``; the key is ignored): a schema there is
  enforced by nothing, and refused with a 400.
- llama-server: ``/v1/chat/completions`` reads OpenAI's ``json_schema`` itself
  (``oaicompat_chat_params_parse``); its completions, native ``/completion`` and ``/v1/completions``
  alike (``oaicompat_completion_params_parse`` copies the body), read a bare ``json_schema`` key
  (``params_from_json_cmpl``: ``json_schema_to_grammar``) and ignore ``response_format``, so they get
  the schema under that key (``json_object`` as the empty schema, any JSON, as llama-server's own chat
  endpoint reads it).
- Any other upstream (vLLM, OpenAI...) gets the request as the client sent it.

Both llama.cpp servers turn a schema into a grammar with the same converter, which grammars a string's
``pattern`` as if the string were written raw (a quote in it was llama-server's 500, ``\\d`` an
unenforced schema): their schemas' patterns are sent rewritten for it (conformance/json_patterns.py),
and a pattern that cannot be is the 400 ``unsupported_schema`` before anything is sent.
"""

from __future__ import annotations

from typing import Any

from conformance.api_errors import APIError
from conformance.json_patterns import patterns_as_json_text
from conformance.request import Endpoint, named_function

from ..upstream_traits import UpstreamTraits

__all__ = [
    "for_llama_cpp_python",
    "llama_cpp_patterns",
    "named_tool_patterns",
    "native_json_schema",
    "requested_schema",
    "unenforceable_pattern",
    "unenforced_schema",
]


def _format(body: dict[str, Any]) -> dict[str, Any] | None:
    response_format = body.get("response_format")
    return response_format if isinstance(response_format, dict) else None


def requested_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON Schema a ``json_schema`` response format asks the answer to follow, if it gives one."""
    response_format = _format(body)
    if response_format is None or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else None


def for_llama_cpp_python(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with a ``json_schema`` response format as llama-cpp-python's ``json_object`` (and schema)."""
    response_format = _format(body)
    if response_format is None or response_format.get("type") != "json_schema":
        return body
    schema = requested_schema(body)
    # Without a schema (OpenAI's ``json_schema.schema`` is optional), any JSON is what can be enforced.
    translated = {"type": "json_object"} if schema is None else {"type": "json_object", "schema": schema}
    return {**body, "response_format": translated}


def native_json_schema(body: dict[str, Any]) -> dict[str, Any]:
    """A native ``/completion`` body with the client's response format as its ``json_schema`` key (a
    ``grammar`` or ``json_schema`` the client gave wins: it is the more precise ask)."""
    response_format = body.pop("response_format", None)
    if not isinstance(response_format, dict) or "grammar" in body or "json_schema" in body:
        return body
    kind = response_format.get("type")
    if kind == "json_schema":
        schema = requested_schema({"response_format": response_format})
        if schema is not None:
            body["json_schema"] = schema
    elif kind == "json_object":
        schema = response_format.get("schema")
        body["json_schema"] = schema if isinstance(schema, dict) else {}
    return body


def unenforced_schema(traits: UpstreamTraits, endpoint: Endpoint, body: dict[str, Any]) -> APIError | None:
    """A 400 for a response format the upstream would answer without enforcing (never its 500)."""
    response_format = _format(body)
    if response_format is None or response_format.get("type") in (None, "text"):
        return None
    if endpoint == "completions" and traits.schema_format == "json_object_schema":
        return APIError.make(
            "response_format is not supported on /v1/completions by this server: it would not be enforced",
            400,
            code="unsupported_parameter",
            param="response_format",
        )
    return None


def _schema_places(body: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Where ``body`` holds a schema a llama.cpp server makes a grammar of: (the object, its key)."""
    places = [(body, "json_schema")]
    response_format = _format(body)
    if response_format is not None:
        places.append((response_format, "schema"))  # (llama-cpp-python's json_object)
        spec = response_format.get("json_schema")
        if isinstance(spec, dict):
            places.append((spec, "schema"))
    return [(holder, key) for holder, key in places if isinstance(holder.get(key), dict)]


def llama_cpp_patterns(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with the patterns of its schemas as llama.cpp's converter must read them; ``body`` itself
    where it has none (the usual request: one lookup). A pattern that cannot be rewritten (which
    :func:`unenforceable_pattern` refused for the client's own schema) is left out, as that converter
    leaves a pattern it does not support: the JSON output of tools it emulates (tool_emulation.py)."""
    if "json_schema" not in body and "response_format" not in body:
        return body
    places = _schema_places(body)
    if not places:
        return body
    out = {**body}
    if isinstance(out.get("response_format"), dict):
        out["response_format"] = {**out["response_format"]}
        if isinstance(out["response_format"].get("json_schema"), dict):
            out["response_format"]["json_schema"] = {**out["response_format"]["json_schema"]}
    for holder, key in _schema_places(out):
        holder[key] = patterns_as_json_text(holder[key], drop_unenforceable=True)
    return out


def named_tool_patterns(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with the patterns of the function a named ``tool_choice`` picks rewritten as
    :func:`llama_cpp_patterns` does (an unrewritable one left out): llama-cpp-python makes that
    function's parameters a grammar with the same converter, and its process exited on a ``\\d`` in one
    ("failed to parse grammar", measured on 0.3.36). Other tools' schemas only reach the prompt."""
    name = named_function(body.get("tool_choice"))
    tools = body.get("tools")
    if name is None or not isinstance(tools, list):
        return body
    return {**body, "tools": [_patterns_of(tool) if _named(tool, name) else tool for tool in tools]}


def _named(tool: Any, name: str) -> bool:
    function = tool.get("function") if isinstance(tool, dict) else None
    return (
        isinstance(function, dict)
        and function.get("name") == name
        and isinstance(function.get("parameters"), dict)
    )


def _patterns_of(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool["function"]
    parameters = patterns_as_json_text(function["parameters"], drop_unenforceable=True)
    return {**tool, "function": {**function, "parameters": parameters}}


def unenforceable_pattern(body: dict[str, Any]) -> APIError | None:
    """The 400 for a client's schema whose pattern a llama.cpp server cannot be made to enforce."""
    for holder, key in _schema_places(body):
        try:
            patterns_as_json_text(holder[key])
        except ValueError as exc:
            param = "json_schema" if holder is body else "response_format"
            return APIError.make(
                f"'{param}' holds a pattern this server's grammar cannot enforce: {exc}",
                400,
                code="unsupported_schema",
                param=param,
            )
    return None
