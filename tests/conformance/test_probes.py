"""Probes against fake servers (httpx's mock transport): what each sends, and what it makes of answers that
keep to OpenAI's behaviour and of ones that do not. No model, no socket."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from conformance.live.probes import PROBES
from conformance.live.runner import ProbeResult, run_probe
from conformance.probe import Probe, ProbeContext

Answer = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]


class _Body(httpx.SyncByteStream):
    """A body still to be read: the recorder reads responses raw, as they come over the wire."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def __iter__(self) -> Iterator[bytes]:
        yield self._data


def probe(name: str) -> Probe:
    return next(p for p in PROBES if p.name == name)


def run(name: str, answer: Answer) -> tuple[ProbeResult, dict[str, Any]]:
    """Run one probe against a server that answers each request body with ``answer(body)``."""
    sent: dict[str, Any] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        sent.update(json.loads(request.content))
        status, body = answer(sent)
        headers = {"content-type": "application/json"}
        return httpx.Response(status, headers=headers, stream=_Body(json.dumps(body).encode()))

    with httpx.Client(base_url="http://fake", transport=httpx.MockTransport(handler)) as client:
        return run_probe(client, probe(name), ProbeContext("m")), sent


def errors(result: ProbeResult) -> set[tuple[str, str | None]]:
    return {(f.rule, f.quirk) for f in result.verdict.errors}


def usage(completion: int, prompt: int = 5) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat(content: str, finish: str, logprobs: Any = None, completion: int = 1) -> tuple[int, dict[str, Any]]:
    message = {"role": "assistant", "content": content, "refusal": None}
    choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
    return 200, {**body, "usage": usage(completion)}


def completion(text: str, finish: str, completion: int) -> tuple[int, dict[str, Any]]:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    body = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}
    return 200, {**body, "usage": usage(completion)}


def token(text: str, top: list[dict[str, Any]]) -> dict[str, Any]:
    return {"token": text, "logprob": -0.5, "bytes": list(text.encode()), "top_logprobs": top}


# --- chat-logprobs-no-top: logprobs: true alone ---


def test_logprobs_alone_asks_for_no_alternatives() -> None:
    logprobs = {"content": [token("Hi", []), token("!", [])], "refusal": None}
    result, sent = run("chat-logprobs-no-top", lambda body: chat("Hi!", "stop", logprobs, 2))
    assert sent["logprobs"] is True
    assert "top_logprobs" not in sent
    assert result.outcome == "pass", result.verdict.findings


def test_logprobs_alone_answered_without_logprobs_q69() -> None:
    # llama-cpp-python: logprobs only when top_logprobs is set as well.
    result, _ = run("chat-logprobs-no-top", lambda body: chat("", "stop", None, 0))
    assert errors(result) == {("logprobs-missing", "Q69")}


def test_logprobs_alone_answered_with_alternatives() -> None:
    alternatives = [{"token": "Hello", "logprob": -1.0, "bytes": [72, 101, 108, 108, 111]}]
    logprobs = {"content": [token("Hi", alternatives)], "refusal": None}
    result, _ = run("chat-logprobs-no-top", lambda body: chat("Hi", "stop", logprobs))
    assert errors(result) == {("logprobs-top-count", "spec")}


# --- max-completion-tokens ---


def test_max_completion_tokens_reached() -> None:
    result, sent = run("max-completion-tokens", lambda body: chat("1, 2", "length", completion=3))
    assert sent["max_completion_tokens"] == 3
    assert "max_tokens" not in sent
    assert result.outcome == "pass", result.verdict.findings


def test_max_completion_tokens_not_reached_because_the_model_stopped() -> None:
    # usage shows the model ended before the limit: nothing to hold against the server.
    result, _ = run("max-completion-tokens", lambda body: chat("", "stop", completion=0))
    assert result.outcome == "pass", result.verdict.findings


def test_max_completion_tokens_ignored() -> None:
    result, _ = run("max-completion-tokens", lambda body: chat("1, 2, 3, 4, 5", "stop", completion=9))
    assert errors(result) == {("finish-stop-at-limit", "spec"), ("usage-over-max-tokens", "spec")}
    result, _ = run("max-completion-tokens", lambda body: chat("1, 2, 3, 4", "length", completion=4))
    assert errors(result) == {("usage-over-max-tokens", "spec")}


# --- max-tokens-zero-echo: scoring a prompt ---


def test_max_tokens_zero_with_echo_returns_the_prompt_alone() -> None:
    result, sent = run("max-tokens-zero-echo", lambda body: completion(body["prompt"], "length", 0))
    assert (sent["max_tokens"], sent["echo"]) == (0, True)
    assert result.outcome == "pass", result.verdict.findings


def test_max_tokens_zero_read_as_no_limit() -> None:
    # llama-cpp-python generates until a stop (or its context) for max_tokens 0.
    result, _ = run(
        "max-tokens-zero-echo", lambda body: completion(body["prompt"] + ", there was", "stop", 3)
    )
    # Usage that truly counts the text generated past the limit is not a second deviation (issue 33).
    assert errors(result) == {("max-tokens-zero-generated", "spec")}


def test_max_tokens_zero_without_the_echo_q72() -> None:
    result, _ = run("max-tokens-zero-echo", lambda body: completion("", "length", 0))
    assert errors(result) == {("echo-ignored", "Q72")}


@pytest.mark.parametrize("name", ["chat-logprobs-no-top", "max-tokens-zero-echo"])
def test_optional_features_declined_cleanly(name: str) -> None:
    refusal = {
        "error": {"message": "not supported", "type": "invalid_request_error", "param": None, "code": None}
    }
    result, _ = run(name, lambda body: (400, refusal))
    assert result.outcome == "unsupported"
