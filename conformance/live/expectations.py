"""What each probe expects of the response, beyond what the judge checks for every response.

Each expectation is a small function from a :class:`Recording` to findings; rule ids are stable and cite
the quirk catalogue (``Q28``) or ``spec``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from conformance.findings import ERROR, WARNING, Finding
from conformance.live.payloads import choices, error_object, is_openai_error, objects, streamed
from conformance.live.recorder import Recording

__all__ = [
    "Expect",
    "echoes_prompt",
    "echoes_prompt_alone",
    "finishes_with_length",
    "has_chat_logprobs_without_alternatives",
    "has_logprobs",
    "has_n_choices",
    "honours_stop",
    "overflow_rejected",
    "rejected",
    "stops_at_completion_limit",
    "succeeds",
    "unknown_model_rejected",
    "usage_chunk",
]

Expect = Callable[[Recording], list[Finding]]


def _error(rule: str, message: str, quirk: str | None) -> Finding:
    return Finding(rule, ERROR, message, quirk=quirk)


def _status_text(recording: Recording) -> str:
    kind = "stream" if streamed(recording) else recording.headers.get("content-type", "no content type")
    return f"HTTP {recording.status} ({kind}, {len(recording.body)} bytes)"


def succeeds(*checks: Expect) -> Expect:
    """A valid request: HTTP 200, then the probe's own checks."""

    def expect(recording: Recording) -> list[Finding]:
        if recording.status != 200:
            return [_error("expected-success", f"a valid request got {_status_text(recording)}", "spec")]
        return [finding for check in checks for finding in check(recording)]

    return expect


def rejected(quirk: str = "Q43") -> Expect:
    """An invalid request: a 4xx status with an OpenAI error body; never a 5xx, never a 200."""

    def expect(recording: Recording) -> list[Finding]:
        status = recording.status or 0
        if 400 <= status < 500:
            if is_openai_error(recording):
                return []
            return [
                _error("error-body-shape", f"{_status_text(recording)} is not an OpenAI error body", "spec")
            ]
        return [
            _error(
                "invalid-request-status",
                f"an invalid request got {_status_text(recording)}; OpenAI answers 400 with an error object",
                quirk,
            )
        ]

    return expect


def overflow_rejected(recording: Recording) -> list[Finding]:
    """A prompt longer than the context: 400 ``context_length_exceeded`` before any stream starts."""
    if recording.status == 200 and streamed(recording):
        shown = "an empty" if not recording.body.strip() else "a"
        return [
            _error(
                "context-overflow-in-stream",
                f"context overflow answered with {shown} HTTP 200 stream ({len(recording.body)} bytes) "
                "instead of HTTP 400 context_length_exceeded",
                "Q52" if not recording.body.strip() else "Q42",
            )
        ]
    if recording.status != 400:
        return [
            _error(
                "context-overflow-status",
                f"context overflow got {_status_text(recording)} instead of HTTP 400",
                "Q43",
            )
        ]
    error = error_object(recording) or {}
    if error.get("code") != "context_length_exceeded":
        return [
            _error(
                "context-overflow-code",
                f"context overflow error has code {error.get('code')!r}, not 'context_length_exceeded'",
                "Q43",
            )
        ]
    return []


def unknown_model_rejected(recording: Recording) -> list[Finding]:
    """OpenAI answers 404 ``model_not_found``; a one-model server that ignores the name only warns."""
    if recording.status == 200:
        return [
            Finding(
                "unknown-model-accepted", WARNING, "a request for an unknown model was served", quirk="spec"
            )
        ]
    return rejected()(recording)


def _indices(listed: Iterable[dict[str, Any]]) -> set[int]:
    return {c["index"] for c in listed if isinstance(c.get("index"), int)}


def has_n_choices(count: int, rule: str, quirk: str) -> Expect:
    def expect(recording: Recording) -> list[Finding]:
        got = _indices(choices(recording))
        if got == set(range(count)):
            return []
        return [_error(rule, f"asked for {count} choices, got indices {sorted(got)}", quirk)]

    return expect


def usage_chunk(recording: Recording) -> list[Finding]:
    usage = [o for o in objects(recording) if o.get("choices") == [] and isinstance(o.get("usage"), dict)]
    if len(usage) == 1:
        return []
    return [
        _error(
            "stream-usage-missing" if not usage else "stream-usage-repeated",
            f"stream_options.include_usage asked for one usage chunk with choices: []; got {len(usage)}",
            "Q28",
        )
    ]


def _texts(recording: Recording) -> str:
    parts: list[str] = []
    for choice in choices(recording):
        for holder in (choice, choice.get("delta"), choice.get("message")):
            if isinstance(holder, dict):
                value = holder.get("text", holder.get("content"))
                if isinstance(value, str):
                    parts.append(value)
    return "".join(parts)


def honours_stop(stop: str) -> Expect:
    def expect(recording: Recording) -> list[Finding]:
        if stop in _texts(recording):
            return [_error("stop-not-honoured", f"the output contains the stop sequence {stop!r}", "Q76")]
        return []

    return expect


def finishes_with_length(recording: Recording) -> list[Finding]:
    reasons = {c.get("finish_reason") for c in choices(recording)} - {None}
    if "length" in reasons:
        return []
    return [
        _error(
            "finish-length-expected",
            f"max_tokens was reached but finish_reason is {sorted(map(str, reasons))}, not 'length'",
            "spec",
        )
    ]


def _completion_tokens(recording: Recording) -> int | None:
    counts = [
        o["usage"].get("completion_tokens") for o in objects(recording) if isinstance(o.get("usage"), dict)
    ]
    return next((c for c in reversed(counts) if isinstance(c, int) and not isinstance(c, bool)), None)


def stops_at_completion_limit(limit: int) -> Expect:
    """``finish_reason: "length"`` at ``max_completion_tokens``, unless usage shows the model stopped on
    its own before the limit (a small model under a fallback chat template may say nothing at all).
    Usage over the limit is the judge's ``usage-over-max-tokens``."""

    def expect(recording: Recording) -> list[Finding]:
        reasons = {c.get("finish_reason") for c in choices(recording)} - {None}
        used = _completion_tokens(recording)
        if "length" in reasons or (reasons == {"stop"} and used is not None and used < limit):
            return []
        return [
            _error(
                "finish-length-expected",
                f"max_completion_tokens {limit} was reached ({used} completion tokens) but finish_reason is "
                f"{sorted(map(str, reasons))}, not 'length'",
                "spec",
            )
        ]

    return expect


def has_logprobs(chat: bool) -> Expect:
    def expect(recording: Recording) -> list[Finding]:
        first = next(iter(choices(recording)), {})
        logprobs = first.get("logprobs")
        ok = isinstance(logprobs, dict) and isinstance(logprobs.get("content" if chat else "tokens"), list)
        if ok:
            return []
        return [_error("logprobs-missing", f"logprobs were asked for; got {str(logprobs)[:80]}", "Q69")]

    return expect


def has_chat_logprobs_without_alternatives(recording: Recording) -> list[Finding]:
    """``logprobs: true`` alone: logprobs for each token, with ``top_logprobs: []`` (none were asked for)."""
    found = has_logprobs(chat=True)(recording)
    if found:
        return found
    content = next(iter(choices(recording)), {})["logprobs"]["content"]
    for entry in content:
        top = entry.get("top_logprobs") if isinstance(entry, dict) else None
        if isinstance(top, list) and top:
            return [
                _error(
                    "logprobs-top-count",
                    f"top_logprobs was not asked for, but a token carries {len(top)} alternatives; "
                    "OpenAI sends top_logprobs: []",
                    "spec",
                )
            ]
    return []


def echoes_prompt(prompt: str) -> Expect:
    def expect(recording: Recording) -> list[Finding]:
        if _texts(recording).startswith(prompt):
            return []
        return [_error("echo-ignored", "echo: true, but the text does not start with the prompt", "Q72")]

    return expect


def echoes_prompt_alone(prompt: str) -> Expect:
    """``max_tokens: 0`` with echo (scoring a prompt): the prompt comes back and nothing is generated."""

    def expect(recording: Recording) -> list[Finding]:
        text = _texts(recording)
        if not text.startswith(prompt):
            return echoes_prompt(prompt)(recording)
        if text == prompt:
            return []
        return [
            _error(
                "max-tokens-zero-generated",
                f"max_tokens: 0, but {len(text) - len(prompt)} characters follow the echoed prompt: "
                f"{text[len(prompt) :][:40]!r}",
                "spec",
            )
        ]

    return expect
