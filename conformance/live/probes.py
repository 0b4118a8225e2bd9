"""The battery of live probes: each a small named request and what its response must show.

Probes ask for few tokens so a run against a small CPU model takes seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from conformance.live import expectations as ex
from conformance.live.recorder import RequestSpec

__all__ = ["PROBES", "Probe", "ProbeContext", "select_probes"]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
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
    expect: ex.Expect
    feature: bool = False
    """An optional feature: a clean 4xx OpenAI error means "unsupported", not a failure."""
    refused_quirk: str = "Q43"
    """The catalogue row of servers that answer this feature with a 5xx: Q43 (unsupported parameters
    answered 500) unless a row names the feature (a 500 for a prompt array is Q73, not an ignored n)."""
    hang_up_after: int | None = None
    """Close the connection after this many body bytes (the disconnect probe)."""
    then: Callable[[ProbeContext], RequestSpec] | None = None
    """A second request, judged instead of the first (the server must still serve after a hang-up)."""


def _chat(ctx: ProbeContext, content: str = "Say hello.", **extra: Any) -> RequestSpec:
    messages = [{"role": "user", "content": content}]
    return RequestSpec(CHAT, {"model": ctx.model, "messages": messages, "max_tokens": 8, **extra})


def _completion(ctx: ProbeContext, prompt: Any = "The capital of France is", **extra: Any) -> RequestSpec:
    return RequestSpec(COMPLETIONS, {"model": ctx.model, "prompt": prompt, "max_tokens": 8, **extra})


def _without(spec: RequestSpec, key: str) -> RequestSpec:
    return RequestSpec(spec.path, {k: v for k, v in spec.body.items() if k != key})


_USAGE: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
_COUNT = "1, 2, 3, 4, 5, 6,"
_ECHO = "Once upon a time"

PROBES: tuple[Probe, ...] = (
    Probe("chat", "chat completion", lambda c: _chat(c), ex.succeeds()),
    Probe("chat-stream", "chat completion, streamed", lambda c: _chat(c, stream=True), ex.succeeds()),
    Probe("completion", "text completion", lambda c: _completion(c), ex.succeeds()),
    Probe(
        "completion-stream", "text completion, streamed", lambda c: _completion(c, stream=True), ex.succeeds()
    ),
    Probe(
        "chat-stream-usage",
        "chat stream with stream_options.include_usage",
        lambda c: _chat(c, **_USAGE),
        ex.succeeds(ex.usage_chunk),
    ),
    Probe(
        "completion-stream-usage",
        "completion stream with stream_options.include_usage",
        lambda c: _completion(c, **_USAGE),
        ex.succeeds(ex.usage_chunk),
    ),
    Probe(
        "stop",
        "a stop sequence ends the text before it",
        lambda c: _completion(c, _COUNT, stop=[","]),
        ex.succeeds(ex.honours_stop(",")),
    ),
    Probe(
        "stop-stream",
        "a stop sequence in a stream",
        lambda c: _completion(c, _COUNT, stop=[","], stream=True),
        ex.succeeds(ex.honours_stop(",")),
    ),
    Probe(
        "n-2",
        "n=2 gives two choices",
        lambda c: _chat(c, n=2, max_tokens=4),
        ex.succeeds(ex.has_n_choices(2, "n-ignored", "Q71")),
        feature=True,
        refused_quirk="Q70",
    ),
    Probe(
        "logprobs",
        "legacy logprobs on a text completion",
        lambda c: _completion(c, logprobs=2, max_tokens=4),
        ex.succeeds(ex.has_logprobs(chat=False)),
        feature=True,
    ),
    Probe(
        "chat-logprobs",
        "logprobs and top_logprobs on a chat completion",
        lambda c: _chat(c, logprobs=True, top_logprobs=2, max_tokens=4),
        ex.succeeds(ex.has_logprobs(chat=True)),
        feature=True,
    ),
    Probe(
        "chat-logprobs-no-top",
        "logprobs: true without top_logprobs on a chat completion",
        lambda c: _chat(c, logprobs=True, max_tokens=4),
        ex.succeeds(ex.has_chat_logprobs_without_alternatives),
        feature=True,
    ),
    Probe(
        "echo",
        "echo returns the prompt before the completion",
        lambda c: _completion(c, _ECHO, echo=True, max_tokens=4),
        ex.succeeds(ex.echoes_prompt(_ECHO)),
        feature=True,
        refused_quirk="Q72",
    ),
    Probe(
        "prompt-array",
        "two prompts give two choices",
        lambda c: _completion(c, ["The sky is", "Grass is"], max_tokens=4),
        ex.succeeds(ex.has_n_choices(2, "prompt-array-ignored", "Q73")),
        feature=True,
        refused_quirk="Q73",
    ),
    Probe(
        "token-prompt",
        "a prompt given as token ids",
        lambda c: _completion(c, [100, 200, 300, 400], max_tokens=4),
        ex.succeeds(),
        feature=True,
        refused_quirk="Q74",
    ),
    Probe(
        "max-tokens-length",
        "max_tokens reached gives finish_reason length",
        # A completion, not a chat: a small model under a fallback chat template may stop at once.
        lambda c: _completion(c, _COUNT, max_tokens=2),
        ex.succeeds(ex.finishes_with_length),
    ),
    Probe(
        "max-tokens-length-stream",
        "max_tokens reached in a stream gives finish_reason length",
        lambda c: _completion(c, _COUNT, max_tokens=2, stream=True),
        ex.succeeds(ex.finishes_with_length),
    ),
    Probe(
        "max-completion-tokens",
        "max_completion_tokens reached gives finish_reason length",
        lambda c: _without(_chat(c, "Count from 1 to 20.", max_completion_tokens=3), "max_tokens"),
        ex.succeeds(ex.stops_at_completion_limit(3)),
    ),
    Probe(
        "max-tokens-zero-echo",
        "max_tokens: 0 with echo returns the prompt alone (scoring a prompt)",
        # The stops bound the run on a server that reads 0 as "no limit" (llama-cpp-python): it ends at
        # the first sentence instead of filling its context. They cannot cut the echoed prompt, which
        # holds neither.
        lambda c: _completion(c, _ECHO, echo=True, max_tokens=0, stop=[".", "\n"]),
        ex.succeeds(ex.echoes_prompt_alone(_ECHO)),
        feature=True,
        refused_quirk="Q72",
    ),
    Probe(
        "unknown-model",
        "a model the server does not have",
        lambda c: _chat(ProbeContext(UNKNOWN_MODEL), max_tokens=2),
        ex.unknown_model_rejected,
    ),
    Probe(
        "invalid-type",
        "max_tokens of the wrong type",
        lambda c: _completion(c, max_tokens="eight"),
        ex.rejected(),
    ),
    Probe(
        "invalid-range",
        "temperature out of range (0 to 2)",
        lambda c: _chat(c, temperature=7, max_tokens=2),
        ex.rejected(),
    ),
    Probe(
        "missing-prompt",
        "a completion without prompt",
        lambda c: _without(_completion(c, max_tokens=2), "prompt"),
        ex.rejected(),
    ),
    Probe(
        "missing-messages",
        "a chat completion without messages",
        lambda c: _without(_chat(c, max_tokens=2), "messages"),
        ex.rejected(),
    ),
    Probe(
        "malformed-json",
        "a body that is not JSON",
        lambda c: RequestSpec(CHAT, raw=b'{"model": "x", "messages": [{"role": "user"'),
        ex.rejected(),
    ),
    Probe(
        "context-overflow",
        "a prompt longer than the context",
        lambda c: _completion(c, "hello " * c.overflow_words, max_tokens=2),
        ex.overflow_rejected,
    ),
    Probe(
        "context-overflow-stream",
        "a prompt longer than the context, streamed",
        lambda c: _completion(c, "hello " * c.overflow_words, max_tokens=2, stream=True),
        ex.overflow_rejected,
    ),
    Probe(
        "disconnect",
        "a client hangs up mid-stream; the next request is still served",
        lambda c: _chat(c, "Write a long story.", max_tokens=64, stream=True),
        ex.succeeds(),
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
