"""The legacy completions probes of ``check``: text, streams, usage, stop sequences, logprobs, ``echo``,
prompt arrays and token-id prompts, the token limit (reached, and 0 with ``echo``), invalid requests, and
a prompt longer than the context (streamed and not).

Completions, not chat, where the probe needs the model to go on: a small model under a fallback chat
template may stop at once.
"""

from __future__ import annotations

from typing import Any

from conformance.probe import COUNTING, STREAM_USAGE, Probe, ProbeContext, RequestSpec, without

__all__ = ["PROBES"]

PATH = "/v1/completions"


def _completion(ctx: ProbeContext, prompt: Any = "The capital of France is", **extra: Any) -> RequestSpec:
    return RequestSpec(PATH, {"model": ctx.model, "prompt": prompt, "max_tokens": 8, **extra})


_ECHO = "Once upon a time"


PROBES: tuple[Probe, ...] = (
    Probe("completion", "text completion", lambda c: _completion(c), "success"),
    Probe("completion-stream", "text completion, streamed", lambda c: _completion(c, stream=True), "success"),
    Probe(
        "completion-stream-usage",
        "completion stream with stream_options.include_usage",
        lambda c: _completion(c, **STREAM_USAGE),
        "success",
    ),
    Probe(
        "stop",
        "a stop sequence ends the text before it",
        lambda c: _completion(c, COUNTING, stop=[","]),
        "success",
    ),
    Probe(
        "stop-stream",
        "a stop sequence in a stream",
        lambda c: _completion(c, COUNTING, stop=[","], stream=True),
        "success",
    ),
    Probe(
        "logprobs",
        "legacy logprobs on a text completion",
        lambda c: _completion(c, logprobs=2, max_tokens=4),
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
        lambda c: _completion(c, COUNTING, max_tokens=2),
        "finish-length",
    ),
    Probe(
        "max-tokens-length-stream",
        "max_tokens reached in a stream gives finish_reason length",
        lambda c: _completion(c, COUNTING, max_tokens=2, stream=True),
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
    Probe(
        "invalid-type",
        "max_tokens of the wrong type",
        lambda c: _completion(c, max_tokens="eight"),
    ),
    Probe(
        "missing-prompt",
        "a completion without prompt",
        lambda c: without(_completion(c, max_tokens=2), "prompt"),
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
)
