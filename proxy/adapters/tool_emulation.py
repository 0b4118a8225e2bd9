"""Tool calls served through JSON output, for a llama-server whose chat template has no tool-call format
(Q83).

Such a server builds no tool grammar: the tools never reach the model, and ``required`` (or a named
function, sent as ``required`` with that function alone) is answered with text. What the server does
enforce is ``response_format``'s JSON Schema. So the request is sent without ``tools``, in llama.cpp's
generic tool format (the one its server used for such templates, and the bundled backend's,
backend/tool_formats/generic.py): a system instruction lists the functions, and the answer's schema is
``{"tool_call": {"name": <const>, "arguments": <the function's parameters>}}`` (one branch per
function), or under ``auto`` that or ``{"response": <text>}``. The answer comes back as ``tool_calls``
with ``finish_reason: "tool_calls"``, or as the response's text (:class:`EmulatedCalls`, streamed or
not). Earlier turns are written the same way: an assistant's calls as those objects, a tool's answer as
a user turn that names its function.

A streamed answer goes out when it ends, a call as one fragment, a response as one piece of text (the
JSON is read whole); an answer cut off by its token limit, or one in neither shape, goes out as the
text it was.
"""

from __future__ import annotations

import json
from typing import Any

from ..normalizer.choices import new_tool_call_id

__all__ = ["EmulatedCalls", "emulated_request"]

INSTRUCTION = (
    "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to "
    "the user's request"
)
REQUIRED_INSTRUCTION = "Respond in JSON format with `tool_call` (a request to call tools)"
"""llama.cpp's generic tool format's words (common/chat.cpp), as the bundled backend's."""

_RESPONSE = {
    "type": "object",
    "properties": {"response": {"type": "string", "minLength": 1}},
    "required": ["response"],
    "additionalProperties": False,
}


def emulated_request(body: dict[str, Any], tools: list[dict[str, Any]], *, required: bool) -> dict[str, Any]:
    """``body`` (its ``tools`` the function tools a call may be of) as the server is sent it: a call
    only when ``required``, else a call or a response."""
    functions = [tool["function"] for tool in tools]
    branches = [
        {
            "type": "object",
            "properties": {
                "name": {"const": function["name"]},
                "arguments": function.get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for function in functions
    ]
    call = {
        "type": "object",
        "properties": {"tool_call": branches[0] if len(branches) == 1 else {"anyOf": branches}},
        "required": ["tool_call"],
        "additionalProperties": False,
    }
    schema = call if required else {"anyOf": [call, _RESPONSE]}
    listing = "\n".join(json.dumps(function, ensure_ascii=False) for function in functions)
    instruction = f"{REQUIRED_INSTRUCTION if required else INSTRUCTION}.\n\nFunctions:\n{listing}"
    sent = {k: v for k, v in body.items() if k not in ("tools", "tool_choice", "parallel_tool_calls")}
    sent["messages"] = _with_instruction(_without_tool_turns(body.get("messages")), instruction)
    sent["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }
    return sent


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return content if isinstance(content, str) else ""


def _without_tool_turns(messages: Any) -> list[Any]:
    """Calls written as the call objects the answer is asked for; tools' answers as user turns."""
    names: dict[str, str] = {}
    out: list[Any] = []
    for message in messages if isinstance(messages, list) else ():
        role = message.get("role") if isinstance(message, dict) else None
        calls = message.get("tool_calls") if role == "assistant" else None
        if isinstance(calls, list) and calls:
            written = []
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict):
                    continue
                names[str(call.get("id"))] = str(function.get("name"))
                arguments = function.get("arguments")
                try:
                    parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
                except ValueError:
                    parsed = arguments
                call = {"name": function.get("name"), "arguments": parsed}
                written.append(json.dumps({"tool_call": call}, ensure_ascii=False))
            text = "\n".join(filter(None, [_text(message.get("content")), *written]))
            out.append({"role": "assistant", "content": text})
        elif role in ("tool", "function"):
            name = names.get(str(message.get("tool_call_id"))) or message.get("name") or "the function"
            out.append({"role": "user", "content": f"The result of {name}: {_text(message.get('content'))}"})
        else:
            out.append(message)
    return out


def _with_instruction(messages: list[Any], instruction: str) -> list[Any]:
    """The instruction in the system turn (after the client's own, where there is one)."""
    first = messages[0] if messages else None
    if isinstance(first, dict) and first.get("role") in ("system", "developer"):
        merged = "\n\n".join(filter(None, [_text(first.get("content")), instruction]))
        return [{**first, "content": merged}, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]


class EmulatedCalls:
    """The server's answers (a body, or a stream's chunks) read as the generic format's JSON: a call as
    ``tool_calls``, a response as its text."""

    def __init__(self) -> None:
        self._texts: dict[Any, list[str]] = {}  # a streamed choice's content so far, by its index

    def __call__(self, payload: Any, /) -> Any:
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list):
            return payload
        return {**payload, "choices": [self._choice(c) if isinstance(c, dict) else c for c in choices]}

    def _choice(self, choice: dict[str, Any]) -> dict[str, Any]:
        finish = choice.get("finish_reason")
        message = choice.get("message")
        if isinstance(message, dict):  # a body
            text, call = _read(_text(message.get("content")), finish)
            if call is None:
                return {**choice, "message": {**message, "content": text}}
            message = {**message, "content": None, "tool_calls": [call]}
            return {**choice, "message": message, "finish_reason": "tool_calls"}
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return choice
        held = self._texts.setdefault(choice.get("index"), [])
        held.append(_text(delta.get("content")))
        delta = {k: v for k, v in delta.items() if k != "content"}
        if finish is None:
            return {**choice, "delta": delta}
        text, call = _read("".join(held), finish)
        held.clear()
        if call is None:
            return {**choice, "delta": {**delta, "content": text}}
        return {
            **choice,
            "delta": {**delta, "tool_calls": [{"index": 0, **call}]},
            "finish_reason": "tool_calls",
        }


def _read(text: str, finish: Any) -> tuple[str, dict[str, Any] | None]:
    """(the text to show, the call) of a whole answer: ``{"tool_call": ...}`` a call, ``{"response":
    ...}`` its text; an answer cut off by its limit, or in neither shape, the text it was."""
    try:
        value = json.loads(text) if finish != "length" else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return text, None
    if isinstance(value.get("response"), str):
        return value["response"], None
    call = value.get("tool_call")
    name = call.get("name") if isinstance(call, dict) else None
    arguments = call.get("arguments", {}) if isinstance(call, dict) else None
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return text, None
    function = {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}
    return "", {"id": new_tool_call_id(), "type": "function", "function": function}
