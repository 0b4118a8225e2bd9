"""The chat completions probes of ``check``: text, streams, usage, ``n``, logprobs, the token limit,
tools and ``tool_choice`` (a call forced, forbidden, named; two in one turn; a round trip), structured
output, reasoning, an unknown model, invalid requests, and a client that hangs up mid-stream.

The tool and JSON probes (issue 20) ask for enough tokens to finish a call or an object that their
schemas keep short (``maxLength``, enums); what a call or a JSON answer must be the judge reads from the
request (rules/tool_use.py, rules/structured_output.py), so a recording of them is judged the same.
"""

from __future__ import annotations

from typing import Any

from conformance.probe import (
    STREAM_USAGE,
    TIME,
    UNKNOWN_MODEL,
    WEATHER,
    Probe,
    ProbeContext,
    RequestSpec,
    without,
)

__all__ = ["PROBES"]

PATH = "/v1/chat/completions"


def _chat(ctx: ProbeContext, content: str = "Say hello.", **extra: Any) -> RequestSpec:
    messages = [{"role": "user", "content": content}]
    return RequestSpec(PATH, {"model": ctx.model, "messages": messages, "max_tokens": 8, **extra})


_ASK_WEATHER = "What is the weather in Paris? Use the get_weather tool."


_ASK_BOTH = "What is the weather in Paris, and what time is it in Tokyo? Call both tools."


_TOOL_TOKENS = 96


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
    return RequestSpec(PATH, body)


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


PROBES: tuple[Probe, ...] = (
    Probe("chat", "chat completion", lambda c: _chat(c), "success"),
    Probe("chat-stream", "chat completion, streamed", lambda c: _chat(c, stream=True), "success"),
    Probe(
        "chat-stream-usage",
        "chat stream with stream_options.include_usage",
        lambda c: _chat(c, **STREAM_USAGE),
        "success",
    ),
    Probe(
        "n-2",
        "n=2 gives two choices",
        lambda c: _chat(c, n=2, max_tokens=4),
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
        "max-completion-tokens",
        "max_completion_tokens reached gives finish_reason length",
        lambda c: without(_chat(c, "Count from 1 to 20.", max_completion_tokens=3), "max_tokens"),
        "finish-length",
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
        "invalid-range",
        "temperature out of range (0 to 2)",
        lambda c: _chat(c, temperature=7, max_tokens=2),
    ),
    Probe(
        "missing-messages",
        "a chat completion without messages",
        lambda c: without(_chat(c, max_tokens=2), "messages"),
    ),
    Probe(
        "malformed-json",
        "a body that is not JSON",
        lambda c: RequestSpec(PATH, raw=b'{"model": "x", "messages": [{"role": "user"'),
    ),
    Probe(
        "disconnect",
        "a client hangs up mid-stream; the next request is still served",
        lambda c: _chat(c, "Write a long story.", max_tokens=64, stream=True),
        "success",
        hang_up_after=1,
        # Any request will do: a completion, whose answer a small model gives in two tokens.
        then=lambda c: RequestSpec(
            "/v1/completions", {"model": c.model, "prompt": "The capital of France is", "max_tokens": 2}
        ),
    ),
)
