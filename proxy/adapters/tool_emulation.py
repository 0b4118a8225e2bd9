"""A forced tool call served through JSON output, for a llama-server whose chat template has no tool-call
format (Q83).

Such a server builds no tool grammar: the tools never reach the model, and ``required`` (or a named
function, sent as ``required`` with that function alone) is answered with text. What the server does
enforce is ``response_format``'s JSON Schema. So the request is sent without ``tools``: a system
instruction lists the functions (their JSON, as llama.cpp's generic tool format wrote them), the answer's
schema is one call object, ``{"name": <const>, "arguments": <the function's parameters>}`` (one branch
per function), and the answer comes back as ``tool_calls`` (:class:`EmulatedCalls`, streamed or not),
with ``finish_reason: "tool_calls"``. Earlier turns are written the same way: an assistant's calls as
those objects, a tool's answer as a user turn that names the call. The bundled backend's generic format
does the same for templates without tools (backend/tool_formats/generic.py); here the server's own
grammar holds the model to it.

A streamed answer's call goes out when the answer ends, as one fragment (the JSON is read whole); an
answer cut off by its token limit, or one that is not a call, goes out as the text it was.
"""

from __future__ import annotations

import json
from typing import Any

from ..normalizer.choices import new_tool_call_id

__all__ = ["EmulatedCalls", "emulated_request"]

INSTRUCTION = (
    "You can call the functions below. Answer with one JSON object that calls one of them, "
    '{"name": <the function\'s name>, "arguments": <an object of its arguments>}, and nothing else.\n'
    "Functions:\n"
)


def emulated_request(body: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """``body`` (its ``tools`` the function tools a call must be of) as the server is sent it."""
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
    schema = branches[0] if len(branches) == 1 else {"anyOf": branches}
    listing = "\n".join(json.dumps(function, ensure_ascii=False) for function in functions)
    sent = {k: v for k, v in body.items() if k not in ("tools", "tool_choice", "parallel_tool_calls")}
    sent["messages"] = _with_instruction(_without_tool_turns(body.get("messages")), INSTRUCTION + listing)
    sent["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "tool_call", "schema": schema, "strict": True},
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
                written.append(
                    json.dumps({"name": function.get("name"), "arguments": parsed}, ensure_ascii=False)
                )
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
    """The server's answers (a body, or a stream's chunks) with each choice's JSON call as ``tool_calls``."""

    def __init__(self) -> None:
        self._texts: dict[Any, list[str]] = {}  # a streamed choice's content so far, by its index

    def __call__(self, payload: Any, /) -> Any:
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list):
            return payload
        return {**payload, "choices": [self._choice(c) if isinstance(c, dict) else c for c in choices]}

    def _choice(self, choice: dict[str, Any]) -> dict[str, Any]:
        message = choice.get("message")
        if isinstance(message, dict):  # a body
            call = _call(_text(message.get("content")), choice.get("finish_reason"))
            if call is None:
                return choice
            return {
                **choice,
                "message": {**message, "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return choice
        held = self._texts.setdefault(choice.get("index"), [])
        held.append(_text(delta.get("content")))
        delta = {k: v for k, v in delta.items() if k != "content"}
        finish = choice.get("finish_reason")
        if finish is None:
            return {**choice, "delta": delta}
        text = "".join(held)
        held.clear()
        call = _call(text, finish)
        if call is None:  # not a call: the text it was
            return {**choice, "delta": {**delta, "content": text}}
        return {
            **choice,
            "delta": {**delta, "tool_calls": [{"index": 0, **call}]},
            "finish_reason": "tool_calls",
        }


def _call(text: str, finish: Any) -> dict[str, Any] | None:
    """The call the answer's JSON makes, unless the answer was cut off or is no call object."""
    if finish == "length":
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", {})
    if not isinstance(arguments, dict):
        return None
    function = {"name": value["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}
    return {"id": new_tool_call_id(), "type": "function", "function": function}
