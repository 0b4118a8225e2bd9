"""OpenAI request bodies -> validated generation requests.

Every check raises :class:`backend.request_errors.RequestError` naming the offending parameter, so the
app can answer with a 400 ``invalid_request_error`` whose ``param`` points at it (the SDKs show that
field to users).
Nothing here touches llama.cpp: tokenizing and grammar parsing happen in the engine's front half.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from backend.grammars import grammar_for_schema, json_grammar
from backend.request_errors import RequestError
from backend.schema_support import gbnf_problem
from conformance.request import (
    CHOICE_WITHOUT_TOOLS,
    allowed_tools_choice,
    limit_parameter,
    named_function,
    unoffered_function,
)
from conformance.schemas import load_schema

__all__ = [
    "ChatMessage",
    "GenerationRequest",
    "PromptPart",
    "SamplingParams",
    "Tool",
    "ToolChoice",
    "parse_chat_request",
    "parse_completion_request",
]

Endpoint = Literal["completions", "chat"]
PromptPart = str | int
"""A prompt is a list of parts: text to tokenize or a token id (llama.cpp's mixed prompts)."""

MAX_N = 128
MAX_COMPLETION_LOGPROBS = 5
MAX_CHAT_TOP_LOGPROBS = 20
MAX_STOP = 4


@dataclass(slots=True)
class SamplingParams:
    """What one sampler chain needs; defaults follow llama.cpp's server."""

    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    grammar: str | None = None
    grammar_from: str = "grammar"
    """The request's parameter the grammar was made from, which a grammar llama.cpp refuses names."""
    grammar_triggers: tuple[str, ...] = ()
    """Regexes that switch a lazy grammar on (tool calls under ``tool_choice: auto``); empty: always on."""
    ignore_eos: bool = False
    logit_bias: dict[int, float] = field(default_factory=dict)


@dataclass(slots=True)
class ChatMessage:
    role: str
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    """An assistant turn's calls as Hugging Face templates read them: ``{"id", "type": "function",
    "function": {"name", "arguments": <object>}}`` (OpenAI sends ``arguments`` as a JSON string)."""
    tool_call_id: str | None = None
    """A ``tool`` message's answer to this call id."""
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Tool:
    """One ``{"type": "function", "function": {...}}`` entry of ``tools``."""

    name: str
    description: str | None
    parameters: dict[str, Any]
    strict: bool = False

    def to_openai(self) -> dict[str, Any]:
        """The entry as a chat template reads it (``tools`` is passed as OpenAI sends it, like HF does)."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description is not None:
            function["description"] = self.description
        return {"type": "function", "function": function}


ToolChoiceMode = Literal["none", "auto", "required", "named"]


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: ToolChoiceMode = "auto"
    name: str | None = None
    """The function a named choice forces."""
    allowed: tuple[str, ...] | None = None
    """The functions an ``allowed_tools`` choice lets the model call (``auto`` or ``required`` among
    them); the prompt still shows every tool, as OpenAI's does."""


@dataclass(slots=True)
class GenerationRequest:
    endpoint: Endpoint
    model: str | None
    prompts: list[list[PromptPart]]
    """One entry per prompt (completions may batch several); chat has exactly one, built later."""
    messages: list[ChatMessage]
    sampling: SamplingParams
    max_tokens: int | None
    stop: list[str]
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    logprobs: int | None = None
    """How many alternatives per token; None: no logprobs at all (0: only the sampled token)."""
    echo: bool = False
    suffix: str | None = None
    cache_prompt: bool = True
    tools: list[Tool] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel_tool_calls: bool = False
    """Whether the grammar lets one answer hold several calls: only when the request says so, as
    llama.cpp's server does. OpenAI's default (true) only allows several calls, it never asks for them,
    and a small model given the room enumerates calls until ``max_tokens`` (Gemma 3 270M asked for the
    weather in Paris called get_weather, then get_time three times, and was cut off)."""
    response_schema: dict[str, Any] | None = None
    """The ``response_format`` JSON Schema (or ``{"type": "object"}`` for ``json_object``): a tool format
    that chooses between a call and a reply constrains the reply with it."""
    tool_format: Any = None
    """The :class:`backend.tool_formats.ToolFormat` the service picked from the chat template, when the
    request has tools and ``tool_choice`` is not ``none``: responses parse the output with it."""
    reasoning_effort: str | None = None
    """The request's ``reasoning_effort``, given to the chat template as that variable (gpt-oss's reads
    it; a template that does not ignores it)."""
    verbose: bool = False
    """llama-server's request field: a chat answer's last chunk (or its body) carries ``__verbose``, here
    with its ``stop_type`` and ``stopping_word`` only: the stop sequence met, which a proxy in front
    names for a protocol that has it (a Message's ``stop_sequence``; /props says it is served)."""


def _number(body: dict[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"'{name}' must be a number", name)
    _check_range(name, value, lo, hi)
    return float(value)


def _integer(body: dict[str, Any], name: str, default: int | None, lo: int, hi: int) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"'{name}' must be an integer", name)
    _check_range(name, value, lo, hi)
    return value


def _check_range(name: str, value: float, lo: float, hi: float) -> None:
    """OpenAI's words and codes for a number out of range (the proxy's request validation says the same)."""
    if lo <= value <= hi:
        return
    kind = "integer" if isinstance(value, int) else "decimal"
    bound, sign, limit = ("below minimum", ">=", lo) if value < lo else ("above maximum", "<=", hi)
    shown = f"{limit:g}" if isinstance(limit, float) else str(limit)
    raise RequestError(
        f"Invalid '{name}': {kind} {bound} value. Expected a value {sign} {shown}, but got {value}.",
        name,
        code=f"{kind}_{bound.replace(' ', '_')}_value",
    )


def _boolean(body: dict[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"'{name}' must be a boolean", name)
    return value


def _stop(body: dict[str, Any]) -> list[str]:
    value = body.get("stop")
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise RequestError("'stop' must be a string or an array of strings", "stop")
    if len(items) > MAX_STOP:
        raise RequestError(
            f"Invalid 'stop': expected an array with at most {MAX_STOP} items, got {len(items)}.",
            "stop",
            code="array_above_max_length",
        )
    return [s for s in items if s]


def _logit_bias(body: dict[str, Any]) -> dict[int, float]:
    value = body.get("logit_bias")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestError("'logit_bias' must map token ids to numbers", "logit_bias")
    out: dict[int, float] = {}
    for key, bias in value.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise RequestError(f"'logit_bias' key {key!r} is not a token id", "logit_bias") from None
        if isinstance(bias, bool) or not isinstance(bias, int | float) or not -100 <= bias <= 100:
            raise RequestError("'logit_bias' values must be numbers between -100 and 100", "logit_bias")
        out[token] = float(bias)
    return out


_GRAMMAR_PARAMS = ("grammar", "json_schema", "response_format")


def _grammar(body: dict[str, Any], *, chat: bool) -> str | None:
    """One of ``grammar`` (GBNF), ``json_schema`` (llama.cpp) or ``response_format`` (OpenAI)."""
    given = [name for name in _GRAMMAR_PARAMS if body.get(name) is not None]
    if len(given) > 1 and not (given == ["response_format"] or _is_text_format(body.get("response_format"))):
        raise RequestError(f"use only one of {', '.join(repr(g) for g in given)}", given[1])
    grammar = body.get("grammar")
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            raise RequestError("'grammar' must be a non-empty GBNF string", "grammar")
        if (problem := gbnf_problem(grammar)) is not None:
            raise RequestError(f"'grammar' {problem}", "grammar")
        return grammar
    schema = body.get("json_schema")
    if schema is not None:
        if not isinstance(schema, dict):
            raise RequestError("'json_schema' must be a JSON Schema object", "json_schema")
        return grammar_for_schema(schema, "json_schema")
    return _format_grammar(body.get("response_format"))


def _format_grammar(fmt: Any) -> str | None:
    """The grammar of OpenAI's ``response_format``: none for text, any JSON object, or its schema's."""
    if fmt is None or _is_text_format(fmt):
        return None
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise RequestError("'response_format' must be an object with a 'type'", "response_format")
    if fmt["type"] == "json_object":
        return json_grammar()
    if fmt["type"] != "json_schema":
        raise RequestError(
            f"'response_format.type' must be 'text', 'json_object' or 'json_schema', got {fmt['type']!r}",
            "response_format",
        )
    spec = fmt.get("json_schema")
    inner = spec.get("schema") if isinstance(spec, dict) else None
    if inner is None and isinstance(spec, dict):
        return json_grammar()  # ``schema`` is optional in OpenAI's spec: then any JSON object
    if not isinstance(inner, dict):
        raise RequestError(
            "'response_format.json_schema.schema' must be a JSON Schema object", "response_format"
        )
    return grammar_for_schema(inner, "response_format")


def _response_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The reply's schema when ``response_format`` asks for JSON (already checked by ``_grammar``)."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return None
    spec = fmt.get("json_schema")
    inner = spec.get("schema") if fmt.get("type") == "json_schema" and isinstance(spec, dict) else False
    if fmt.get("type") == "json_object" or inner is None:  # json_schema without a schema: any object
        return {"type": "object"}
    return dict(inner) if isinstance(inner, dict) else None


def _is_text_format(fmt: Any) -> bool:
    return isinstance(fmt, dict) and fmt.get("type") == "text"


def _sampling(body: dict[str, Any], *, chat: bool) -> SamplingParams:
    seed = body.get("seed")
    if isinstance(seed, float) and seed.is_integer():  # 1.0 is an integer to JSON Schema, as to _integer
        seed = int(seed)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError("'seed' must be an integer", "seed")
    mirostat = _integer(body, "mirostat", 0, 0, 2)
    return SamplingParams(
        temperature=_number(body, "temperature", 0.8, 0.0, 2.0),
        top_p=_number(body, "top_p", 0.95, 0.0, 1.0),
        top_k=int(_integer(body, "top_k", 40, 0, 1 << 30) or 0),
        min_p=_number(body, "min_p", 0.05, 0.0, 1.0),
        repeat_penalty=_number(body, "repeat_penalty", 1.0, 0.0, 10.0),
        repeat_last_n=int(_integer(body, "repeat_last_n", 64, -1, 1 << 20) or 0),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        seed=None if seed is None or seed == -1 else seed & 0xFFFFFFFF,
        mirostat=mirostat or 0,
        mirostat_tau=_number(body, "mirostat_tau", 5.0, 0.0, 100.0),
        mirostat_eta=_number(body, "mirostat_eta", 0.1, 0.0, 10.0),
        grammar=_grammar(body, chat=chat),
        grammar_from=next((name for name in _GRAMMAR_PARAMS if body.get(name) is not None), "grammar"),
        ignore_eos=_boolean(body, "ignore_eos"),
        logit_bias=_logit_bias(body),
    )


def _prompts(value: Any) -> list[list[PromptPart]]:
    """OpenAI's four prompt shapes plus llama.cpp's mixed token/text list."""
    bad = RequestError(
        "'prompt' must be a string, an array of token ids, an array of strings or an array of those",
        "prompt",
    )
    if value is None:
        return [[""]]  # OpenAI's default, its end-of-text token: a document from its start
    if isinstance(value, str):
        return [[value]]
    if not isinstance(value, list) or not value:
        raise bad
    if any(isinstance(item, int) and not isinstance(item, bool) for item in value):
        return [_one_prompt(value, bad)]
    return [_one_prompt(item if isinstance(item, list) else [item], bad) for item in value]


def _one_prompt(items: list[Any], bad: RequestError) -> list[PromptPart]:
    if not items:
        raise bad
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int):
            raise bad
        if isinstance(item, int) and item < 0:
            raise RequestError(f"'prompt' holds a negative token id {item}", "prompt")
    return list(items)


# What a chat template calls a role: OpenAI's ``developer`` is the system turn, and the deprecated
# ``function`` message (an answer to a ``function_call``) is a tool result.
_TEMPLATE_ROLES = {"developer": "system", "function": "tool"}


def _messages(value: Any) -> list[ChatMessage]:
    if not isinstance(value, list) or not value:
        raise RequestError("'messages' must be a non-empty array", "messages")
    calls = _Calls()
    return [_message(msg, i, calls) for i, msg in enumerate(value)]


@dataclass(slots=True)
class _Calls:
    """The tool calls the conversation's assistant turns made so far: their ids (a legacy call's must be
    new), and the legacy calls' by name, which ``function`` messages answer."""

    ids: set[str] = field(default_factory=set)
    legacy: dict[str, str] = field(default_factory=dict)
    """A legacy ``function_call``'s name -> the id it was given."""


def _message(msg: Any, i: int, calls: _Calls) -> ChatMessage:
    if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
        raise RequestError(f"'messages[{i}]' must be an object with a 'role'", "messages")
    role: str = msg["role"]
    if role not in ("system", "developer", "user", "assistant", "tool", "function"):
        raise RequestError(f"'messages[{i}].role' {role!r} is not a known role", "messages")
    message = ChatMessage(_TEMPLATE_ROLES.get(role, role), _content(msg.get("content"), i))
    name = msg.get("name")
    if name is not None:
        if not isinstance(name, str):
            raise RequestError(f"'messages[{i}].name' must be a string", "messages")
        message.name = name
    if role == "assistant":
        _assistant_calls(message, msg, i, calls)
    elif role == "function":  # the deprecated answer to a function_call, named by the function
        if not isinstance(name, str) or not name:
            raise RequestError(f"'messages[{i}].name' is required for a 'function' message", "messages")
        message.tool_call_id = calls.legacy.get(name)  # (the spec does not ask for a preceding call)
    elif role == "tool":
        # (a non-empty string that an earlier assistant message's call has: the front-end checked it,
        # conformance/request_validation.py)
        message.tool_call_id = str(msg.get("tool_call_id"))
    return message


def _assistant_calls(message: ChatMessage, msg: dict[str, Any], i: int, calls: _Calls) -> None:
    """An assistant turn's ``tool_calls``, or its deprecated single ``function_call``."""
    if msg.get("tool_calls") is not None:
        message.tool_calls = _message_tool_calls(msg["tool_calls"], i)
        calls.ids.update(call["id"] for call in message.tool_calls)
    elif msg.get("function_call") is not None:
        call = _legacy_call(msg["function_call"], i, calls.ids)
        message.tool_calls = [call]
        calls.ids.add(call["id"])
        calls.legacy[call["function"]["name"]] = call["id"]


def _legacy_call(function_call: Any, i: int, taken: set[str]) -> dict[str, Any]:
    """The deprecated single ``function_call`` of an assistant turn (LangChain's from a function-calling
    turn) as the one ``tool_calls`` entry templates know, with an id no other call has."""
    if (
        not isinstance(function_call, dict)
        or not isinstance(function_call.get("name"), str)
        or not isinstance(function_call.get("arguments"), str)
    ):
        raise RequestError(
            f"'messages[{i}].function_call' must be {{'name': string, 'arguments': JSON string}}", "messages"
        )
    call_id = f"call_{i}"
    while call_id in taken:
        call_id += "_"
    return _message_tool_calls([{"id": call_id, "function": function_call}], i)[0]


def _message_tool_calls(value: Any, i: int) -> list[dict[str, Any]]:
    """OpenAI's ``tool_calls`` -> what HF templates read: ``arguments`` as an object, not a JSON string
    (templates write it with ``tojson``; a string would come out quoted twice)."""
    where = f"'messages[{i}].tool_calls'"
    if not isinstance(value, list):
        raise RequestError(f"{where} must be an array", "messages")
    calls = []
    for k, call in enumerate(value):
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("id"), str)
            or call.get("type", "function") != "function"
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str)
        ):
            raise RequestError(
                f"{where}[{k}] must be {{'id': string, 'type': 'function', 'function': "
                "{'name': string, 'arguments': JSON string}}",
                "messages",
            )
        try:
            arguments: Any = json.loads(function["arguments"]) if function["arguments"].strip() else {}
        except (ValueError, RecursionError):  # (nested past the parser: no JSON)
            arguments = function["arguments"]  # kept as sent: the template shows what the model wrote
        calls.append(
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": arguments},
            }
        )
    return calls


_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _tools(body: dict[str, Any]) -> list[Tool]:
    value = body.get("tools")
    if value is None:
        return []
    if not isinstance(value, list):
        raise RequestError("'tools' must be an array of function tools", "tools")
    tools: list[Tool] = []
    for k, entry in enumerate(value):
        function = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or entry.get("type") != "function" or not isinstance(function, dict):
            raise RequestError(
                f"'tools[{k}]' must be {{'type': 'function', 'function': {{'name': ...}}}}", "tools"
            )
        name = function.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise RequestError(
                f"Invalid 'tools[{k}].function.name': must be 1 to 64 letters, digits, '_' or '-'.", "tools"
            )
        if any(t.name == name for t in tools):
            raise RequestError(f"'tools' names the function {name!r} twice", "tools")
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise RequestError(f"'tools[{k}].function.description' must be a string", "tools")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise RequestError(f"'tools[{k}].function.parameters' must be a JSON Schema object", "tools")
        strict = function.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise RequestError(f"'tools[{k}].function.strict' must be a boolean", "tools")
        tools.append(Tool(name, description, parameters, bool(strict)))
    return tools


def _tool_choice(body: dict[str, Any], tools: list[Tool]) -> ToolChoice:
    """``tool_choice``, read by the core's readers of it (conformance/request.py, the judge's and the
    proxy's too), each function it names one of ``tools``."""
    value = body.get("tool_choice")
    if value is None:
        return ToolChoice("auto" if tools else "none")
    if not tools:
        raise RequestError(CHOICE_WITHOUT_TOOLS, "tool_choice")
    if value in ("none", "auto", "required"):
        return ToolChoice(value)
    kind = value.get("type") if isinstance(value, dict) else None
    name = named_function(value) if kind == "function" else None
    if name is not None:
        if not any(t.name == name for t in tools):
            raise RequestError(unoffered_function(name), "tool_choice")
        return ToolChoice("named", name)
    if kind == "allowed_tools":
        return _allowed_tools(value, tools)
    raise RequestError(
        "'tool_choice' must be 'none', 'auto', 'required', {'type': 'function', 'function': {'name': ...}} "
        "or {'type': 'allowed_tools', ...}",
        "tool_choice",
    )


def _allowed_tools(value: dict[str, Any], tools: list[Tool]) -> ToolChoice:
    """``{"type": "allowed_tools", "allowed_tools": {"mode": "auto" | "required", "tools": [...]}}``, each
    listed function one of ``tools``."""
    allowed = allowed_tools_choice(value)
    if allowed is None or not allowed[1]:
        raise RequestError(
            "'tool_choice.allowed_tools' must have 'mode' 'auto' or 'required' and a non-empty 'tools' list",
            "tool_choice",
            code="invalid_value",
        )
    mode, names = allowed
    for k, name in enumerate(names):
        if not any(t.name == name for t in tools):
            raise RequestError(
                unoffered_function(name, f"tool_choice.allowed_tools.tools[{k}]"),
                "tool_choice",
                code="invalid_value",
            )
    return ToolChoice("required" if mode == "required" else "auto", allowed=names)


def _content(content: Any, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            # An assistant turn's refusal part is what the model said (as the Responses translation
            # reads a refusal): the template shows it as the turn's text.
            key = part.get("type") if isinstance(part, dict) else None
            if key in ("image_url", "input_audio", "file"):
                # OpenAI's words for a part the model cannot read (an image to a text-only model).
                raise RequestError(
                    f"Invalid content type. {key} is only supported by certain models; this model reads "
                    "text only.",
                    f"messages[{i}].content[{j}]",
                    code="unsupported_content",
                )
            if key not in ("text", "refusal") or not isinstance(part.get(key), str):
                raise RequestError(
                    f"'messages[{i}].content[{j}]' is not a text part; this model reads text only",
                    f"messages[{i}].content[{j}]",
                    code="unsupported_content",
                )
            texts.append(part[key])
        return "".join(texts)
    raise RequestError(f"'messages[{i}].content' must be a string or an array of text parts", "messages")


def _common(body: Any, endpoint: Endpoint) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object", None)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("'model' must be a string", "model")
    stream = _boolean(body, "stream")
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise RequestError(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options"
            )
        if not isinstance(options, dict):
            raise RequestError("'stream_options' must be an object", "stream_options")
    include_usage = bool(options and options.get("include_usage"))
    if body.get("functions"):  # the deprecated pre-tools API; every current SDK sends 'tools'
        raise RequestError("'functions' is not supported by this server; use 'tools'", "functions")
    if body.get("best_of") not in (None, 1):
        raise RequestError("'best_of' is not supported by this server", "best_of")
    return {
        "model": model,
        "stream": stream,
        "include_usage": include_usage,
        "stop": _stop(body),
        "n": _integer(body, "n", 1, 1, MAX_N) or 1,
        "cache_prompt": _boolean(body, "cache_prompt", True),
        "verbose": endpoint == "chat" and _boolean(body, "verbose"),
    }


def _max_tokens(body: dict[str, Any], default: int | None) -> int | None:
    """The token limit, from the parameter OpenAI reads it from (``limit_parameter``); 0 is allowed (echo
    with logprobs scores a prompt), -1 is not (OpenAI has no "unlimited": leave the parameter out)."""
    name = limit_parameter(body)
    return default if name is None else _integer(body, name, default, 0, 1 << 30)


def parse_completion_request(body: Any) -> GenerationRequest:
    common = _common(body, "completions")
    if "prompt" not in body:
        raise RequestError("'prompt' is required", "prompt")
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise RequestError("'suffix' must be a string", "suffix")
    return GenerationRequest(
        endpoint="completions",
        prompts=_prompts(body["prompt"]),
        messages=[],
        sampling=_sampling(body, chat=False),
        max_tokens=_max_tokens(body, 16),
        logprobs=_integer(body, "logprobs", None, 0, MAX_COMPLETION_LOGPROBS),
        echo=_boolean(body, "echo"),
        suffix=suffix or None,
        **common,
    )


def _reasoning_effort_values() -> tuple[str, ...]:
    """OpenAI's values for ``reasoning_effort``, as the judge's request schema names them."""
    (values,) = [
        tuple(branch["enum"])
        for branch in load_schema("chat_completion_request")["properties"]["reasoning_effort"]["anyOf"]
        if "enum" in branch
    ]
    return values


REASONING_EFFORTS = _reasoning_effort_values()


def _reasoning_effort(body: dict[str, Any]) -> str | None:
    """The request's ``reasoning_effort``, one of OpenAI's values (a 400 naming it otherwise). It is
    accepted from every client and given to the chat template as that variable; a template that reads
    it (gpt-oss's) sets the model's effort with it, the others make the model think as they do."""
    value = body.get("reasoning_effort")
    if value is None:
        return None
    if value not in REASONING_EFFORTS:
        raise RequestError(
            f"Invalid value for 'reasoning_effort': expected one of {', '.join(REASONING_EFFORTS)}.",
            "reasoning_effort",
        )
    return str(value)


def _text_output(body: dict[str, Any]) -> None:
    """A 400 for a request that asks for audio: answering with text only would drop what was asked."""
    modalities = body.get("modalities")
    if body.get("audio") is not None or (isinstance(modalities, list) and "audio" in modalities):
        param = "audio" if body.get("audio") is not None else "modalities"
        raise RequestError(
            "Audio output is not supported by this server: this model writes text only.",
            param,
            code="unsupported_value",
        )


def parse_chat_request(body: Any) -> GenerationRequest:
    common = _common(body, "chat")
    _text_output(body)
    messages = _messages(body.get("messages"))
    tools = _tools(body)
    tool_choice = _tool_choice(body, tools)
    want = _boolean(body, "logprobs")
    top = _integer(body, "top_logprobs", None, 0, MAX_CHAT_TOP_LOGPROBS)
    if top is not None and not want:
        raise RequestError("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
    return GenerationRequest(
        endpoint="chat",
        prompts=[],
        messages=messages,
        sampling=_sampling(body, chat=True),
        max_tokens=_max_tokens(body, None),
        logprobs=(top or 0) if want else None,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=_boolean(body, "parallel_tool_calls", False),
        response_schema=_response_schema(body),
        reasoning_effort=_reasoning_effort(body),
        **common,
    )
