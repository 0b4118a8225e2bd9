"""The battery of live probes: each a small named request and its intent.

A probe keeps only what its request cannot say (its intent: "this prompt is meant to overflow", see
:mod:`conformance.rules.intents`); everything the request decides (choices for ``n``, usage, stop,
logprobs, echo, whether OpenAI accepts it) the shared judge derives from the request, in ``check`` as in
``validate`` of a recording. Optional features (``n``, prompt arrays, logprobs, echo...) are read from the
request too: a clean 4xx for one is "unsupported", a 5xx an error.

Probes ask for few tokens so a run against a small CPU model takes seconds; the tool and JSON probes ask
for enough to finish a call or an object that their schemas keep short (``maxLength``, enums).
The tool probes (issue 20) offer ``get_weather`` (and ``get_time``), force or forbid calls with
``tool_choice`` and send a whole round trip; what a call or a JSON answer must be the judge reads from the
request (rules/tool_use.py, rules/structured_output.py), so a recording of them is judged the same.
Probes ask for few tokens so a run against a small CPU model takes seconds.

The ``responses-*`` probes ask ``POST /v1/responses`` (OpenAI's Responses API, issue 21) for text, a stream, a
function tool round trip (the call, then the answer to its output), ``text.format`` ``json_schema``,
``max_output_tokens`` reached and an invalid request; a server without that route (404) is ``unsupported``
(:func:`conformance.rules.acceptance.route_missing`). Their token limits are at least 16: OpenAI refuses a
smaller ``max_output_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from conformance.live.recorder import RequestSpec

__all__ = ["PROBES", "Probe", "ProbeContext", "select_probes"]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
UNKNOWN_MODEL = "conformant-no-such-model"


@dataclass(frozen=True)
class ProbeContext:
    model: str
    overflow_words: int = 40_000
    """Words in the context-overflow prompt: more tokens than any small local context holds."""


@dataclass(frozen=True)
class Probe:
    name: str
    summary: str
    request: Callable[[ProbeContext], RequestSpec]
    intent: str | None = None
    """What the response is meant to show beyond what the request says (``success``, ``finish-length``,
    ``context-overflow``, ``unknown-model``); None where the request says it all (an invalid request)."""
    hang_up_after: int | None = None
    """Close the connection after this many body bytes (the disconnect probe)."""
    then: Callable[[ProbeContext], RequestSpec] | None = None
    """A second request, judged instead of the first (the server must still serve after a hang-up)."""


def _chat(ctx: ProbeContext, content: str = "Say hello.", **extra: Any) -> RequestSpec:
    messages = [{"role": "user", "content": content}]
    return RequestSpec(CHAT, {"model": ctx.model, "messages": messages, "max_tokens": 8, **extra})


def _completion(ctx: ProbeContext, prompt: Any = "The capital of France is", **extra: Any) -> RequestSpec:
    return RequestSpec(COMPLETIONS, {"model": ctx.model, "prompt": prompt, "max_tokens": 8, **extra})


def _function(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    parameters = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


_CITY = {"type": "string", "description": "a city name", "minLength": 1, "maxLength": 24}
WEATHER = _function(
    "get_weather",
    "The current weather in a city.",
    {"city": _CITY, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
)
TIME = _function("get_time", "The local time in a city.", {"city": _CITY})
_ASK_WEATHER = "What is the weather in Paris? Use the get_weather tool."
_ASK_BOTH = "What is the weather in Paris, and what time is it in Tokyo? Call both tools."
_TOOL_TOKENS = 96
"""Enough for one call (or two) of these functions, however a server's grammar spaces the JSON."""


def _tools(
    ctx: ProbeContext,
    content: str = _ASK_WEATHER,
    *,
    tools: tuple[dict[str, Any], ...] = (WEATHER,),
    **extra: Any,
) -> RequestSpec:
    return _chat(ctx, content, tools=list(tools), max_tokens=_TOOL_TOKENS, **extra)


def _named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def _round_trip(ctx: ProbeContext) -> RequestSpec:
    """A call made, its result sent back in a ``tool`` message, and the answer asked for."""
    call = {
        "id": "call_weather_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'},
    }
    messages = [
        {"role": "user", "content": _ASK_WEATHER},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_weather_1", "content": '{"temperature": 18, "sky": "clear"}'},
    ]
    body = {"model": ctx.model, "messages": messages, "tools": [WEATHER], "max_tokens": 32}
    return RequestSpec(CHAT, body)


_GREETING = {
    "type": "object",
    "properties": {
        "greeting": {"type": "string", "maxLength": 24},
        "mood": {"type": "string", "enum": ["happy", "calm", "tired"]},
        "formal": {"type": "boolean"},
    },
    "required": ["greeting", "mood", "formal"],
    "additionalProperties": False,
}
_JSON_SCHEMA = {
    "type": "json_schema",
    "json_schema": {"name": "greeting", "strict": True, "schema": _GREETING},
}
_JSON_TOKENS = 64


def _responses(ctx: ProbeContext, given: Any = "Say hello.", **extra: Any) -> RequestSpec:
    return RequestSpec(RESPONSES, {"model": ctx.model, "input": given, "max_output_tokens": 16, **extra})


_WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
_WEATHER_QUESTION = "What is the weather in Paris?"
# The round trip's second turn, as a client sends it: the call the model made and what the function gave.
_WEATHER_RESULT: list[dict[str, Any]] = [
    {"role": "user", "content": _WEATHER_QUESTION},
    {
        "type": "function_call",
        "call_id": "call_conformant_probe",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    },
    {"type": "function_call_output", "call_id": "call_conformant_probe", "output": '{"temperature_c": 18}'},
]
_ANSWER_FORMAT: dict[str, Any] = {
    "format": {
        "type": "json_schema",
        "name": "answer",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    }
}


def _without(spec: RequestSpec, key: str) -> RequestSpec:
    return RequestSpec(spec.path, {k: v for k, v in spec.body.items() if k != key})


_USAGE: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
_COUNT = "1, 2, 3, 4, 5, 6,"
_ECHO = "Once upon a time"

PROBES: tuple[Probe, ...] = (
    Probe("chat", "chat completion", lambda c: _chat(c), "success"),
    Probe("chat-stream", "chat completion, streamed", lambda c: _chat(c, stream=True), "success"),
    Probe("completion", "text completion", lambda c: _completion(c), "success"),
    Probe("completion-stream", "text completion, streamed", lambda c: _completion(c, stream=True), "success"),
    Probe(
        "chat-stream-usage",
        "chat stream with stream_options.include_usage",
        lambda c: _chat(c, **_USAGE),
        "success",
    ),
    Probe(
        "completion-stream-usage",
        "completion stream with stream_options.include_usage",
        lambda c: _completion(c, **_USAGE),
        "success",
    ),
    Probe(
        "stop",
        "a stop sequence ends the text before it",
        lambda c: _completion(c, _COUNT, stop=[","]),
        "success",
    ),
    Probe(
        "stop-stream",
        "a stop sequence in a stream",
        lambda c: _completion(c, _COUNT, stop=[","], stream=True),
        "success",
    ),
    Probe(
        "n-2",
        "n=2 gives two choices",
        lambda c: _chat(c, n=2, max_tokens=4),
        "success",
    ),
    Probe(
        "logprobs",
        "legacy logprobs on a text completion",
        lambda c: _completion(c, logprobs=2, max_tokens=4),
        "success",
    ),
    Probe(
        "chat-logprobs",
        "logprobs and top_logprobs on a chat completion",
        lambda c: _chat(c, logprobs=True, top_logprobs=2, max_tokens=4),
        "success",
    ),
    Probe(
        "chat-logprobs-no-top",
        "logprobs: true without top_logprobs on a chat completion",
        lambda c: _chat(c, logprobs=True, max_tokens=4),
        "success",
    ),
    Probe(
        "echo",
        "echo returns the prompt before the completion",
        lambda c: _completion(c, _ECHO, echo=True, max_tokens=4),
        "success",
    ),
    Probe(
        "prompt-array",
        "two prompts give two choices",
        lambda c: _completion(c, ["The sky is", "Grass is"], max_tokens=4),
        "success",
    ),
    Probe(
        "token-prompt",
        "a prompt given as token ids",
        lambda c: _completion(c, [100, 200, 300, 400], max_tokens=4),
        "success",
    ),
    Probe(
        "max-tokens-length",
        "max_tokens reached gives finish_reason length",
        # A completion, not a chat: a small model under a fallback chat template may stop at once.
        lambda c: _completion(c, _COUNT, max_tokens=2),
        "finish-length",
    ),
    Probe(
        "max-tokens-length-stream",
        "max_tokens reached in a stream gives finish_reason length",
        lambda c: _completion(c, _COUNT, max_tokens=2, stream=True),
        "finish-length",
    ),
    Probe(
        "max-completion-tokens",
        "max_completion_tokens reached gives finish_reason length",
        lambda c: _without(_chat(c, "Count from 1 to 20.", max_completion_tokens=3), "max_tokens"),
        "finish-length",
    ),
    Probe(
        "max-tokens-zero-echo",
        "max_tokens: 0 with echo returns the prompt alone (scoring a prompt)",
        # The stops bound the run on a server that reads 0 as "no limit" (llama-cpp-python): it ends at
        # the first sentence instead of filling its context. They cannot cut the echoed prompt, which
        # holds neither.
        lambda c: _completion(c, _ECHO, echo=True, max_tokens=0, stop=[".", "\n"]),
        "success",
    ),
    Probe("tools", "tools offered, tool_choice auto", lambda c: _tools(c), "success"),
    Probe(
        "tools-stream",
        "tools offered, tool_choice auto, streamed",
        lambda c: _tools(c, stream=True),
        "success",
    ),
    Probe(
        "tool-choice-none",
        "tool_choice none gives no call (streamed)",
        lambda c: _tools(c, tool_choice="none", stream=True),
        "success",
    ),
    Probe(
        "tool-choice-required",
        "tool_choice required gives a call",
        lambda c: _tools(c, tool_choice="required"),
        "success",
    ),
    Probe(
        "tool-choice-required-stream",
        "tool_choice required gives a call, streamed",
        lambda c: _tools(c, tool_choice="required", stream=True),
        "success",
    ),
    Probe(
        "tool-choice-named",
        "a named tool_choice calls that function",
        lambda c: _tools(c, tools=(TIME, WEATHER), tool_choice=_named("get_weather")),
        "success",
    ),
    Probe(
        "tool-choice-named-stream",
        "a named tool_choice calls that function, streamed",
        lambda c: _tools(c, tools=(TIME, WEATHER), tool_choice=_named("get_weather"), stream=True),
        "success",
    ),
    Probe(
        "parallel-tool-calls",
        "two calls in one turn (parallel_tool_calls), streamed",
        lambda c: _tools(
            c, _ASK_BOTH, tools=(WEATHER, TIME), tool_choice="required", parallel_tool_calls=True, stream=True
        ),
        "two-calls",
    ),
    Probe(
        "tool-round-trip",
        "an assistant tool call and its tool result, then the answer",
        _round_trip,
        "success",
    ),
    Probe(
        "json-object",
        "response_format json_object gives a JSON object",
        lambda c: _chat(
            c,
            'Reply in JSON: an object with the key "greeting".',
            response_format={"type": "json_object"},
            max_tokens=_JSON_TOKENS,
        ),
        "success",
    ),
    Probe(
        "json-schema",
        "response_format json_schema gives an object of that schema",
        lambda c: _chat(c, "Greet me in JSON.", response_format=_JSON_SCHEMA, max_tokens=_JSON_TOKENS),
        "success",
    ),
    Probe(
        "json-schema-stream",
        "response_format json_schema, streamed",
        lambda c: _chat(
            c, "Greet me in JSON.", response_format=_JSON_SCHEMA, max_tokens=_JSON_TOKENS, stream=True
        ),
        "success",
    ),
    Probe(
        "reasoning",
        "a reasoning model's thinking in reasoning_content, streamed (skip where the model does not reason)",
        lambda c: _chat(
            c, "Is 17 a prime number? Think first.", reasoning_effort="low", max_tokens=256, stream=True
        ),
        "reasoning",
    ),
    Probe(
        "unknown-model",
        "a model the server does not have",
        lambda c: _chat(ProbeContext(UNKNOWN_MODEL), max_tokens=2),
        "unknown-model",
    ),
    Probe(
        "invalid-type",
        "max_tokens of the wrong type",
        lambda c: _completion(c, max_tokens="eight"),
    ),
    Probe(
        "invalid-range",
        "temperature out of range (0 to 2)",
        lambda c: _chat(c, temperature=7, max_tokens=2),
    ),
    Probe(
        "missing-prompt",
        "a completion without prompt",
        lambda c: _without(_completion(c, max_tokens=2), "prompt"),
    ),
    Probe(
        "missing-messages",
        "a chat completion without messages",
        lambda c: _without(_chat(c, max_tokens=2), "messages"),
    ),
    Probe(
        "malformed-json",
        "a body that is not JSON",
        lambda c: RequestSpec(CHAT, raw=b'{"model": "x", "messages": [{"role": "user"'),
    ),
    Probe(
        "context-overflow",
        "a prompt longer than the context",
        lambda c: _completion(c, "hello " * c.overflow_words, max_tokens=2),
        "context-overflow",
    ),
    Probe(
        "context-overflow-stream",
        "a prompt longer than the context, streamed",
        lambda c: _completion(c, "hello " * c.overflow_words, max_tokens=2, stream=True),
        "context-overflow",
    ),
    Probe("responses", "Responses API text", lambda c: _responses(c), "success"),
    Probe("responses-stream", "Responses API, streamed", lambda c: _responses(c, stream=True), "success"),
    Probe(
        "responses-tool-call",
        "Responses API function tool: the call, streamed",
        lambda c: _responses(
            c,
            _WEATHER_QUESTION,
            tools=[_WEATHER],
            tool_choice={"type": "function", "name": "get_weather"},
            max_output_tokens=64,
            stream=True,
        ),
        "success",
    ),
    Probe(
        "responses-tool-result",
        "Responses API function tool: the answer to the call's output",
        lambda c: _responses(c, _WEATHER_RESULT, tools=[_WEATHER]),
        "success",
    ),
    Probe(
        "responses-json-schema",
        "Responses API text.format json_schema",
        lambda c: _responses(c, "Name a colour.", text=_ANSWER_FORMAT, max_output_tokens=64),
        "success",
    ),
    Probe(
        "responses-max-output-tokens",
        "max_output_tokens reached in a Responses stream gives status incomplete",
        lambda c: _responses(c, f"Continue: {_COUNT}", stream=True),
        "finish-length",
    ),
    Probe(
        "responses-logprobs",
        "Responses API text with its token logprobs (include message.output_text.logprobs)",
        lambda c: _responses(c, include=["message.output_text.logprobs"], top_logprobs=2),
        "success",
    ),
    Probe(
        "responses-invalid",
        "a Responses request with max_output_tokens of the wrong type",
        lambda c: _responses(c, max_output_tokens="eight"),
    ),
    Probe(
        "disconnect",
        "a client hangs up mid-stream; the next request is still served",
        lambda c: _chat(c, "Write a long story.", max_tokens=64, stream=True),
        "success",
        hang_up_after=1,
        then=lambda c: _completion(c, max_tokens=2),
    ),
)


def select_probes(only: Sequence[str] = (), skip: Sequence[str] = ()) -> list[Probe]:
    """Probes by name; an unknown name is a ``ValueError`` naming the known ones."""
    known = {p.name for p in PROBES}
    unknown = sorted((set(only) | set(skip)) - known)
    if unknown:
        raise ValueError(f"unknown probe {', '.join(unknown)}; known: {', '.join(p.name for p in PROBES)}")
    return [p for p in PROBES if (not only or p.name in only) and p.name not in skip]
