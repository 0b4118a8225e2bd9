"""A Messages request (``POST /v1/messages``, Anthropic's API reference "Create a Message";
anthropic-python ``types/message_create_params.py``) as the judge reads it, into the one request model
(conformance/request.py): its limit is ``max_tokens`` (required), its stop sequences
``stop_sequences``, its prompt ``system`` and the text of ``messages``; its tools are
``{"name", "description", "input_schema"}``, whose ``input_schema`` a call's ``input`` must match;
its ``tool_choice`` is read as chat's (``any`` is ``required``, ``tool`` a named function), so that the
core's tool rules judge it alike; its structured output is ``output_config.format``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.request import Request, integer

__all__ = ["COUNT_PATH", "PATH", "SCHEMA", "chat_tool_choice", "read_request", "system_text", "texts_of"]

SCHEMA = "messages_request"
"""The request schema (schemas/messages_request.json)."""
PATH = "/v1/messages"
COUNT_PATH = PATH + "/count_tokens"
"""The path that counts a request's prompt tokens (its body a Messages request without ``max_tokens``)."""


def texts_of(content: Any) -> list[str]:
    """The texts of a ``content``: the string, or its ``text`` blocks' text, and a tool result's."""
    if isinstance(content, str):
        return [content]
    texts: list[str] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_result":
            texts += texts_of(block.get("content"))
    return texts


def system_text(system: Any) -> str:
    """``system``: a string, or text blocks (each with its ``cache_control``), joined by a blank line."""
    return "\n\n".join(texts_of(system))


def chat_tool_choice(choice: Any) -> Any:
    """A Messages ``tool_choice`` as chat's: ``auto``, ``none``, ``required`` for ``any``, a named
    function for ``tool``; the value as it is when it is none of these (the schema says why)."""
    if not isinstance(choice, Mapping):
        return choice
    kind = choice.get("type")
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _tool_schemas(tools: Any) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
            schema = tool.get("input_schema")
            schemas[tool["name"]] = schema if isinstance(schema, Mapping) else {}
    return schemas


def read_request(body: Mapping[str, Any]) -> Request:
    """The Messages request ``body`` (a JSON object) as the judge reads a request."""
    model, tools, messages = body.get("model"), body.get("tools"), body.get("messages")
    stops = body.get("stop_sequences")
    choice = body.get("tool_choice")
    config = body.get("output_config")
    texts = [system_text(body.get("system"))] if body.get("system") else []
    for message in messages if isinstance(messages, list) else ():
        texts += texts_of(message.get("content")) if isinstance(message, Mapping) else []
    parallel = not choice.get("disable_parallel_tool_use") if isinstance(choice, Mapping) else None
    return Request(
        known=True,
        endpoint="messages",
        schema=SCHEMA,
        body=body,
        model=model if isinstance(model, str) else None,
        stream=body.get("stream") is True,
        messages=len(messages) if isinstance(messages, list) else 0,
        message_texts=tuple(texts),
        stop=tuple(s for s in stops if isinstance(s, str) and s) if isinstance(stops, list) else (),
        max_tokens=integer(body.get("max_tokens")),
        tools=len(tools) if isinstance(tools, list) else 0,
        tool_choice=chat_tool_choice(choice),
        response_format=config.get("format") if isinstance(config, Mapping) else None,
        tool_schemas=_tool_schemas(tools),
        parallel_tool_calls=False if parallel is False else None,
    )
