"""Tool requests as llama-cpp-python serves them: ``tool_choice: "required"`` and the assistant's call.

What llama-cpp-python (0.3.36) does with OpenAI's tool requests (code reading, and the recordings in
conformance/corpus/llama-cpp-python/, made by ``conformant check --record``):

- ``tool_choice: "required"`` is ignored (Q80): its chat handlers build a grammar only for a named choice
  (``llama_chat_format.chat_formatter_to_chat_completion_handler``: ``isinstance(tool_choice, dict)``
  -> ``LlamaGrammar.from_json_schema`` of that function's parameters), so "required" is served as
  ``auto`` and the model answers text (recordings ``llama-cpp-python-tool-choice-required``,
  ``-required-stream``, ``-parallel-tool-calls``). With exactly one function tool, "required" can only
  mean a call of that function, so it is sent as the named choice, which the grammar enforces. With
  several, no request makes it choose one of them: a 400 ``unsupported_parameter`` naming
  ``tool_choice``, never a text answer passed off as served. ``parallel_tool_calls`` is not read at all
  (its ``CreateChatCompletionRequest`` has no such field), which OpenAI's meaning (calls *may* be made in
  parallel) allows; two calls in one turn come only with ``required`` and two tools, refused as above.
- An assistant message with ``tool_calls`` and ``content: null`` (how OpenAI and its SDKs send a call
  back in a round trip) fails its request validation with a 500 (Q81): its
  ``ChatCompletionRequestAssistantMessage.content`` is ``NotRequired[str]``, not nullable (recording
  ``llama-cpp-python-tool-round-trip``: "Input should be a valid string"). ``""`` says the same (no
  text beside the call) and is sent instead.

Both apply only where the upstream is known to be llama-cpp-python (``UpstreamTraits``, from its model
listing); any other upstream gets the request as the client sent it, but for one thing:

- ``tool_choice: {"type": "allowed_tools", ...}`` (OpenAI: "constrains the tools available to the model to
  a pre-defined set", ``mode`` ``auto`` or ``required``) is sent as ``tools`` cut to that set and
  ``tool_choice`` its mode, to every upstream: llama-server reads ``tool_choice`` only as a string (an
  object is taken as ``auto``, every tool callable), llama-cpp-python refuses it. The model then sees only
  the allowed tools, which changes no answer OpenAI's could give. A named or allowed choice naming a
  function ``tools`` does not offer is OpenAI's 400, given by the proxy (``unknown_tool_choice``): sent,
  llama-server would serve it as ``auto``.
"""

from __future__ import annotations

from typing import Any

from conformance.api_errors import APIError
from conformance.request import CHOICE_WITHOUT_TOOLS, allowed_tools_choice, named_function, unoffered_function

from ..upstream_traits import UpstreamTraits

__all__ = [
    "asks_tools",
    "choice_as_tools",
    "tool_request_for",
    "unforceable_tool_choice",
    "unknown_tool_choice",
]


def function_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The tools when every one is a function with a name; None when any other kind is offered."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return None
    named = [
        t
        for t in tools
        if isinstance(t, dict)
        and t.get("type") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
    ]
    return named if len(named) == len(tools) else None


def _null_content_calls(messages: Any) -> bool:
    return isinstance(messages, list) and any(_null_content(m) for m in messages)


def _null_content(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and message.get("role") == "assistant"
        and message.get("content", "") is None
    )


def asks_tools(body: dict[str, Any]) -> bool:
    """Whether ``body`` is a tool request these repairs may concern (the upstream's kind then matters)."""
    return "tools" in body or _null_content_calls(body.get("messages"))


def unforceable_tool_choice(traits: UpstreamTraits, body: dict[str, Any]) -> APIError | None:
    """A 400 for ``tool_choice: "required"`` on an upstream that would ignore it, unless exactly one function
    tool is offered (then sent as that function named)."""
    if not traits.named_tool_choice_only or body.get("tool_choice") != "required":
        return None
    tools = function_tools(body)
    if tools is not None and len(tools) == 1:
        return None  # sent as the named choice
    return APIError.make(
        "tool_choice 'required' is supported by this server only with exactly one function tool: it enforces "
        'a call only of a named function (tool_choice {"type": "function", "function": {"name": ...}})',
        400,
        code="unsupported_parameter",
        param="tool_choice",
    )


def tool_request_for(traits: UpstreamTraits, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the upstream enforces it: "required" with one function tool as that function named
    (``named_tool_choice_only``), an assistant message's ``content: null`` as ``""``
    (``assistant_content_string``)."""
    if traits.named_tool_choice_only and body.get("tool_choice") == "required":
        tools = function_tools(body)
        if tools is not None and len(tools) == 1:
            name = tools[0]["function"]["name"]
            body = {**body, "tool_choice": {"type": "function", "function": {"name": name}}}
    messages = body.get("messages")
    if traits.assistant_content_string and isinstance(messages, list) and _null_content_calls(messages):
        body = {**body, "messages": [{**m, "content": ""} if _null_content(m) else m for m in messages]}
    return body


def choice_as_tools(body: dict[str, Any], *, named: bool = False) -> dict[str, Any]:
    """``body`` with an ``allowed_tools`` choice (and, when ``named``, a named function's) sent as the
    tools it allows and its mode (``required`` for a named function)."""
    chosen = _chosen(body)
    tools = function_tools(body)
    if chosen is None or tools is None or (chosen[0] == "function" and not named):
        return body
    mode, names = chosen
    if not set(names) <= {tool["function"]["name"] for tool in tools}:
        return body  # refused by unknown_tool_choice
    kept = [tool for tool in tools if tool["function"]["name"] in names]
    return {**body, "tools": kept, "tool_choice": "required" if mode == "function" else mode}


def unknown_tool_choice(body: dict[str, Any]) -> APIError | None:
    """OpenAI's 400 for a named or ``allowed_tools`` choice naming a function ``tools`` does not offer:
    checked here because llama-server would serve it as ``auto`` (Q83), every tool callable; and for a
    ``tool_choice`` without ``tools``, which llama-server answered with text under ``required`` (the
    bundled backend refuses it with the same words)."""
    if body.get("tool_choice") is not None and not body.get("tools"):
        return APIError.make(CHOICE_WITHOUT_TOOLS, 400, code="invalid_value", param="tool_choice")
    chosen = _chosen(body)
    offered = {tool["function"]["name"] for tool in function_tools(body) or ()}
    unknown = [name for name in chosen[1] if name not in offered] if chosen else []
    if not unknown:
        return None
    return APIError.make(
        unoffered_function(unknown[0]),
        400,
        code="invalid_value",
        param="tool_choice",
    )


def _chosen(body: dict[str, Any]) -> tuple[str, tuple[str, ...]] | None:
    """("function", (name,)) for a named choice, (mode, names) for an ``allowed_tools`` one, as the
    judge reads them (conformance.request); None for any other, or without ``tools``."""
    choice = body.get("tool_choice")
    tools = body.get("tools")
    if not isinstance(choice, dict) or not isinstance(tools, list) or not tools:
        return None
    allowed = allowed_tools_choice(choice)
    if allowed is not None:
        return allowed
    function = named_function(choice)
    return ("function", (function,)) if function is not None else None
