"""A Responses API request (``POST /v1/responses``) as the chat-completions request that serves it.

Pure: a dict in, a dict out, or a :class:`TranslationError` (a 400 naming the parameter, OpenAI's
error words). What is translated and what is refused, and why, is in docs/responses.md; in short:

- ``input`` (a string, or items: ``message`` with ``input_text``/``output_text``/``refusal``/
  ``input_image``/``input_file`` parts (input_files.py), ``function_call``, ``function_call_output``,
  ``custom_tool_call`` and its output,
  ``reasoning``) and ``instructions`` become chat messages; a ``function_call_output`` without ``call_id``
  that names its tool (Codex CLI's goal) as a call of that tool and its answer. A ``developer`` message is
  sent as ``system``: local chat templates (llama.cpp's Jinja ones, llama-cpp-python's formats) know no
  ``developer`` role; consecutive ``system`` (or ``user``) text messages are joined, for templates that
  want roles to alternate. ``reasoning`` items are left out: chat templates drop earlier turns' reasoning
  anyway, and their ``encrypted_content`` is OpenAI's.
- ``tools``: ``function`` tools as they are; ``custom`` (freeform) tools, which Codex CLI sends for
  ``apply_patch``, as a function with one string parameter ``input`` (the answer's call is a
  ``custom_tool_call`` again); ``web_search`` (Codex CLI's default since 2026-01) as a function
  ``web_search`` with one text argument ``query``; ``namespace`` tools (Codex CLI 0.171 groups its
  multi-agent tools in one by default) as one function per inner tool, named
  ``<namespace>__<name>`` (see NAMESPACE_SEPARATOR), whose calls come back with ``name`` and
  ``namespace`` apart. Other hosted tools (``file_search``,
  ``code_interpreter``, ``computer_use_preview``, ``image_generation``, ``mcp``, ``local_shell``,
  ``shell``, ``apply_patch``...) are refused with a 400 that names the type: they need OpenAI's
  servers or an agreed action format that a chat-completions model has no way to follow.
- ``text.format`` becomes ``response_format``; ``reasoning.effort`` ``reasoning_effort``;
  ``max_output_tokens`` ``max_tokens`` (the name every local server reads); ``temperature``,
  ``top_p``, ``parallel_tool_calls``, ``tool_choice``, ``user`` as they are; ``include`` with
  ``message.output_text.logprobs`` ``logprobs`` and ``top_logprobs`` (see logprobs.py); ``stream`` with
  ``stream_options.include_usage`` (a Response carries its usage on completion).
- ``metadata``, ``store``, ``instructions`` and the other settings are echoed on the Response
  (:attr:`ChatTranslation.echo`), not sent upstream.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from conformance.api_errors import quoted
from conformance.request import CHOICE_WITHOUT_TOOLS, integer
from conformance.request_validation import unmatched_pattern

from ..sampling import sampling_used
from ..web_search import offer_web_search
from .compaction import compaction_message
from .events import ResponseEvents
from .input_files import file_part
from .logprobs import chat_logprobs
from .refusals import TranslationError
from .response import response_from_chat, settings_echo

__all__ = ["ChatTranslation", "TranslationError", "responses_error", "translate_request"]

WEB_SEARCH_TOOLS = frozenset(
    {"web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26"}
)
"""Sent as a function ``web_search`` with one text argument ``query``: Codex CLI sends ``web_search``
by default since 2026-01 (a refusal would fail every turn); the model may call it, and the call comes
back as a ``function_call`` for the client to run or to answer as unsupported."""

HOSTED_TOOLS = frozenset(
    {
        "file_search",
        "code_interpreter",
        "computer_use_preview",
        "computer",
        "image_generation",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "tool_search",
    }
)
"""Tool types that run on OpenAI's servers, or ask the model for an action format it was trained on,
which a chat-completions model cannot be held to: refused."""

CUSTOM_TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string"}},
    "required": ["input"],
    "additionalProperties": False,
}
"""The parameters of the function a ``custom`` (freeform) tool is sent as."""


@dataclass(frozen=True, slots=True)
class ChatTranslation:
    """A Responses request as chat: the chat body, and what the answer's translation needs."""

    chat: dict[str, Any]
    """The chat-completions request body."""
    echo: dict[str, Any]
    """The request's settings as the Response object repeats them (defaults filled in)."""
    custom_tools: frozenset[str] = field(default_factory=frozenset)
    """Names of ``custom`` tools: their calls are answered as ``custom_tool_call`` items."""
    namespaced: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Chat function name -> (namespace, name) for the tools of ``namespace`` tools: their calls are
    answered with the inner ``name`` and ``namespace`` set."""
    tool_params: tuple[str, ...] = ()
    """The client's parameter each chat tool came from, in order (``tools[2]``, ``tools[0].tools[1]``):
    an error about ``tools[i].function`` of the chat request names the tool the client sent."""

    def error(self, body: dict[str, Any]) -> dict[str, Any]:
        """``responses_error`` of an error about this translation's chat request."""
        return responses_error(body, self.tool_params, self.namespaced)

    @property
    def stream(self) -> bool:
        return self.chat.get("stream") is True

    def sampled(self, defaults: Mapping[str, float] | None) -> ChatTranslation:
        """This translation with the sampling the answer is generated with in its echo: the request's
        values, else the core's ``defaults`` (None: unknown, and then the chat request states the API's
        own; see conformance/protocols/sampling.py)."""
        return replace(self, echo={**self.echo, **sampling_used(self.chat, defaults)})

    @property
    def logprobs(self) -> bool:
        """Whether the answer's text carries its token logprobs (the request's ``include`` asked)."""
        return self.chat.get("logprobs") is True

    def events(self, model: str | None = None) -> ResponseEvents:
        """The Response events of the chat stream that answers this request."""
        return ResponseEvents(
            self.echo,
            model=model,
            custom_tools=self.custom_tools,
            namespaced=self.namespaced,
            logprobs=self.logprobs,
        )

    def response(self, chat: Mapping[str, Any]) -> dict[str, Any]:
        """The Response of the whole chat completion that answers this request."""
        return response_from_chat(
            chat,
            self.echo,
            custom_tools=self.custom_tools,
            namespaced=self.namespaced,
            logprobs=self.logprobs,
        )


def _text_of_parts(parts: Any, param: str) -> str:
    """The text of an output's parts (a tool output given as ``input_text`` parts)."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        raise TranslationError(
            f"Invalid type for '{param}': expected a string or an array.", param, "invalid_type"
        )
    texts = []
    for index, part in enumerate(parts):
        if not isinstance(part, Mapping) or not isinstance(part.get("text"), str):
            raise TranslationError(
                f"Invalid '{param}[{index}]': only text parts are supported in a tool output.",
                f"{param}[{index}]",
            )
        texts.append(part["text"])
    return "".join(texts)


def _content(content: Any, param: str) -> str | list[dict[str, Any]]:
    """A message's content as chat content: a string, or chat parts (text and images)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise TranslationError(
            f"Invalid type for '{param}': expected a string or an array of content parts.",
            param,
            "invalid_type",
        )
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        where = f"{param}[{index}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise TranslationError.missing(f"{where}.text")
            parts.append({"type": "text", "text": text})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise TranslationError(
                    f"Invalid '{where}': only images given by 'image_url' are supported.",
                    where,
                    "unsupported_value",
                )
            image: dict[str, Any] = {"url": url}
            if part.get("detail") in ("low", "high", "auto"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_file":
            parts.append(file_part(part, where))
        else:
            raise TranslationError(
                f"Invalid '{where}': content of type {kind!r} is not supported by this server.",
                where,
                "unsupported_value",
            )
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)  # one string: what every chat template reads
    return parts


def _call_id(item: Mapping[str, Any], param: str) -> str:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise TranslationError.missing(f"{param}.call_id")
    return call_id


class _Messages:
    """Chat messages built from input items: a tool call joins the assistant message before it, and a
    text message joins the one before it when both are ``system`` or both ``user`` text. Codex CLI
    sends its instructions, sandbox rules and environment as separate developer and user messages, and
    the chat templates of many models (Gemma's, Mistral's) refuse roles that do not alternate.

    The texts of a run of joined messages are collected and joined once (``done``): joining at each item
    re-copied the whole run every time, and 400,000 one-word items under ``--max-body`` cost 18.7 s of
    the event loop (issue 32)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.call_ids: set[str] = set()
        """Every tool call's id so far: a made one must not take the id of another call."""
        self.unanswered: dict[str, None] = {}
        """The ids of the calls no output has answered yet, in order."""
        self._parts: list[str] = []
        """The texts of the last message, while more may join it."""

    def add(self, message: dict[str, Any]) -> None:
        last = self.messages[-1] if self.messages else None
        role, content = message["role"], message.get("content")
        if (
            last is not None
            and self._parts
            and role in ("system", "user")
            and last["role"] == role
            and isinstance(content, str)
        ):
            self._parts.append(content)
            return
        self._join()
        self.messages.append(message)
        if role in ("system", "user") and isinstance(content, str):
            self._parts = [content]

    def add_call(self, call: dict[str, Any]) -> None:
        self._join()
        self.call_ids.add(call["id"])
        self.unanswered[call["id"]] = None
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "assistant" and isinstance(last.get("content") or "", str):
            last.setdefault("tool_calls", []).append(call)
            return
        # "" rather than null, which OpenAI takes alike: llama-cpp-python 0.3.36 refuses a null content
        # (500, its request model wants a string) and Jinja templates that ``trim`` it fail on null.
        self.messages.append({"role": "assistant", "content": "", "tool_calls": [call]})

    def answer(self, call_id: str, output: str | list[dict[str, Any]]) -> None:
        self.add({"role": "tool", "tool_call_id": call_id, "content": output})
        self.unanswered.pop(call_id, None)

    def done(self) -> list[dict[str, Any]]:
        """The chat messages; OpenAI's 400 where a call has no output: a chat template shows a call
        without its answer as something else, or fails on it (the chat route refuses it too)."""
        if self.unanswered:
            raise TranslationError(
                f"No tool output found for function call {quoted(next(iter(self.unanswered)))}.",
                "input",
                "invalid_value",
            )
        self._join()
        return self.messages

    def _join(self) -> None:
        if len(self._parts) > 1:
            self.messages[-1]["content"] = "\n\n".join(self._parts)
        self._parts = []


def _add_item(out: _Messages, item: Any, param: str) -> None:
    if not isinstance(item, Mapping):
        raise TranslationError(f"Invalid type for '{param}': expected an object.", param, "invalid_type")
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise TranslationError(
                f"Invalid value for '{param}.role': {role!r}. Supported values are: 'user', 'assistant', "
                "'system', and 'developer'.",
                f"{param}.role",
            )
        out.add(
            {
                "role": "system" if role == "developer" else role,
                "content": _content(item.get("content"), f"{param}.content"),
            }
        )
    elif kind in ("function_call", "custom_tool_call"):
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise TranslationError.missing(f"{param}.name")
        if kind == "function_call":
            arguments = item.get("arguments")
            if not isinstance(arguments, str):
                raise TranslationError.missing(f"{param}.arguments")
        else:
            arguments = _json({"input": str(item.get("input", ""))})
        call = {
            "id": _call_id(item, param),
            "type": "function",
            "function": {"name": _chat_name(name, item.get("namespace")), "arguments": arguments},
        }
        out.add_call(call)
    elif kind == "function_call_output" and item.get("call_id") is None and _named(item):
        _add_unasked_output(out, item, param)
    elif kind in ("function_call_output", "custom_tool_call_output"):
        call_id = _call_id(item, param)
        if call_id not in out.call_ids:
            # OpenAI's 400: an output of no call in the conversation (a chat template would show an
            # answer to nothing; Open Responses' failed-continuation test sends one).
            raise TranslationError(
                f"No tool call found for function call output with call_id {quoted(call_id)}.",
                f"{param}.call_id",
                "invalid_value",
            )
        out.answer(call_id, _text_of_parts(item.get("output"), f"{param}.output"))
    elif kind == "reasoning":
        return  # see the module's docstring
    elif kind == "compaction":  # what POST /v1/responses/compact answered: its summary (compaction.py)
        out.add(compaction_message(item, param))
    elif kind == "item_reference":
        raise TranslationError(
            f"Invalid '{param}': an 'item_reference' needs the response store; send the item itself.",
            param,
            "unsupported_value",
        )
    else:
        raise TranslationError(
            f"Invalid '{param}': input items of type {kind!r} are not supported by this server.",
            f"{param}.type",
            "unsupported_value",
        )


def _named(item: Mapping[str, Any]) -> bool:
    return isinstance(item.get("name"), str) and bool(item["name"])


def _add_unasked_output(out: _Messages, item: Mapping[str, Any], param: str) -> None:
    """A ``function_call_output`` without ``call_id`` that names its tool: an output the client adds on
    its own, not the answer to a call of the model's (the spec makes ``call_id`` optional and gives the
    item ``name`` and ``namespace``; Codex CLI 0.171 sends its goal this way, as the output of
    ``agent.goal_objective``, after a ``create_goal`` call). Chat has no tool message without the call
    it answers, and chat templates render a tool message against the call before it (some refuse an
    unanswered one), so it is sent as a call of that tool with no arguments and its tool message. The
    call's id is a digest of the item's ``id`` (else of its place), the same in every request that
    repeats it, so that a prefix cache keeps matching; of its place too where that id is taken."""
    given = item.get("id")
    source = given if isinstance(given, str) and given else param
    call_id = _made_id(source)
    if call_id in out.call_ids:  # the same item sent twice, or an id a call of the model's has
        call_id = _made_id(f"{source}\0{param}")
    name = _chat_name(item["name"], item.get("namespace"))
    out.add_call({"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}})
    out.answer(call_id, _text_of_parts(item.get("output"), f"{param}.output"))


def _made_id(source: str) -> str:
    return "call_" + hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _messages(body: Mapping[str, Any], previous: Sequence[Any]) -> list[dict[str, Any]]:
    out = _Messages()
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        out.add({"role": "system", "content": instructions})
    elif instructions is not None and not isinstance(instructions, str):
        raise TranslationError(
            "Invalid type for 'instructions': expected a string.", "instructions", "invalid_type"
        )
    for index, item in enumerate(previous):
        _add_item(out, item, f"previous[{index}]")
    given = body.get("input")
    if isinstance(given, str):
        out.add({"role": "user", "content": given})
    elif isinstance(given, list):
        for index, item in enumerate(given):
            _add_item(out, item, f"input[{index}]")
    elif given is not None:
        raise TranslationError(
            "Invalid type for 'input': expected a string or an array of input items.", "input", "invalid_type"
        )
    messages = out.done()
    if not messages or all(m["role"] == "system" for m in messages):
        raise TranslationError.missing("input")
    return messages


NAMESPACE_SEPARATOR = "__"
"""Joins a ``namespace`` tool's name and an inner tool's name into the one chat function name the
model sees (``multi_agent_v1__spawn_agent``). Chat has no namespaces, and a function name must match
``^[a-zA-Z0-9_-]{1,64}$`` (OpenAI's rule, which strict upstreams repeat), so ``.`` or ``/`` would be
refused; ``__`` is what Codex CLI itself uses to join an MCP server's name and its tool's
(``mcp__server__tool``). A joined name equal to another tool's is refused (400), never guessed."""


_CHAT_NAME_LENGTH = 64
"""The longest chat function name (the chat request schema's pattern, OpenAI's)."""
_NAMESPACE_NAME = re.compile(r"[a-zA-Z0-9_-]+")


@dataclass(frozen=True, slots=True)
class _Tools:
    chat: list[dict[str, Any]] = field(default_factory=list)
    custom: set[str] = field(default_factory=set)
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    params: list[str] = field(default_factory=list)  # the client's parameter of each chat tool

    def named(self, name: str) -> str:
        """The chat name of the tool a choice names ``name``: its own, or a namespace's tool's where
        only that holds a tool of the name. ToolChoiceFunction has no namespace: a client forces a
        namespace's ``read`` as ``{"type": "function", "name": "read"}`` (it was the 400 "no function
        named 'read'"); a name two namespaces hold is a 400 asking for the namespace."""
        if any(tool["function"]["name"] == name for tool in self.chat):
            return name
        held = {chat: namespace for chat, (namespace, inner) in self.namespaced.items() if inner == name}
        if len(held) > 1:
            raise TranslationError(
                f"Invalid value for 'tool_choice': {quoted(name)!r} names a tool of more than one namespace "
                f"({', '.join(repr(quoted(n)) for n in held.values())}); give its 'namespace' too.",
                "tool_choice",
                "invalid_value",
            )
        return next(iter(held), name)

    def add(self, tool: Mapping[str, Any], param: str, namespace: str | None = None) -> None:
        """A ``function`` or ``custom`` tool as a chat function (in ``namespace`` when given)."""
        kind = tool.get("type")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise TranslationError.missing(f"{param}.name")
        chat_name = name if namespace is None else f"{namespace}{NAMESPACE_SEPARATOR}{name}"
        if namespace is not None and len(chat_name) > _CHAT_NAME_LENGTH:
            raise TranslationError(
                f"Invalid '{param}.name': a namespace's tool is offered to the model as "
                f"'<namespace>{NAMESPACE_SEPARATOR}<name>', of {_CHAT_NAME_LENGTH} characters at most; "
                f"{quoted(chat_name)!r} has {len(chat_name)}.",
                f"{param}.name",
                "string_above_max_length",
            )
        if any(t["function"]["name"] == chat_name for t in self.chat):
            raise TranslationError(
                f"Invalid '{param}.name': a tool named {chat_name!r} is given twice (a namespace's tool is "
                f"offered to the model as '<namespace>{NAMESPACE_SEPARATOR}<name>').",
                f"{param}.name",
            )
        function: dict[str, Any] = {"name": chat_name}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        if kind == "custom":
            self.custom.add(chat_name)
            function["parameters"] = CUSTOM_TOOL_PARAMETERS
        else:
            parameters = tool.get("parameters")
            function["parameters"] = (
                parameters if isinstance(parameters, Mapping) else {"type": "object", "properties": {}}
            )
            if isinstance(tool.get("strict"), bool):
                function["strict"] = tool["strict"]
        if namespace is not None:
            self.namespaced[chat_name] = (namespace, name)
        self.chat.append({"type": "function", "function": function})
        self.params.append(param)

    def add_namespace(self, tool: Mapping[str, Any], param: str) -> None:
        """A ``namespace`` tool: each of its function and custom tools, under the joined name."""
        namespace = tool.get("name")
        if not isinstance(namespace, str) or not namespace:
            raise TranslationError.missing(f"{param}.name")
        if _NAMESPACE_NAME.fullmatch(namespace) is None:  # (else its tools' joined names are refused)
            raise TranslationError(
                unmatched_pattern(f"{param}.name", _NAMESPACE_NAME.pattern), f"{param}.name"
            )
        inner = tool.get("tools")
        if inner is None:
            raise TranslationError.missing(f"{param}.tools")
        if not isinstance(inner, list):  # (the request schema says so first, where it was applied)
            raise TranslationError(
                f"Invalid type for '{param}.tools': expected an array.", f"{param}.tools", "invalid_type"
            )
        for index, each in enumerate(inner):
            kind = each.get("type") if isinstance(each, Mapping) else None
            if kind not in ("function", "custom"):
                raise TranslationError(
                    f"Invalid '{param}.tools[{index}].type': a namespace holds 'function' and 'custom' "
                    f"tools, not {kind!r}.",
                    f"{param}.tools[{index}].type",
                    "unsupported_value",
                )
            assert isinstance(each, Mapping)
            self.add(each, f"{param}.tools[{index}]", namespace)


def _tools(tools: Any) -> _Tools:
    out = _Tools()
    if tools is None:
        return out
    if not isinstance(tools, list):
        raise TranslationError("Invalid type for 'tools': expected an array.", "tools", "invalid_type")
    for index, tool in enumerate(tools):
        param = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        if kind in WEB_SEARCH_TOOLS:
            offer_web_search(out.chat)
            out.params.extend([param] * (len(out.chat) - len(out.params)))
            continue
        if kind == "namespace":
            assert isinstance(tool, Mapping)
            out.add_namespace(tool, param)
            continue
        if kind not in ("function", "custom"):
            why = (
                "it runs on OpenAI's servers or needs a trained action format"
                if kind in HOSTED_TOOLS
                else "unknown type"
            )
            raise TranslationError(
                f"Invalid '{param}.type': tools of type {kind!r} are not supported by this server ({why}); "
                "only 'function', 'custom', 'namespace' and 'web_search' tools are.",
                f"{param}.type",
                "unsupported_value",
            )
        assert isinstance(tool, Mapping)
        out.add(tool, param)
    return out


def _chat_name(name: str, namespace: Any) -> str:
    """The chat function name of a call named ``name`` in ``namespace`` (see NAMESPACE_SEPARATOR)."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if isinstance(namespace, str) and namespace else name


def _forces_a_call(choice: Any) -> bool:
    """Whether ``choice`` asks for a call: ``required``, a named tool, ``allowed_tools`` in ``required``
    mode."""
    if choice == "required":
        return True
    kind = choice.get("type") if isinstance(choice, Mapping) else None
    return kind in ("function", "custom") or (kind == "allowed_tools" and choice.get("mode") == "required")


def _tool_choice(choice: Any, tools: _Tools) -> Any:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    kind = choice.get("type") if isinstance(choice, Mapping) else None
    if kind in ("function", "custom"):
        if not isinstance(choice.get("name"), str):  # (was "'function' is not supported": black-box testing)
            raise TranslationError.missing("tool_choice.name")
        name = _chat_name(choice["name"], choice.get("namespace"))
        return {"type": "function", "function": {"name": tools.named(name)}}
    if kind == "allowed_tools":
        return _allowed_tools(choice)
    raise TranslationError(
        f"Invalid value for 'tool_choice': {kind or choice!r} is not supported by this server; use 'auto', "
        "'none', 'required', a named function or 'allowed_tools'.",
        "tool_choice",
        "unsupported_value",
    )


def _allowed_tools(choice: Mapping[str, Any]) -> dict[str, Any]:
    """The flat Responses form ``{"type": "allowed_tools", "mode", "tools": [{"type", "name"}]}`` as chat's
    nested one, each tool under the chat function name it is sent as (a namespace's joined, a web search
    tool's ``web_search``)."""
    listed = choice.get("tools")
    if choice.get("mode") not in ("auto", "required") or not isinstance(listed, list) or not listed:
        raise TranslationError(
            "Invalid value for 'tool_choice': an 'allowed_tools' choice needs 'mode' 'auto' or 'required' "
            "and a non-empty 'tools' list.",
            "tool_choice",
            "invalid_value",
        )
    names = []
    for index, tool in enumerate(listed):
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        if kind in WEB_SEARCH_TOOLS:
            names.append("web_search")
        elif kind in ("function", "custom") and isinstance(tool.get("name"), str):
            names.append(_chat_name(tool["name"], tool.get("namespace")))
        else:
            raise TranslationError(
                f"Invalid value for 'tool_choice.tools[{index}]': expected a function, custom or web search "
                "tool by 'name'.",
                "tool_choice",
                "invalid_value",
            )
    tools = [{"type": "function", "function": {"name": name}} for name in names]
    return {"type": "allowed_tools", "allowed_tools": {"mode": choice["mode"], "tools": tools}}


def _response_format(text: Any) -> dict[str, Any] | None:
    if text is None:
        return None
    if not isinstance(text, Mapping):
        raise TranslationError("Invalid type for 'text': expected an object.", "text", "invalid_type")
    fmt = text.get("format")
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if fmt is None or kind == "text":
        return None
    assert isinstance(fmt, Mapping)
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), Mapping):
            raise TranslationError.missing("text.format.schema")
        schema: dict[str, Any] = {"name": fmt.get("name") or "response", "schema": fmt["schema"]}
        for key in ("strict", "description"):
            if fmt.get(key) is not None:
                schema[key] = fmt[key]
        return {"type": "json_schema", "json_schema": schema}
    raise TranslationError(
        f"Invalid value for 'text.format.type': {kind!r}. Supported values are: 'text', 'json_object', and "
        "'json_schema'.",
        "text.format.type",
    )


def _number(body: Mapping[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TranslationError(f"Invalid type for '{name}': expected a number.", name, "invalid_type")
    if not low <= value <= high:
        raise TranslationError(
            f"Invalid '{name}': value out of range. Expected a value between {low} and {high}, "
            f"but got {value}.",
            name,
        )
    return value


def translate_request(body: Mapping[str, Any], previous: Sequence[Any] | None = None) -> ChatTranslation:
    """The chat request for Responses request ``body``.

    ``previous``: the input and output items of the conversation before it, which the caller's response
    store resolved ``previous_response_id`` to. Without it (None) a ``previous_response_id`` is refused
    as OpenAI refuses an unknown one (400 ``previous_response_not_found``): ignored, the conversation
    would go on without its history and no one would know.
    """
    if not isinstance(body, Mapping):
        raise TranslationError("The request body must be a JSON object.", None, "invalid_request")
    _refuse_unserved(body, previous)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise TranslationError("Invalid type for 'model': expected a string.", "model", "invalid_type")
    chat: dict[str, Any] = {"messages": _messages(body, previous or ())}
    if model is not None:
        chat["model"] = model
    tools = _tools(body.get("tools"))
    if not tools.chat and _forces_a_call(body.get("tool_choice")):
        # Without tools the choice was dropped and the model answered text under a forced call.
        raise TranslationError(CHOICE_WITHOUT_TOOLS, "tool_choice")
    if tools.chat:
        chat["tools"] = tools.chat
        choice = _tool_choice(body.get("tool_choice"), tools)
        if choice is not None:
            chat["tool_choice"] = choice
        if isinstance(body.get("parallel_tool_calls"), bool):
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    reasoning = body.get("reasoning")
    if isinstance(reasoning, Mapping) and isinstance(reasoning.get("effort"), str):
        chat["reasoning_effort"] = reasoning["effort"]
    chat.update(_generation(body))
    chat.update(chat_logprobs(body))
    chat.update(_streaming(body))
    echo = {**settings_echo(body), **sampling_used(chat, None)}  # (the core's defaults: ``sampled``)
    return ChatTranslation(chat, echo, frozenset(tools.custom), dict(tools.namespaced), tuple(tools.params))


def _refuse_unserved(body: Mapping[str, Any], previous: Sequence[Any] | None) -> None:
    """A 400 for what the request asks that this server does not do (see the module's docstring)."""
    previous_id = body.get("previous_response_id")
    if previous_id is not None and previous is None:
        raise TranslationError(
            f"Previous response with id {quoted(str(previous_id))!r} not found.",
            "previous_response_id",
            "previous_response_not_found",
        )
    if body.get("background") is True:
        raise TranslationError(
            "Invalid 'background': background responses are not supported by this server.",
            "background",
            "unsupported_value",
        )
    if body.get("conversation") is not None:
        raise TranslationError(
            "Invalid 'conversation': conversations are not supported by this server; use "
            "'previous_response_id'.",
            "conversation",
            "unsupported_value",
        )


def _generation(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat parameters of how the answer is generated: its token limit, sampling, user."""
    chat: dict[str, Any] = {}
    limit = body.get("max_output_tokens")
    if limit is not None:
        if integer(limit) is None:
            raise TranslationError(
                "Invalid type for 'max_output_tokens': expected an integer.",
                "max_output_tokens",
                "invalid_type",
            )
        if limit < 16:  # OpenAI's own lower bound
            raise TranslationError(
                "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, "
                f"but got {limit} instead.",
                "max_output_tokens",
                "integer_below_min_value",
            )
        chat["max_tokens"] = limit
    for name, low, high in _SAMPLING_RANGES:
        value = _number(body, name, low, high)
        if value is not None:
            chat[name] = value
    if isinstance(body.get("user"), str):
        chat["user"] = body["user"]
    return chat


_SAMPLING_RANGES = (
    ("temperature", 0.0, 2.0),
    ("top_p", 0.0, 1.0),
    ("presence_penalty", -2.0, 2.0),
    ("frequency_penalty", -2.0, 2.0),
)
"""The sampling parameters sent on as they are, and their ranges (OpenAI's)."""


def _streaming(body: Mapping[str, Any]) -> dict[str, Any]:
    """``stream``, with ``stream_options.include_usage`` (a Response carries its usage)."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise TranslationError("Invalid type for 'stream': expected a boolean.", "stream", "invalid_type")
    if stream:
        return {"stream": True, "stream_options": {"include_usage": True}}
    return {"stream": False}


_RESPONSES_PARAMS = {
    "messages": "input",
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
    "reasoning_effort": "reasoning.effort",
    "logprobs": "include",
    "stream_options": "stream",
    "tools": "tools",
}
"""The chat parameter a translated request's error names -> the Responses parameter the client sent.
Indexes of ``messages`` do not carry over (``instructions`` adds a message, ``previous_response_id``
the conversation before): a nested chat parameter names the Responses parameter it came from, but where
the nesting is the same on both sides (below), the client's nested parameter."""

_FORMAT = re.compile(r"response_format(?:\.json_schema)?((?:\.\w+)*)")
"""``response_format.json_schema.name`` -> ``text.format.name``: Responses puts the schema's fields at
the top of the format where chat nests them."""
_TOOL = re.compile(r"tools\[(\d+)\]\.function((?:[.\[].*)?)")
"""``tools[3].function.name`` -> ``tools[1].name`` (the function's fields at the top of the tool)."""


def _client_param(param: str, tool_params: Sequence[str]) -> str | None:
    """The Responses parameter of chat parameter ``param``, nested where the two nest alike."""
    if (found := _FORMAT.fullmatch(param)) is not None:
        return "text.format" + found.group(1)
    if (found := _TOOL.fullmatch(param)) is not None and int(found.group(1)) < len(tool_params):
        return tool_params[int(found.group(1))] + found.group(2)
    return _RESPONSES_PARAMS.get(_root(param))


def responses_error(
    body: dict[str, Any],
    tool_params: Sequence[str] = (),
    namespaced: Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """An OpenAI error body about the chat request a Responses request was translated to, as an error
    about the Responses request: ``param`` (and its quotation in the message) in the client's names.
    A chat reading (the judge's schema, a backend's parse) refused ``max_tokens`` where the client sent
    ``max_output_tokens``, or ``messages[1].content`` where it sent ``input``. ``tool_params``: the
    client's parameter of each chat tool (``ChatTranslation.tool_params``), where the error is about the
    translated request; ``namespaced``: the chat name of each tool of a ``namespace`` tool, which the
    client named apart."""
    error = body.get("error")
    param = error.get("param") if isinstance(error, dict) else None
    if not isinstance(error, dict) or not isinstance(param, str):
        return body
    renamed = _client_param(param, tool_params)
    if renamed is None or renamed == param:
        return body
    message = error.get("message")
    if isinstance(message, str):
        message = _reworded(message, param, renamed, error.get("code"), namespaced or {})
    return {**body, "error": {**error, "param": renamed, "message": message}}


def _reworded(
    message: str, param: str, renamed: str, code: Any, namespaced: Mapping[str, tuple[str, str]]
) -> str:
    """``message`` quoting ``renamed`` where it quoted the chat parameter ``param``, or one nested below
    it ('messages[1].content' for ``messages``); a schema's refusal naming a function of a namespace
    by its name inside it (``namespaced``: chat name -> namespace, name)."""
    if code == "invalid_json_schema":  # (its words quote the client's property names, never a parameter)
        named = re.match(r"Invalid schema for function '([^']*)'", message)
        if named is not None and named.group(1) in namespaced:
            # The function as the client named it inside its namespace, not the name joined for chat.
            inner = namespaced[named.group(1)][1]
            return message.replace(named.group(0), f"Invalid schema for function '{inner}'", 1)
        return message.replace("for response_format '", "for text.format '", 1)
    if f"'{param}'" in message:
        return message.replace(f"'{param}'", f"'{renamed}'")
    return re.sub(rf"'{re.escape(_root(param))}(?:[.\[][^']*)?'", f"'{renamed}'", message, count=1)


def _root(param: str) -> str:
    """The top-level parameter of ``param`` (``messages`` of ``messages[1].content``)."""
    return param.split(".", 1)[0].split("[", 1)[0]
