"""A Messages request (``POST /v1/messages``) as the chat-completions request that serves it.

Pure: a dict in, a dict out, or a :class:`MessagesError` (Anthropic's 400, its message naming the
parameter). What is translated, and why (docs/messages.md):

- ``system`` (a string, or text blocks with their ``cache_control``) becomes the first ``system``
  message; a ``system`` message that Claude Code sends in the middle of ``messages`` joins it there,
  after a blank line: vLLM rendered one by its position and broke the template's tool calls (vllm
  #48874), and many templates (Gemma's, Mistral's) refuse a system turn after the first;
- ``messages``: text blocks joined into one string (what every template reads); images (base64 or URL)
  as chat's ``image_url`` parts; an assistant turn's ``tool_use`` blocks as its ``tool_calls``
  (``input`` as the JSON string chat carries); a user turn's ``tool_result`` blocks as ``tool``
  messages before the rest of the turn (``is_error`` said first in the content, which chat cannot
  carry otherwise); ``thinking`` and ``redacted_thinking`` blocks left out: chat templates drop an
  earlier turn's reasoning, and their ``signature`` is the producer's own; consecutive user text
  turns joined, for templates that want roles to alternate;
- ``tools``: custom tools as chat functions (``input_schema`` as ``parameters``); the web search server
  tool (``web_search_*``) as a function ``web_search`` with one ``query`` argument, which the client
  runs or answers as unsupported; other server tools (bash, text editor, computer use, code execution,
  web fetch, memory) refused with a 400 that names the type: they need Anthropic's servers or a trained
  action format;
- ``tool_choice``: ``auto``, ``none``, ``any`` (``required``), ``tool`` (a named function);
  ``disable_parallel_tool_use`` as ``parallel_tool_calls: false``;
- ``thinking`` ``enabled`` with ``budget_tokens`` as ``reasoning_effort`` (up to 2,048 tokens
  ``low``, up to 16,384 ``medium``, more ``high``); ``output_config.effort`` as it is; ``disabled`` and
  ``adaptive`` leave the model's own default;
- ``max_tokens``, ``stop_sequences`` (``stop``), ``temperature``, ``top_p``, ``top_k`` (the extension
  local servers read), ``metadata.user_id`` (``user``), ``output_config.format`` (``response_format``
  ``json_schema``), ``stream`` (with ``stream_options.include_usage``: a Message carries its usage);
- ``cache_control`` anywhere, ``service_tier``, ``container``, ``context_management`` and the other
  settings are accepted and have nothing to do here.

What Anthropic refuses beyond its schema is refused in its words: an empty text block, an empty message
but a final assistant turn, a final assistant turn ending in whitespace, and beside ``thinking`` a
temperature but 1 or a forced tool.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance.api_errors import quoted
from conformance.given_schemas import schema_problem

from ..web_search import offer_web_search
from .errors import MessagesError, field_path
from .request import chat_tool_choice, system_text, texts_of

__all__ = ["ChatTranslation", "translate_request"]

_SERVER_TOOLS = (
    "bash_",
    "text_editor_",
    "computer_",
    "code_execution_",
    "web_fetch_",
    "memory_",
    "tool_search",
)


@dataclass(frozen=True, slots=True)
class ChatTranslation:
    """A Messages request as chat: the chat body, and what the answer's translation needs."""

    chat: dict[str, Any]
    stop_sequences: tuple[str, ...] = ()
    """The request's stop sequences: a chat answer that names the one it stopped at (vLLM's
    ``stop_reason``) is answered ``stop_reason: "stop_sequence"`` with it."""
    tools: frozenset[str] = field(default_factory=frozenset)
    """The tools offered, by name."""
    prefill: str = ""
    """A final assistant turn's text: the start of the answer, which the answer continues without it."""

    @property
    def stream(self) -> bool:
        return self.chat.get("stream") is True


def _image(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, Mapping) else None
    if kind == "base64" and isinstance(source, Mapping):
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif kind == "url" and isinstance(source, Mapping) and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise MessagesError(f"{where}.source: only images given as base64 data or by URL are supported.")
    return {"type": "image_url", "image_url": {"url": url}}


@dataclass(slots=True)
class _Turn:
    """One Messages turn as chat messages: its text and images, its calls, its tool results."""

    parts: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    call_positions: list[int] = field(default_factory=list)
    """Each call's position among the turn's blocks, for the error that names one."""
    results_first: bool = True
    """Whether the tool results come before any other block of the turn."""

    @property
    def calls_at(self) -> Iterator[tuple[int, dict[str, Any]]]:
        return zip(self.call_positions, self.calls, strict=True)

    def content(self) -> str | list[dict[str, Any]]:
        if all(part["type"] == "text" for part in self.parts):
            return "".join(part["text"] for part in self.parts)
        return self.parts


def _take_block(turn: _Turn, block: Any, where: str) -> None:
    kind = block.get("type") if isinstance(block, Mapping) else None
    if not isinstance(block, Mapping) or not isinstance(kind, str):
        raise MessagesError(f"{where}: a content block must be an object with a 'type'.")
    if kind == "text":
        text = str(block.get("text", ""))
        if not text:  # (Anthropic's words; a template shows an empty turn as the model's to fill)
            raise MessagesError("messages: text content blocks must be non-empty")
        turn.parts.append({"type": "text", "text": text})
    elif kind == "image":
        turn.parts.append(_image(block, where))
    elif kind == "tool_use":
        arguments = json.dumps(block.get("input") or {}, ensure_ascii=False, separators=(",", ":"))
        function = {"name": str(block.get("name", "")), "arguments": arguments}
        turn.calls.append({"id": str(block.get("id", "")), "type": "function", "function": function})
    elif kind == "tool_result":
        text = "".join(texts_of(block.get("content")))
        if block.get("is_error") is True:
            text = f"Error: {text}"
        turn.results.append(
            {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text}
        )
    elif kind not in ("thinking", "redacted_thinking"):  # left out: see the module's docstring
        raise MessagesError(f"{where}: content blocks of type {kind!r} are not supported by this server.")


class _Conversation:
    """Chat messages built turn by turn (see the module's docstring)."""

    def __init__(self, system: str) -> None:
        self.system = system
        self.messages: list[dict[str, Any]] = []
        self.calls: set[str] = set()  # the ids of the tool_use blocks so far, which a tool_result answers
        self.waiting: tuple[int, list[str]] | None = None  # the last assistant turn and its calls' ids

    def add(self, message: Any, index: int) -> None:
        where = field_path("messages", index)
        if not isinstance(message, Mapping):
            raise MessagesError(f"{where}: a message must be an object.")
        role, content = message.get("role"), message.get("content")
        if role == "system":
            text = "".join(texts_of(content))
            self.system = f"{self.system}\n\n{text}" if self.system else text
            return
        if role not in ("user", "assistant"):
            raise MessagesError(f"{where}.role: expected 'user' or 'assistant', got {role!r}.")
        turn = _turn_of(content, where)
        self._check_results(role, turn, where)
        self._check_answered(role, turn, where)
        self._check_ids(turn, where)
        self.messages += turn.results
        self.waiting = (index, [call["id"] for call in turn.calls]) if turn.calls else None
        if role == "assistant":
            self._add_assistant(turn)
        elif turn.parts:
            self._add_text("user", turn.content())

    def end(self) -> None:
        """The conversation ends: its last turn may not be the model's calls (Anthropic's 400: a call
        needs its result in the next message; llama-server refused it in its own words, "Cannot continue
        an assistant message that contains tool calls")."""
        if self.waiting is not None:
            raise _unanswered(*self.waiting)

    def _check_results(self, role: str, turn: _Turn, where: str) -> None:
        """Calls in assistant turns, results in user turns, each result of a call made before (Anthropic's
        400s): a call the user made, or a result the model gave, has no place in chat (it was dropped, or
        sent as a tool message before its turn), and a template would show an answer to no call."""
        if turn.calls and role == "user":
            raise MessagesError(f"{where}.content: `tool_use` blocks can only be in `assistant` messages.")
        if turn.results and role == "assistant":
            raise MessagesError(f"{where}.content: `tool_result` blocks can only be in `user` messages.")
        for result in turn.results:
            if not result["tool_call_id"]:
                raise MessagesError(
                    f"{where}.content: a `tool_result` block's `tool_use_id` must be a non-empty string."
                )
            if result["tool_call_id"] not in self.calls:
                # Anthropic's 400 (it asks for the tool_use in the message just before; an earlier one is
                # taken here, as the chat route takes it).
                raise MessagesError(
                    f"{where}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{result['tool_call_id'][:64]}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in an earlier message."
                )

    def _check_answered(self, role: str, turn: _Turn, where: str) -> None:
        """The last assistant turn's calls are each answered by a ``tool_result`` of this turn, and the
        results come before anything else the user says (Anthropic's 400s; chat's first, in
        request_validation.py): a template would show a call without its answer, or the user's words
        between a call and its answer."""
        if self.waiting is None:
            return
        at, ids = self.waiting
        answered = {result["tool_call_id"] for result in turn.results} if role == "user" else set()
        missing = [call_id for call_id in ids if call_id not in answered]
        if missing:
            raise _unanswered(at, missing)
        if not turn.results_first:
            raise MessagesError(
                f"{where}: Did not find {len(turn.results)} `tool_result` block(s) at the beginning of this "
                "message. Messages following `tool_use` blocks must begin with a matching number of "
                "`tool_result` blocks."
            )

    def _check_ids(self, turn: _Turn, where: str) -> None:
        """Each ``tool_use`` id once in the conversation (Anthropic's 400): a result names its call by id,
        and a repeated one leaves a client, or a template, pairing results with the wrong call."""
        for position, call in turn.calls_at:
            if call["id"] in self.calls:
                raise MessagesError(f"{where}.content.{position}: `tool_use` ids must be unique")
            self.calls.add(call["id"])

    def _add_assistant(self, turn: _Turn) -> None:
        if turn.calls:
            # "" rather than null: llama-cpp-python refuses a null content, Jinja templates that
            # ``trim`` it fail on one (as the Responses translation sends it).
            content = turn.content() if turn.parts else ""
            self.messages.append({"role": "assistant", "content": content, "tool_calls": turn.calls})
        elif turn.parts:
            self._add_text("assistant", turn.content())

    def _add_text(self, role: str, content: str | list[dict[str, Any]]) -> None:
        """A turn of text, joined to the turn before where that is the same role's text alone: Anthropic
        combines consecutive turns of one role, and templates want roles to alternate (llama-server
        refused two assistant messages at the end of a conversation)."""
        last = self.messages[-1] if self.messages else None
        if (
            last is not None
            and last["role"] == role
            and "tool_calls" not in last
            and isinstance(last.get("content"), str)
            and isinstance(content, str)
        ):
            last["content"] = f"{last['content']}\n\n{content}"
            return
        self.messages.append({"role": role, "content": content})

    def chat_messages(self) -> list[dict[str, Any]]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + self.messages


def _turn_of(content: Any, where: str) -> _Turn:
    """A message's ``content`` (a string, or an array of blocks) as one turn."""
    turn = _Turn()
    blocks = ([{"type": "text", "text": content}] if content else []) if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise MessagesError(f"{where}.content: expected a string or an array of content blocks.")
    for position, block in enumerate(blocks):
        calls, results = len(turn.calls), len(turn.results)
        _take_block(turn, block, field_path(where, "content", position))
        if len(turn.calls) > calls:
            turn.call_positions.append(position)
        if len(turn.results) > results and position != results:
            turn.results_first = False  # another block came before this result
    return turn


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    given = body.get("messages")
    if not isinstance(given, list) or not given:
        raise MessagesError("messages: List should have at least 1 item after validation")
    conversation = _Conversation(system_text(body.get("system")))
    for index, message in enumerate(given):
        _check_content(message, index, last=index == len(given) - 1)
        conversation.add(message, index)
    if not conversation.messages:  # system messages alone: Anthropic takes none, and there is no turn
        raise MessagesError("messages.0.role: Input should be 'user' or 'assistant'")
    conversation.end()
    _check_prefill(given[-1])
    return conversation.chat_messages()


def _check_content(message: Any, index: int, *, last: bool) -> None:
    """Every message says something but a final assistant turn, which may be empty (no start given
    to the answer): Anthropic's 400 in its words."""
    if not isinstance(message, Mapping) or message.get("content") not in ("", []):
        return
    if not (last and message.get("role") == "assistant"):
        raise MessagesError(
            f"messages.{index}: all messages must have non-empty content except for the optional final "
            "assistant message"
        )


def _check_prefill(last: Any) -> None:
    """A final assistant turn (the start of the answer, which the model goes on from) may not end in
    whitespace (Anthropic's 400): a tokenizer splits a trailing space from the word it belongs to, and
    the model then writes the word after a space of its own."""
    if not isinstance(last, Mapping) or last.get("role") != "assistant":
        return
    content = last.get("content")
    if isinstance(content, list) and content and isinstance(content[-1], Mapping):
        content = content[-1].get("text") if content[-1].get("type") == "text" else None
    if isinstance(content, str) and content != content.rstrip():
        raise MessagesError("messages: final assistant content cannot end with trailing whitespace")


def _unanswered(at: int, ids: list[str]) -> MessagesError:
    return MessagesError(
        f"{field_path('messages', at)}: `tool_use` ids were found without `tool_result` blocks immediately "
        f"after: {', '.join(call_id[:64] for call_id in ids[:8])}. Each `tool_use` block must have a "
        "corresponding `tool_result` block in the next message."
    )


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        return []
    out: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        assert isinstance(tool, Mapping)  # (the schema holds every tool to an object)
        kind = tool.get("type")
        if isinstance(kind, str) and kind.startswith("web_search"):
            offer_web_search(out)
        elif kind in (None, "custom"):
            out.append({"type": "function", "function": _function(tool, index)})
        else:
            raise _unsupported(index, kind)
    _check_names(tools)
    return out


_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")


def _function(tool: Mapping[str, Any], index: int) -> dict[str, Any]:
    """A custom tool as chat's function; its name and its input's schema as Anthropic holds them (its
    400s; refused in chat's words before, naming ``tools[0].function.name``)."""
    name, schema = tool.get("name"), tool.get("input_schema")
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise MessagesError(
            f"tools.{index}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
        )
    if isinstance(schema, Mapping) and schema.get("type") != "object":
        raise MessagesError(f"tools.{index}.custom.input_schema.type: Input should be 'object'")
    if isinstance(schema, Mapping):
        _check_schema(f"tools.{index}.custom.input_schema", schema)
    function: dict[str, Any] = {"name": name, "parameters": schema or {}}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    return function


def _check_schema(field: str, schema: Mapping[str, Any]) -> None:
    """Anthropic's 400 for a schema that is not a JSON Schema (its words, then what is wrong with it)."""
    why = schema_problem(schema)
    if why is not None:
        raise MessagesError(
            f"{field}: JSON schema is invalid. It must match JSON Schema draft 2020-12 "
            f"(https://json-schema.org/draft/2020-12). {why}."
        )


def _unsupported(index: int, kind: Any) -> MessagesError:
    why = "it runs on Anthropic's servers or needs a trained action format"
    if not isinstance(kind, str) or not kind.startswith(_SERVER_TOOLS):
        why = "unknown type"
    return MessagesError(
        f"tools.{index}.type: tools of type {kind!r} are not supported by this server ({why}); "
        "custom tools (name, description, input_schema) and the web search tool are."
    )


def _check_names(tools: list[Any]) -> None:
    """Each tool's name once (Anthropic's 400; a server tool has its name too): a call names its tool,
    and two tools of one name leave it to chance which one a call runs."""
    names = [tool.get("name") for tool in tools if isinstance(tool, Mapping)]
    if len(set(names)) < len(names):
        raise MessagesError("tools: Tool names must be unique.")


def _check_thinking(body: Mapping[str, Any]) -> None:
    """What Anthropic refuses beside thinking (its 400s, in its words): a temperature but 1, and a
    forced tool (the model would have to call before it thinks)."""
    thinking = body.get("thinking")
    if not isinstance(thinking, Mapping) or thinking.get("type") not in ("enabled", "adaptive"):
        return
    temperature = body.get("temperature")
    if temperature is not None and temperature != 1:
        raise MessagesError("`temperature` may only be set to 1 when thinking is enabled.")
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") in ("any", "tool"):
        raise MessagesError("Thinking may not be enabled when tool_choice forces tool use.")


def _effort(body: Mapping[str, Any]) -> str | None:
    """``reasoning_effort`` from ``output_config.effort``, else from ``thinking``'s budget."""
    config = body.get("output_config")
    effort = config.get("effort") if isinstance(config, Mapping) else None
    if isinstance(effort, str):
        return effort
    thinking = body.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, Mapping) else None
    if not isinstance(thinking, Mapping) or thinking.get("type") != "enabled" or not isinstance(budget, int):
        return None
    return "low" if budget <= 2048 else "medium" if budget <= 16384 else "high"


def _settings(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat parameters of how the answer is generated."""
    chat: dict[str, Any] = {"max_tokens": body.get("max_tokens")}
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            chat[name] = body[name]
    stops = body.get("stop_sequences")
    if isinstance(stops, list) and stops:
        chat["stop"] = stops
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping) and isinstance(metadata.get("user_id"), str):
        chat["user"] = metadata["user_id"]
    effort = _effort(body)
    if effort is not None:
        chat["reasoning_effort"] = effort
    response_format = _response_format(body.get("output_config"))
    if response_format is not None:
        chat["response_format"] = response_format
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _response_format(config: Any) -> dict[str, Any] | None:
    """Chat's ``response_format`` of ``output_config.format`` (a JSON schema the answer follows)."""
    fmt = config.get("format") if isinstance(config, Mapping) else None
    if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
        return None
    if isinstance(fmt.get("schema"), Mapping):
        _check_schema("output_config.format.schema", fmt["schema"])
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt.get("schema")}}


def translate_request(body: Mapping[str, Any]) -> ChatTranslation:
    """The chat request for the Messages request ``body`` (see the module's docstring)."""
    chat: dict[str, Any] = {"messages": _messages(body)}
    _check_thinking(body)
    if isinstance(body.get("model"), str):
        chat["model"] = body["model"]
    tools = _tools(body.get("tools"))
    choice = body.get("tool_choice")
    names = frozenset(t["function"]["name"] for t in tools)
    _check_choice(choice, names)
    last = chat["messages"][-1]
    prefill = last["content"] if last["role"] == "assistant" and isinstance(last.get("content"), str) else ""
    if tools:
        chat["tools"] = tools
        if choice is not None:
            chat["tool_choice"] = chat_tool_choice(choice)
        if isinstance(choice, Mapping) and choice.get("disable_parallel_tool_use") is True:
            chat["parallel_tool_calls"] = False
    chat.update(_settings(body))
    stops = body.get("stop_sequences")
    stop_sequences = tuple(s for s in stops if isinstance(s, str)) if isinstance(stops, list) else ()
    return ChatTranslation(chat, stop_sequences, names, prefill)


def _check_choice(choice: Any, names: frozenset[str]) -> None:
    """A forced ``tool_choice`` forces one of the tools: without tools the choice was dropped and the
    model answered text under a forced call (Anthropic's words); one naming a tool not offered was
    refused in chat's words (``function``, ``'tools'``), found by black-box testing."""
    if not isinstance(choice, Mapping) or choice.get("type") not in ("any", "tool"):
        return
    if not names:
        raise MessagesError("tool_choice: `tool_choice` may only be specified while providing tools.")
    name = choice.get("name")
    if choice["type"] == "tool" and isinstance(name, str) and name not in names:
        raise MessagesError(f"tool_choice.name: no tool named {quoted(name)!r} is in `tools`.")
