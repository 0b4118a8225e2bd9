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
a user turn that names its function. The format's words and the reading of a reply cut off are the
bundled backend's (conformance/generic_tools.py).

A streamed answer goes out when it ends, a call as one fragment, a response as one piece of text (the
JSON is read whole). An answer cut off by its token limit gives what it holds: the response's text so
far, or the call with its arguments so far (as OpenAI's cut-off call), also one cut before its arguments
where the part of its name written (or the forced choice) tells the function; never the envelope, but
for an ``auto`` answer cut before it said whether it is a call or a response (an empty answer finished
``length`` reads as the upstream's lost text, Q14, to any judge but the proxy, which read the text).
The client's ``stop`` is not sent (it would cut the JSON): the proxy cuts the response's text at it, as
it does for upstreams that ignore it (Q76). Each function's ``$defs`` are renamed and moved to the root
of the answer's schema (conformance/schema_refs.py), where its ``$ref``s then point.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from conformance import jsoncodec
from conformance.api_errors import APIError
from conformance.generic_tools import (
    INSTRUCTION,
    REQUIRED_INSTRUCTION,
    cut_call_name,
    partial_call,
    partial_response,
)
from conformance.request import content_texts
from conformance.schema_refs import definitions_prefix, hoisted, localized

from ..normalizer.choices import new_tool_call_id

__all__ = ["EmulatedCalls", "emulated_request", "refuses_tools", "without_tools"]

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
                "arguments": localized(
                    function.get("parameters") or {"type": "object"}, definitions_prefix(function["name"])
                ),
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
    schema = hoisted(call if required else {"anyOf": [call, _RESPONSE]})
    listing = "\n".join(json.dumps(function, ensure_ascii=False) for function in functions)
    instruction = f"{REQUIRED_INSTRUCTION if required else INSTRUCTION}.\n\nFunctions:\n{listing}"
    sent = {k: v for k, v in body.items() if k not in ("tools", "tool_choice", "parallel_tool_calls", "stop")}
    sent["messages"] = _with_instruction(_without_tool_turns(body.get("messages")), instruction)
    sent["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }
    return sent


def without_tools(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` under ``tool_choice: "none"`` for a server that refuses tools: no tools, no call to make,
    and the conversation's calls and their results written as the JSON output route writes them."""
    sent = {k: v for k, v in body.items() if k not in ("tools", "tool_choice", "parallel_tool_calls")}
    sent["messages"] = _without_tool_turns(body.get("messages"))
    return sent


_REFUSES_TOOLS = re.compile(r"tools param requires --jinja", re.IGNORECASE)
"""What a llama.cpp server started without ``--jinja`` answers a request with ``tools``: ik_llama.cpp
at 540a26514 (tests/data/batteries/ik_llama.cpp-540a265/tools.sse: 500 ``tools param requires --jinja
flag``; its message, and llama.cpp's before jinja became its default, utils.hpp
``oaicompat_completion_params_parse``)."""


def refuses_tools(error: APIError) -> bool:
    """Whether an upstream's error answer says it takes no ``tools`` at all, as opposed to refusing
    this request's: the request is then served through JSON output."""
    return _REFUSES_TOOLS.search(error.message) is not None


def _text(content: Any) -> str:
    return "".join(content_texts(content))


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
                    parsed = jsoncodec.loads(arguments) if isinstance(arguments, str) else arguments
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
    ``tool_calls``, a response as its text. ``names``: the functions a call may be of; ``required``:
    the answer's schema holds a call only (``tool_choice`` forced it), so that an answer cut off before
    its function's name is still a call where that name can be told (``cut_call_name``), and never text."""

    def __init__(self, names: Sequence[str] = (), *, required: bool = False) -> None:
        self._texts: dict[Any, list[str]] = {}  # a streamed choice's content so far, by its index
        self._names = tuple(names)
        self._required = required

    def __call__(self, payload: Any, /) -> Any:
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list):
            return payload
        return {**payload, "choices": [self._choice(c) if isinstance(c, dict) else c for c in choices]}

    def _choice(self, choice: dict[str, Any]) -> dict[str, Any]:
        finish = choice.get("finish_reason")
        message = choice.get("message")
        if isinstance(message, dict):  # a body
            text, call, finish = self._read(_text(message.get("content")), finish)
            if call is None:
                return {**choice, "message": {**message, "content": text}, "finish_reason": finish}
            message = {**message, "content": None, "tool_calls": [call]}
            return {**choice, "message": message, "finish_reason": finish}
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return choice
        held = self._texts.setdefault(choice.get("index"), [])
        held.append(_text(delta.get("content")))
        delta = {k: v for k, v in delta.items() if k != "content"}
        if finish is None:
            return {**choice, "delta": delta}
        text, call, finish = self._read("".join(held), finish)
        held.clear()
        if call is None:
            return {**choice, "delta": {**delta, "content": text}, "finish_reason": finish}
        return {
            **choice,
            "delta": {**delta, "tool_calls": [{"index": 0, **call}]},
            "finish_reason": finish,
        }

    def _read(self, text: str, finish: Any) -> tuple[str, dict[str, Any] | None, Any]:
        """(the text to show, the call, the finish) of an answer: ``{"tool_call": ...}`` a call (finished
        ``tool_calls``, also where the limit fell on the whitespace the grammar allows after it),
        ``{"response": ...}`` its text; one cut off by its limit, what it holds so far (a call cut off
        finishes ``length``, as OpenAI's); one in neither shape, the text it was. The schema's grammar
        ends only a whole envelope, so one that does not parse was cut by the limit whatever the finish
        says (ik_llama.cpp finishes ``stop`` at its limit: its cut envelope went out as the answer's
        text)."""
        try:
            value = jsoncodec.loads(text)  # (json.loads: RecursionError on 1,000-deep arguments, a 500)
        except jsoncodec.TooDeep:
            return text, None, finish  # whole, but past what the proxy reads: the text it was
        except ValueError:
            if (opened := self._opened(text)) is not None:
                return (*opened, "length")
            if finish == "length":
                # Cut before it said what it is: an envelope is "" under a forced choice (no text where
                # the schema allowed a call only: found by black-box testing, a forced call cut at 3
                # tokens came out as '{"tool_call": {"' in the content); other text stays as it was (a
                # server that ignored the schema wrote it; empty, it would read as lost text, Q14).
                return ("" if self._required and text.lstrip().startswith("{") else text), None, finish
            return text, None, finish
        if not isinstance(value, dict):
            return text, None, finish
        if isinstance(value.get("response"), str):
            return value["response"], None, finish
        call = value.get("tool_call")
        name = call.get("name") if isinstance(call, dict) else None
        arguments = call.get("arguments", {}) if isinstance(call, dict) else None
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return text, None, finish
        return "", _tool_call(name, json.dumps(arguments, ensure_ascii=False)), "tool_calls"

    def _opened(self, text: str) -> tuple[str, dict[str, Any] | None] | None:
        """What an answer that does not parse holds where it began the format's envelope (cut off by its
        limit): the response's text so far (its escapes read), or the call with its name and its
        arguments' text so far, also one cut before its arguments whose function can be told; None
        where no envelope began."""
        if (reply := partial_response(text)) is not None:
            return reply, None
        if (call := self._cut_call(text)) is not None:
            return "", call
        return None

    def _cut_call(self, text: str) -> dict[str, Any] | None:
        """The call an answer cut off by its limit had begun: its name and its arguments' text so far,
        or, cut before its arguments, the one function its name (or the forced choice) can be of."""
        if (call := partial_call(text)) is not None:
            return _tool_call(*call)
        name = cut_call_name(text, self._names, required=self._required)
        return None if name is None else _tool_call(name, "")


def _tool_call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": new_tool_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}
