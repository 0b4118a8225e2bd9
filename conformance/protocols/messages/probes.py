"""The Messages API probes of ``check`` (``POST /v1/messages``, what Claude Code and the Anthropic SDKs
send): text, a stream, a tool use forced by name (streamed), ``tool_choice`` ``any``, the answer to a
tool result, a stop sequence, ``max_tokens`` reached, a prompt longer than the context (Claude Code
compacts on Anthropic's wording), ``count_tokens``, thinking (a warning where the model shows none, as
for chat's reasoning probe) and an invalid request. A server without the route (404) is
``unsupported`` (:func:`conformance.rules.acceptance.route_missing`).
"""

from __future__ import annotations

from typing import Any

from conformance.probe import COUNTING, Probe, ProbeContext, RequestSpec

from .request import COUNT_PATH, PATH

__all__ = ["PROBES"]


_WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
_QUESTION = "What is the weather in Paris?"
_TOOL_RESULT: list[dict[str, Any]] = [
    {"role": "user", "content": _QUESTION},
    {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": "toolu_conformant_probe",
                "name": "get_weather",
                "input": {"city": "Paris"},
            }
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_conformant_probe", "content": "18 C, sunny"}
        ],
    },
]


def _messages(ctx: ProbeContext, given: Any = "Say hello.", **extra: Any) -> RequestSpec:
    messages = [{"role": "user", "content": given}] if isinstance(given, str) else given
    return RequestSpec(PATH, {"model": ctx.model, "max_tokens": 16, "messages": messages, **extra})


PROBES: tuple[Probe, ...] = (
    Probe("messages", "Messages API text", lambda c: _messages(c), "success"),
    Probe("messages-stream", "Messages API, streamed", lambda c: _messages(c, stream=True), "success"),
    Probe(
        "messages-tool-use",
        "Messages API tool use forced by name, streamed",
        lambda c: _messages(
            c,
            _QUESTION,
            tools=[_WEATHER],
            tool_choice={"type": "tool", "name": "get_weather"},
            max_tokens=64,
            stream=True,
        ),
        "success",
    ),
    Probe(
        "messages-tool-any",
        "Messages API tool_choice any",
        lambda c: _messages(c, _QUESTION, tools=[_WEATHER], tool_choice={"type": "any"}, max_tokens=64),
        "success",
    ),
    Probe(
        "messages-tool-result",
        "Messages API: the answer to a tool result",
        lambda c: _messages(c, _TOOL_RESULT, tools=[_WEATHER]),
        "success",
    ),
    Probe(
        "messages-stop-sequence",
        "Messages API stop_sequences",
        lambda c: _messages(c, f"Continue: {COUNTING}", stop_sequences=["9"], stream=True),
        "success",
    ),
    Probe(
        "messages-max-tokens",
        "max_tokens reached in a Messages stream gives stop_reason max_tokens",
        lambda c: _messages(c, f"Continue: {COUNTING}", stream=True),
        "finish-length",
    ),
    Probe(
        "messages-context-overflow",
        "a Messages prompt longer than the context: 400, 'prompt is too long'",
        lambda c: _messages(c, "hello " * c.overflow_words, max_tokens=2),
        "context-overflow",
    ),
    Probe(
        "messages-count-tokens",
        "Messages API count_tokens of a prompt with a tool",
        lambda c: RequestSpec(
            COUNT_PATH,
            {"model": c.model, "messages": [{"role": "user", "content": _QUESTION}], "tools": [_WEATHER]},
        ),
        "success",
    ),
    Probe(
        "messages-thinking",
        "a reasoning model's thinking as thinking blocks, streamed (skip where the model does not reason)",
        lambda c: _messages(
            c,
            "Is 17 a prime number? Think first.",
            # Adaptive thinking at low effort: "enabled" needs a budget of 1,024 tokens and more room
            # than that, which would make this probe the battery's slowest by far.
            thinking={"type": "adaptive"},
            output_config={"effort": "low"},
            max_tokens=256,
            stream=True,
        ),
        "reasoning",
    ),
    Probe(
        "messages-invalid",
        "a Messages request with max_tokens of the wrong type",
        lambda c: _messages(c, max_tokens="eight"),
    ),
)
