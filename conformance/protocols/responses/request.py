"""A Responses API request (``POST /v1/responses``, openapi.yaml ``CreateResponse``) as the judge reads
it, into the one request model (conformance/request.py): its limit is ``max_output_tokens``, its prompt
``instructions`` and the text of its ``input`` (a string, or items whose ``content`` is a string or
``input_text``/``output_text`` parts), its structured output ``text.format`` (``schema`` at the top of
the format, where chat nests it in ``json_schema``), its function tools ``{"type": "function", "name",
"parameters"}`` (chat nests them in ``function``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.request import Request, function_schemas, integer, message_texts

__all__ = ["INCLUDE_LOGPROBS", "SCHEMA", "input_texts", "read_request", "top_logprobs"]

SCHEMA = "response_request"
"""The request schema (schemas/response_request.json)."""

INCLUDE_LOGPROBS = "message.output_text.logprobs"
"""The ``include`` value that asks a Response for its text's token logprobs (with ``top_logprobs``
alternatives each); without it OpenAI gives none, whatever ``top_logprobs`` says."""


def input_texts(body: Mapping[str, Any]) -> tuple[str, ...]:
    """The text a Responses request gives the model: ``instructions``, then ``input`` (a string, or its
    items' string ``content`` and text parts, and the output of function calls)."""
    texts = [body["instructions"]] if isinstance(body.get("instructions"), str) else []
    given = body.get("input")
    if isinstance(given, str):
        return (*texts, given)
    items = [item for item in given if isinstance(item, Mapping)] if isinstance(given, list) else []
    outputs = (item.get("output") for item in items if item.get("type") == "function_call_output")
    return (*texts, *message_texts(items), *(o for o in outputs if isinstance(o, str)))


def top_logprobs(body: Mapping[str, Any]) -> int | None:
    """The alternatives per token a Responses request asks for its text's logprobs (``top_logprobs``,
    0 when not given), or None when its ``include`` does not ask for logprobs at all."""
    include = body.get("include")
    if not isinstance(include, list) or INCLUDE_LOGPROBS not in include:
        return None
    top = integer(body.get("top_logprobs"))
    return top if top is not None else 0


def read_request(body: Mapping[str, Any]) -> Request:
    """The Responses request ``body`` (a JSON object) as the judge reads a request."""
    model, tools, text = body.get("model"), body.get("tools"), body.get("text")
    given, parallel = body.get("input"), body.get("parallel_tool_calls")
    top = top_logprobs(body)
    return Request(
        known=True,
        endpoint="responses",
        schema=SCHEMA,
        body=body,
        model=model if isinstance(model, str) else None,
        stream=body.get("stream") is True,
        messages=len(given) if isinstance(given, list) else int(isinstance(given, str)),
        message_texts=input_texts(body),
        max_tokens=integer(body.get("max_output_tokens")),
        logprobs=top is not None,
        top_logprobs=top,
        tools=len(tools) if isinstance(tools, list) else 0,
        tool_choice=body.get("tool_choice"),
        response_format=text.get("format") if isinstance(text, Mapping) else None,
        tool_schemas=function_schemas(tools),
        parallel_tool_calls=parallel if isinstance(parallel, bool) else None,
    )
