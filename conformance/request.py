"""The client's request, read once into one typed object that the judge, ``check`` and the proxy all use.

Before this model the proxy's normalizer and the judge each read the body with copied helpers and
disagreed on the token limit (the judge took the larger of ``max_tokens`` and ``max_completion_tokens``,
the proxy the latter). The limit is resolved as OpenAI resolves it: ``max_completion_tokens`` when given,
else ``max_tokens`` (``max_tokens`` is deprecated in its favour, openai-spec.md 2.4); a request with both
is refused by OpenAI with 400 ``invalid_parameter_combination`` ("Setting 'max_tokens' and
'max_completion_tokens' at the same time is not supported.", param ``max_tokens``), which
:attr:`Request.limit_conflict` records for the acceptance rules.

Tools, ``tool_choice``, ``parallel_tool_calls`` and ``response_format`` are read here too (issue 20): each
function's ``parameters`` schema by name, the ``tool_choice`` mode (OpenAI's default with tools is
``auto``) and the ``json_schema`` schema, which the tool-use and structured-output rules hold a response
to, in ``check``, in ``validate`` and in the proxy alike.

A request of another protocol is read into the same model by that protocol's package
(``read_request`` in conformance/protocols/responses/request.py for the Responses API), so that every
rule that reads a request (the token limit, tools, structured output) judges every protocol alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CHOICE_WITHOUT_TOOLS",
    "Endpoint",
    "Request",
    "allowed_tools_choice",
    "content_texts",
    "function_schemas",
    "integer",
    "limit_parameter",
    "message_texts",
    "named_function",
    "prompt_text",
    "unoffered_function",
]

Endpoint = Literal["completions", "chat"]
"""The core's own wire: the two OpenAI streams that the proxy's normalizer repairs and the backend
writes. Every other protocol is served as a translation to one of them (conformance/protocols/)."""


def _part_types(body: Any) -> set[str]:
    """The content part types of a chat request's messages or a Responses request's input items: a
    model may read no images or files, and declining them is a clean 4xx (issue 38)."""
    if not isinstance(body, Mapping):
        return set()
    turns = body.get("messages") if "messages" in body else body.get("input")
    found: set[str] = set()
    for turn in turns if isinstance(turns, list) else ():
        content = turn.get("content") if isinstance(turn, Mapping) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, Mapping) and isinstance(part.get("type"), str):
                found.add(part["type"])
    return found


def integer(value: Any) -> int | None:
    """``value`` when it is a JSON integer (``true`` is not one, though Python counts it an int)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def limit_parameter(body: Mapping[str, Any]) -> str | None:
    """The parameter that holds a chat or completions request's token limit, as OpenAI resolves it:
    ``max_completion_tokens`` when given, else ``max_tokens``; None when neither is. The one reading of
    the limit: the judge's (``Request.max_tokens``), the proxy's and the backend's."""
    if body.get("max_completion_tokens") is not None:
        return "max_completion_tokens"
    return "max_tokens" if body.get("max_tokens") is not None else None


def _stop_sequences(stop: Any) -> tuple[str, ...]:
    sequences = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    return tuple(s for s in sequences if isinstance(s, str) and s)


def _prompts(prompt: Any) -> tuple[int, tuple[str, ...], int]:
    """(prompts in the request, their texts when all are text, token ids of a single token-id prompt).

    ``prompt`` is a string, an array of strings, an array of token ids (one prompt) or an array of
    token-id arrays (one prompt each); each prompt of an array gets ``n`` choices (Q73).
    """
    if isinstance(prompt, str):
        return 1, (prompt,), 0
    if not isinstance(prompt, list) or not prompt:
        return 1, (), 0
    if all(type(t) is int for t in prompt):
        return 1, (), len(prompt)
    if all(isinstance(p, str | list) for p in prompt):
        texts = tuple(prompt) if all(isinstance(p, str) for p in prompt) else ()
        return len(prompt), texts, 0
    return 1, (), 0


def function_schemas(tools: Any) -> Mapping[str, Any]:
    """Each function tool's ``parameters`` schema by name (``{}``, anything, when it has none), from chat's
    ``{"type": "function", "function": {...}}`` or the Responses API's flat ``{"type": "function", "name",
    "parameters"}``: what the tool-call rules validate a call's arguments against."""
    schemas: dict[str, Any] = {}
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            continue
        nested = tool.get("function")
        function: Mapping[str, Any] = nested if isinstance(nested, Mapping) else tool
        name = function.get("name")
        if isinstance(name, str):
            parameters = function.get("parameters")
            schemas[name] = parameters if isinstance(parameters, Mapping) else {}
    return schemas


CHOICE_WITHOUT_TOOLS = (
    "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
)
"""OpenAI's words for a ``tool_choice`` sent without ``tools``: the bundled backend's and the proxy's."""


def unoffered_function(name: str, param: str = "tool_choice") -> str:
    """OpenAI's words for a ``tool_choice`` (at ``param``) naming a function ``tools`` does not offer."""
    return f"Invalid value for '{param}': no function named {name!r} was specified in 'tools'."


def named_function(choice: Any) -> str | None:
    """The function a named ``tool_choice`` forces: chat's ``{"type": "function", "function": {"name"}}``
    or the Responses API's flat ``{"type": "function", "name"}``."""
    nested = choice.get("function") if isinstance(choice, Mapping) else None
    function = nested if isinstance(nested, Mapping) else choice
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) else None


def allowed_tools_choice(choice: Any) -> tuple[str, tuple[str, ...]] | None:
    """(mode, names) of chat's ``{"type": "allowed_tools", "allowed_tools": {"mode", "tools":
    [{"type": "function", "function": {"name"}}]}}`` or the Responses API's flat ``{"type":
    "allowed_tools", "mode", "tools": [{"type": "function", "name"}]}``; None for any other choice,
    or one without a mode and a list of names."""
    if not isinstance(choice, Mapping) or choice.get("type") != "allowed_tools":
        return None
    nested = choice.get("allowed_tools")
    allowed = nested if isinstance(nested, Mapping) else choice
    mode, tools = allowed.get("mode"), allowed.get("tools")
    if mode not in ("auto", "required") or not isinstance(tools, list):
        return None
    names = []
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str):
            return None
        names.append(name)
    return str(mode), tuple(names)


def content_texts(content: Any) -> list[str]:
    """The texts of one message's ``content``: the string, or the ``text`` of each text part."""
    if isinstance(content, str):
        return [content]
    parts = (p.get("text") for p in content if isinstance(p, Mapping)) if isinstance(content, list) else ()
    return [t for t in parts if isinstance(t, str)]


def message_texts(messages: Any) -> tuple[str, ...]:
    """The text of each chat message: a string ``content``, or the ``text`` of its text parts (the proxy
    counts and checks a chat prompt by these too)."""
    if not isinstance(messages, list):
        return ()
    texts: list[str] = []
    for message in messages:
        texts += content_texts(message.get("content") if isinstance(message, Mapping) else None)
    return tuple(texts)


def prompt_text(body: Mapping[str, Any]) -> str:
    """A chat or completions request's text, for counting its prompt tokens and naming its prefix (chat:
    the message texts, without the template)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    return "\n".join(message_texts(body.get("messages")))


_SCHEMAS: dict[Endpoint, str] = {"chat": "chat_completion_request", "completions": "completion_request"}


@dataclass(frozen=True, slots=True)
class Request:
    """What one request asks for, in any protocol; ``known`` is False when no request was recorded."""

    known: bool = False
    """False for a bare transcript: the request-driven rules stay quiet."""
    endpoint: str | None = None
    """The protocol it was sent in: ``chat``, ``completions``, or another protocol's name."""
    schema: str | None = None
    """The request schema (schemas/) that says whether OpenAI, or the protocol's owner, accepts it."""
    body: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    """The body as sent when it was a JSON object; None when unknown or not JSON (see :attr:`raw`)."""
    raw: str | None = field(default=None, compare=False, repr=False)
    """The body's text when it was not a JSON object (a malformed body recorded on purpose)."""
    model: str | None = None
    stream: bool = False
    include_usage: bool = False
    """``stream_options.include_usage``, honoured only in a stream (OpenAI refuses it otherwise)."""
    n: int | None = None
    """``n`` when the request set it explicitly."""
    prompts: int = 1
    """Prompts in a ``/v1/completions`` prompt array (each gets ``n`` choices, Q73)."""
    prompt_texts: tuple[str, ...] = ()
    """The prompt, or each prompt of an array, when given as text (empty for token-id prompts)."""
    prompt_token_ids: int = 0
    """Token ids in a prompt given as one array of token ids."""
    messages: int = 0
    """Messages in a chat request."""
    message_texts: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """The text of the chat messages (every one of them is part of the prompt the model reads)."""
    stop: tuple[str, ...] = ()
    echo: bool = False
    suffix: bool = False
    max_tokens: int | None = None
    """The token limit: ``max_completion_tokens`` when given, else ``max_tokens`` (as OpenAI reads them)."""
    limit_conflict: bool = False
    """Both ``max_tokens`` and ``max_completion_tokens`` were set: OpenAI refuses the request."""
    logprobs: bool = False
    top_logprobs: int | None = None
    """Alternatives per token asked for: legacy ``logprobs: N``, or chat ``top_logprobs`` (0 when a chat
    request asked for ``logprobs: true`` alone: OpenAI then sends ``top_logprobs: []``)."""
    best_of: int | None = None
    tools: int = 0
    tool_choice: Any = None
    response_format: Any = None
    """Chat's ``response_format``, or a Responses request's ``text.format``."""
    tool_schemas: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Each function tool's ``parameters`` schema by function name (see :func:`function_schemas`)."""
    parallel_tool_calls: bool | None = None
    """``parallel_tool_calls`` when set: ``false`` allows at most one call per turn."""

    @classmethod
    def from_body(cls, endpoint: Endpoint | None, body: Mapping[str, Any]) -> Request:
        """The chat or completions request ``body`` (a JSON object; ``endpoint`` None: read as these
        are, from a recording that names no path). Other protocols read theirs into this model
        themselves (``read_request`` of each package of conformance/protocols/)."""
        options = body.get("stream_options")
        stream = body.get("stream") is True
        logprobs = body.get("logprobs")
        legacy = integer(logprobs)
        top = legacy if legacy is not None else integer(body.get("top_logprobs"))
        if top is None and logprobs is True and endpoint == "chat":
            top = 0
        limit = limit_parameter(body)
        prompts, texts, token_ids = _prompts(body.get("prompt"))
        messages = body.get("messages")
        tools = body.get("tools")
        parallel = body.get("parallel_tool_calls")
        model = body.get("model")
        return cls(
            known=True,
            endpoint=endpoint,
            schema=_SCHEMAS.get(endpoint) if endpoint is not None else None,
            body=body,
            model=model if isinstance(model, str) else None,
            stream=stream,
            include_usage=stream and isinstance(options, Mapping) and options.get("include_usage") is True,
            n=integer(body.get("n")),
            prompts=prompts,
            prompt_texts=texts,
            prompt_token_ids=token_ids,
            messages=len(messages) if isinstance(messages, list) else 0,
            message_texts=message_texts(messages),
            stop=_stop_sequences(body.get("stop")),
            echo=body.get("echo") is True,
            suffix=bool(body.get("suffix")),
            max_tokens=integer(body.get(limit)) if limit is not None else None,
            limit_conflict=body.get("max_tokens") is not None
            and body.get("max_completion_tokens") is not None,
            logprobs=logprobs is True or (legacy is not None and legacy >= 0),
            top_logprobs=top,
            best_of=integer(body.get("best_of")),
            tools=len(tools) if isinstance(tools, list) else 0,
            tool_choice=body.get("tool_choice"),
            response_format=body.get("response_format"),
            tool_schemas=function_schemas(tools),
            parallel_tool_calls=parallel if isinstance(parallel, bool) else None,
        )

    @property
    def output_schema(self) -> Mapping[str, Any] | None:
        """The JSON Schema structured output must match: ``response_format.json_schema.schema`` (chat) or
        ``text.format.schema`` (Responses), when the request asked for ``json_schema``."""
        fmt = self.response_format
        if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
            return None
        nested = fmt.get("json_schema")
        holder = nested if isinstance(nested, Mapping) else fmt  # chat nests it; the Responses API does not
        schema = holder.get("schema") if isinstance(holder, Mapping) else None
        return schema if isinstance(schema, Mapping) else None

    @property
    def per_prompt(self) -> int:
        """Choices each prompt gets: ``n`` (1 when unset or not a positive number)."""
        return self.n if self.n is not None and self.n > 0 else 1

    @property
    def choices(self) -> int | None:
        """How many choices the response must carry (None when the request is unknown)."""
        return self.per_prompt * self.prompts if self.known else None

    @property
    def completion_limit(self) -> int | None:
        """The most completion tokens usage may count: the limit per generated sequence times the
        sequences generated, ``n`` (or ``best_of``, all of which are generated and billed) per prompt."""
        if not self.known or self.max_tokens is None or self.max_tokens < 0:
            return None
        return self.max_tokens * max(self.n or 1, self.best_of or 1) * self.prompts

    @property
    def generates(self) -> bool:
        """False for a token limit of 0 (a prompt scored with ``echo``): no generated text at all."""
        return self.max_tokens != 0

    def prompt_for(self, index: int) -> str | None:
        """The text prompt choice ``index`` answers (choices run prompt by prompt, ``n`` each), if known."""
        position = index // self.per_prompt
        return self.prompt_texts[position] if 0 <= position < len(self.prompt_texts) else None

    def asked(self) -> str:
        """The request's ask, for messages: ``n=2``, or ``n=2 for each of 3 prompts``."""
        n = f"n={self.n or 1}"
        return n if self.prompts == 1 else f"{n} for each of {self.prompts} prompts"

    @property
    def tool_choice_mode(self) -> str | None:
        """``none``, ``auto``, ``required`` or ``function`` (a named function) for a request with tools;
        OpenAI's default is ``auto`` with tools. None without tools or for a value it refuses."""
        if not self.tools:
            return None
        choice = self.tool_choice
        if choice is None:
            return "auto"
        if choice in ("none", "auto", "required"):
            return str(choice)
        allowed = allowed_tools_choice(choice)
        if allowed is not None:
            return allowed[0]
        return "function" if self.tool_choice_function is not None else None

    @property
    def tool_choice_allowed(self) -> tuple[str, ...] | None:
        """The functions an ``allowed_tools`` choice lets the model call, its mode (``auto`` or
        ``required`` among them) being ``tool_choice_mode``."""
        allowed = allowed_tools_choice(self.tool_choice)
        return None if allowed is None else allowed[1]

    @property
    def tool_choice_function(self) -> str | None:
        """The function a named ``tool_choice`` forces (:func:`named_function`)."""
        return named_function(self.tool_choice)

    @property
    def response_format_type(self) -> str | None:
        """``text``, ``json_object`` or ``json_schema`` (None when unset or not an object with a type)."""
        fmt = self.response_format
        kind = fmt.get("type") if isinstance(fmt, Mapping) else None
        return kind if isinstance(kind, str) else None

    @property
    def features(self) -> tuple[str, ...]:
        """The optional features the request uses: a server may decline them with a clean 4xx."""
        used = {
            "n": self.per_prompt > 1,
            "prompt array": self.prompts > 1,
            "token-id prompt": self.prompt_token_ids > 0 or (self.prompts > 1 and not self.prompt_texts),
            "logprobs": self.logprobs,
            "echo": self.echo,
            "suffix": self.suffix,
            "best_of": (self.best_of or 1) > 1,
            "tools": self.tools > 0,
            "response_format": isinstance(self.response_format, Mapping)
            and self.response_format.get("type") not in (None, "text"),
            "reasoning_effort": self.body is not None and self.body.get("reasoning_effort") is not None,
        }
        parts = _part_types(self.body)
        used["image input"] = bool(parts & {"image_url", "input_image"})
        used["file input"] = bool(parts & {"file", "input_file"})
        return tuple(name for name, on in used.items() if on)
