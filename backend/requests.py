"""OpenAI request bodies -> validated generation requests.

Every check raises :class:`RequestError` naming the offending parameter, so the app can answer with
a 400 ``invalid_request_error`` whose ``param`` points at it (the SDKs show that field to users).
Nothing here touches llama.cpp: tokenizing and grammar parsing happen in the engine's front half.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ChatMessage",
    "GenerationRequest",
    "PromptPart",
    "RequestError",
    "SamplingParams",
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


class RequestError(ValueError):
    """A request the server refuses: becomes an OpenAI error body with this status and ``param``."""

    def __init__(self, message: str, param: str | None, *, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code


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
    ignore_eos: bool = False
    logit_bias: dict[int, float] = field(default_factory=dict)


@dataclass(slots=True)
class ChatMessage:
    role: str
    content: str


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


def _grammar(body: dict[str, Any], *, chat: bool) -> str | None:
    """One of ``grammar`` (GBNF), ``json_schema`` (llama.cpp) or ``response_format`` (OpenAI)."""
    from backend.grammars import grammar_for_schema, json_grammar

    given = [name for name in ("grammar", "json_schema", "response_format") if body.get(name) is not None]
    if len(given) > 1 and not (given == ["response_format"] or _is_text_format(body.get("response_format"))):
        raise RequestError(f"use only one of {', '.join(repr(g) for g in given)}", given[1])
    grammar = body.get("grammar")
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            raise RequestError("'grammar' must be a non-empty GBNF string", "grammar")
        return grammar
    schema = body.get("json_schema")
    if schema is not None:
        if not isinstance(schema, dict):
            raise RequestError("'json_schema' must be a JSON Schema object", "json_schema")
        return grammar_for_schema(schema, "json_schema")
    fmt = body.get("response_format")
    if fmt is None or _is_text_format(fmt):
        return None
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise RequestError("'response_format' must be an object with a 'type'", "response_format")
    if fmt["type"] == "json_object":
        return json_grammar()
    if fmt["type"] == "json_schema":
        spec = fmt.get("json_schema")
        inner = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(inner, dict):
            raise RequestError(
                "'response_format.json_schema.schema' must be a JSON Schema object", "response_format"
            )
        return grammar_for_schema(inner, "response_format")
    raise RequestError(
        f"'response_format.type' must be 'text', 'json_object' or 'json_schema', got {fmt['type']!r}",
        "response_format",
    )


def _is_text_format(fmt: Any) -> bool:
    return isinstance(fmt, dict) and fmt.get("type") == "text"


def _sampling(body: dict[str, Any], *, chat: bool) -> SamplingParams:
    seed = body.get("seed")
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
        ignore_eos=_boolean(body, "ignore_eos"),
        logit_bias=_logit_bias(body),
    )


def _prompts(value: Any) -> list[list[PromptPart]]:
    """OpenAI's four prompt shapes plus llama.cpp's mixed token/text list."""
    bad = RequestError(
        "'prompt' must be a string, an array of token ids, an array of strings or an array of those",
        "prompt",
    )
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


def _messages(value: Any) -> list[ChatMessage]:
    if not isinstance(value, list) or not value:
        raise RequestError("'messages' must be a non-empty array", "messages")
    out = []
    for i, msg in enumerate(value):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise RequestError(f"'messages[{i}]' must be an object with a 'role'", "messages")
        role = msg["role"]
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise RequestError(f"'messages[{i}].role' {role!r} is not a known role", "messages")
        out.append(ChatMessage("system" if role == "developer" else role, _content(msg.get("content"), i)))
    return out


def _content(content: Any, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise RequestError(
                    f"'messages[{i}].content' parts must be text parts; this model reads text only",
                    "messages",
                )
            texts.append(part["text"])
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
    for unsupported in ("tools", "functions"):
        if body.get(unsupported):
            raise RequestError(f"'{unsupported}' is not supported by this server", unsupported)
    if body.get("best_of") not in (None, 1):
        raise RequestError("'best_of' is not supported by this server", "best_of")
    return {
        "model": model,
        "stream": stream,
        "include_usage": include_usage,
        "stop": _stop(body),
        "n": _integer(body, "n", 1, 1, MAX_N) or 1,
        "cache_prompt": _boolean(body, "cache_prompt", True),
    }


def _max_tokens(body: dict[str, Any], names: tuple[str, ...], default: int | None) -> int | None:
    """The first of ``names`` given; 0 is allowed (echo with logprobs scores a prompt), -1 is not (OpenAI
    has no "unlimited": leave the parameter out)."""
    for name in names:
        value = _integer(body, name, None, 0, 1 << 30)
        if value is not None:
            return value
    return default


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
        max_tokens=_max_tokens(body, ("max_tokens",), 16),
        logprobs=_integer(body, "logprobs", None, 0, MAX_COMPLETION_LOGPROBS),
        echo=_boolean(body, "echo"),
        suffix=suffix or None,
        **common,
    )


def parse_chat_request(body: Any) -> GenerationRequest:
    common = _common(body, "chat")
    messages = _messages(body.get("messages"))
    want = _boolean(body, "logprobs")
    top = _integer(body, "top_logprobs", None, 0, MAX_CHAT_TOP_LOGPROBS)
    if top is not None and not want:
        raise RequestError("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
    return GenerationRequest(
        endpoint="chat",
        prompts=[],
        messages=messages,
        sampling=_sampling(body, chat=True),
        max_tokens=_max_tokens(body, ("max_completion_tokens", "max_tokens"), None),
        logprobs=(top or 0) if want else None,
        **common,
    )
