"""A chat completion (``chat.completion``, already normalized) as a Responses API ``Response`` object.

Shapes from OpenAI's OpenAPI spec (``Response``, ``OutputMessage``, ``FunctionToolCall``,
``ReasoningItem``, ``ResponseUsage``) and openai-python's ``openai.types.responses``: output items in
the order a model produces them (reasoning, then the message, then the calls); ``finish_reason:
"length"`` is ``status: "incomplete"`` with ``incomplete_details.reason: "max_output_tokens"`` and
``content_filter`` is the same with ``"content_filter"`` (a Response cut short is not ``completed``:
llama-server's own /v1/responses said ``completed`` there, see docs/responses.md, `native`); usage is
renamed (``prompt_tokens`` -> ``input_tokens``...) with both detail objects always present.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

from conformance.request import integer

from .logprobs import text_logprobs

__all__ = [
    "error_object",
    "failed_error",
    "function_call_item",
    "listed_tool",
    "message_item",
    "new_item_id",
    "new_response_id",
    "phase_of",
    "reasoning_item",
    "response_from_chat",
    "response_object",
    "response_status",
    "response_usage",
    "settings_echo",
]


def new_response_id() -> str:
    return "resp_" + secrets.token_hex(24)


def new_item_id(prefix: str) -> str:
    """An output item's id: ``msg_``, ``fc_``, ``ctc_`` or ``rs_`` and 48 hex digits, as OpenAI's look."""
    return f"{prefix}_{secrets.token_hex(24)}"


def response_usage(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Chat usage as ``ResponseUsage`` (None stays None)."""
    if not isinstance(usage, Mapping):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = _count(prompt_details.get("cached_tokens")) if isinstance(prompt_details, Mapping) else 0
    reasoning = (
        _count(completion_details.get("reasoning_tokens")) if isinstance(completion_details, Mapping) else 0
    )
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def response_status(finish_reason: Any) -> tuple[str, dict[str, Any] | None]:
    """``status`` and ``incomplete_details`` for a chat ``finish_reason``."""
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def error_object(error: Mapping[str, Any] | None) -> tuple[Mapping[str, Any], str]:
    """The inner object of an OpenAI error body (or the body, where it is that object), and its message
    (a placeholder where it has none)."""
    inner = error.get("error", error) if isinstance(error, Mapping) else {}
    inner = inner if isinstance(inner, Mapping) else {}
    message = inner.get("message")
    return inner, message if isinstance(message, str) and message else "the response failed"


def failed_error(error: Mapping[str, Any] | None) -> dict[str, Any]:
    """A failed Response's ``error`` (``{code, message}``, ``code`` from ``ResponseErrorCode``) made from
    an OpenAI error body or its inner object."""
    inner, message = error_object(error)
    code = "rate_limit_exceeded" if inner.get("code") == "rate_limit_exceeded" else "server_error"
    return {"code": code, "message": message}


def response_object(
    echo: Mapping[str, Any],
    response_id: str,
    created_at: int,
    *,
    model: str | None,
    status: str,
    output: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    incomplete_details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A whole ``Response`` object: the request's settings (``echo``) and what came of it."""
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": error,
        "incomplete_details": incomplete_details,
        **echo,
        "model": model if model is not None else echo.get("model") or "model",
        "output": output if output is not None else [],
        "usage": usage,
    }
    return response


_ECHOED = (
    "instructions",
    "max_output_tokens",
    "metadata",
    "parallel_tool_calls",
    "previous_response_id",
    "reasoning",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "user",
    "background",
    "service_tier",
    "top_logprobs",
    "max_tool_calls",
    "prompt_cache_key",
    "safety_identifier",
)
"""The request fields a Response repeats."""


def settings_echo(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request's settings as its Response repeats them, defaults filled in (``sampling`` aside:
    conformance/protocols/sampling.py); ``model`` as asked."""
    echo = {key: body.get(key) for key in _ECHOED}
    echo["model"] = body.get("model")
    echo["metadata"] = body.get("metadata") or {}
    echo["tools"] = [listed_tool(tool) for tool in body.get("tools") or ()]
    echo["top_logprobs"] = integer(body.get("top_logprobs")) or 0
    echo["tool_choice"] = body.get("tool_choice") or "auto"
    echo["parallel_tool_calls"] = body.get("parallel_tool_calls", True)
    echo["text"] = body.get("text") or {"format": {"type": "text"}}
    echo["truncation"] = body.get("truncation") or "disabled"
    echo["store"] = body.get("store", True)
    echo["background"] = False
    echo["service_tier"] = "default"
    return echo


def listed_tool(tool: Any) -> Any:
    """A function tool as a Response lists it: ``description``, ``parameters`` and ``strict`` always
    there (null where the client sent none: the Open Responses spec requires the keys)."""
    if not isinstance(tool, Mapping) or tool.get("type") != "function":
        return tool
    return {"description": None, "parameters": None, "strict": None, **tool}


def message_item(
    item_id: str,
    text: str,
    status: str = "completed",
    logprobs: list[dict[str, Any]] | None = None,
    phase: str | None = None,
) -> dict[str, Any]:
    """An assistant ``message`` item; ``phase`` (Open Responses 2026-04-24, optional): ``commentary`` for
    text the model wrote before it called a tool, ``final_answer`` for its last word (``phase_of``)."""
    item = {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [] if status == "in_progress" else [output_text_part(text, logprobs)],
    }
    if phase is not None:
        item["phase"] = phase
    return item


def phase_of(calls_follow: bool) -> str:
    """A finished message's ``phase``: ``commentary`` where a tool call follows it, else ``final_answer``."""
    return "commentary" if calls_follow else "final_answer"


def output_text_part(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [] if status == "in_progress" else [{"type": "reasoning_text", "text": text}]
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": content,
        "encrypted_content": None,
        "status": status,
    }


def function_call_item(
    item_id: str,
    call_id: str,
    name: str,
    arguments: str,
    *,
    custom: bool,
    status: str = "completed",
    namespaced: Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """A ``function_call`` item; for a ``custom`` tool, a ``custom_tool_call`` whose ``input`` is the
    string the function's one ``input`` parameter carried. ``name`` is the chat function's: a tool of a
    ``namespace`` tool (``namespaced``) is named by its own name, with ``namespace`` set."""
    item = _call_item(item_id, call_id, name, arguments, custom=custom, status=status)
    if namespaced and name in namespaced:
        item["namespace"], item["name"] = namespaced[name]
    return item


def _call_item(
    item_id: str, call_id: str, name: str, arguments: str, *, custom: bool, status: str
) -> dict[str, Any]:
    if custom:
        return {
            "id": item_id,
            "type": "custom_tool_call",
            "status": status,
            "call_id": call_id,
            "name": name,
            "input": custom_input(arguments),
        }
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def custom_input(arguments: str) -> str:
    """A custom tool's text from the arguments of the function it was sent as (the text itself when
    the model wrote no such JSON object)."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get("input"), str):
        return str(parsed["input"])
    return arguments


def _calls(tool_calls: Any) -> Iterable[Mapping[str, Any]]:
    return [c for c in tool_calls if isinstance(c, Mapping)] if isinstance(tool_calls, list) else []


def response_from_chat(
    chat: Mapping[str, Any],
    echo: Mapping[str, Any],
    *,
    response_id: str | None = None,
    created_at: int | None = None,
    custom_tools: frozenset[str] = frozenset(),
    namespaced: Mapping[str, tuple[str, str]] | None = None,
    logprobs: bool = False,
) -> dict[str, Any]:
    """The ``Response`` for a whole chat completion (its first choice: a Response has one); with
    ``logprobs`` (the request asked for them), the text's token logprobs (logprobs.py)."""
    choices = chat.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else {}
    message = choice.get("message") if isinstance(choice.get("message"), Mapping) else {}
    assert isinstance(message, Mapping)
    status, incomplete = response_status(choice.get("finish_reason"))
    item_status = "incomplete" if status == "incomplete" else "completed"
    output = _thought_and_said(choice, message, item_status, logprobs)
    output += _called(message, item_status, custom_tools, namespaced)
    if output and item_status != "completed":
        for item in output[:-1]:  # only the last item was cut short
            item["status"] = "completed"
    model = chat.get("model")
    return response_object(
        echo,
        response_id or new_response_id(),
        created_at if created_at is not None else _created(chat),
        model=model if isinstance(model, str) else None,
        status=status,
        output=output,
        usage=response_usage(chat.get("usage")),
        incomplete_details=incomplete,
    )


def _thought_and_said(
    choice: Mapping[str, Any], message: Mapping[str, Any], status: str, logprobs: bool
) -> list[dict[str, Any]]:
    """The answer's ``reasoning`` item and its ``message`` (text, or else a refusal), as far as it has
    them; the text's token logprobs where the request asked for them."""
    output: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        output.append(reasoning_item(new_item_id("rs"), reasoning, status))
    text = message.get("content")
    refusal = not isinstance(text, str) or not text
    if refusal:
        text = message.get("refusal") if isinstance(message.get("refusal"), str) else None
    if not text:
        return output
    entries = None
    if logprobs:
        thought = len(reasoning) if isinstance(reasoning, str) else 0
        alone = not thought and not _calls(message.get("tool_calls"))
        entries = text_logprobs(choice.get("logprobs"), text, refusal=refusal, after=thought, alone=alone)
    phase = phase_of(bool(_calls(message.get("tool_calls"))))
    output.append(message_item(new_item_id("msg"), text, status, entries, phase))
    return output


def _called(
    message: Mapping[str, Any],
    status: str,
    custom_tools: frozenset[str],
    namespaced: Mapping[str, tuple[str, str]] | None,
) -> list[dict[str, Any]]:
    """A ``function_call`` (or ``custom_tool_call``) item per tool call of the message."""
    output = []
    for call in _calls(message.get("tool_calls")):
        function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
        assert isinstance(function, Mapping)
        name = str(function.get("name") or "")
        given = call.get("id")
        call_id = given if isinstance(given, str) and given else new_item_id("call")
        custom = name in custom_tools
        output.append(
            function_call_item(
                new_item_id("ctc" if custom else "fc"),
                call_id,
                name,
                str(function.get("arguments") or ""),
                custom=custom,
                status=status,
                namespaced=namespaced,
            )
        )
    return output


def _created(chat: Mapping[str, Any]) -> int:
    created = chat.get("created")
    return created if isinstance(created, int) and not isinstance(created, bool) else int(time.time())
