"""The Responses probes of ``check`` against fake servers (httpx's mock transport): what each sends, that
OpenAI-shaped answers pass, that a server without ``/v1/responses`` is unsupported, and that the deviations
the probes are about fail them. No model, no socket."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from conformance.live.probes import PROBES
from conformance.live.runner import ProbeResult, run_probe
from conformance.probe import ProbeContext
from conformance.protocols.responses.probes import PATH as RESPONSES
from conformance.rules.context import OPEN_RESPONSES_PROFILE, OPENAI_PROFILE
from conformance.schemas import request_validator
from tests.conformance.test_responses_rules import (
    call_events,
    encode,
    events_for,
    function_call,
    message,
    response,
    text_events,
)

Answer = Callable[[dict[str, Any]], tuple[int, bytes, str]]
RESPONSES_PROBES = [p for p in PROBES if p.name.startswith("responses")]


class _Body(httpx.SyncByteStream):
    def __init__(self, data: bytes) -> None:
        self._data = data

    def __iter__(self) -> Iterator[bytes]:
        yield self._data


def run(name: str, answer: Answer, profile: str = OPENAI_PROFILE) -> tuple[ProbeResult, dict[str, Any]]:
    """The probe ``name`` against a server that answers ``answer``, judged by OpenAI's own Responses
    (these answers are OpenAI's) unless ``profile`` says otherwise."""
    sent: dict[str, Any] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        sent.update(path=request.url.path, body=json.loads(request.content))
        status, body, kind = answer(sent["body"])
        return httpx.Response(status, headers={"content-type": kind}, stream=_Body(body))

    probe = next(p for p in PROBES if p.name == name)
    with httpx.Client(base_url="http://fake", transport=httpx.MockTransport(handler)) as client:
        return run_probe(client, probe, ProbeContext("m", profile=profile)), sent


def openai_like(body: dict[str, Any]) -> tuple[int, bytes, str]:
    """What OpenAI answers each Responses probe: an error for an invalid request, else what was asked."""
    if not isinstance(body.get("max_output_tokens"), int):
        error = {"message": "Invalid type for 'max_output_tokens'", "type": "invalid_request_error"}
        return (
            400,
            json.dumps({"error": {**error, "param": "max_output_tokens", "code": "invalid_type"}}).encode(),
            "application/json",
        )
    usage = {**response()["usage"], "output_tokens": 16, "total_tokens": 21}
    if body.get("tool_choice"):
        final = response(output=[function_call('{"city": "Paris"}')])
        events = events_for(call_events(['{"city": ', '"Paris"}']), final)
    elif "Continue" in str(body.get("input")):
        item = message("7, 8, 9", "incomplete")
        final = response(
            "incomplete", output=[item], incomplete_details={"reason": "max_output_tokens"}, usage=usage
        )
        events = events_for(text_events(["7, 8", ", 9"]), final, "response.incomplete")
        events[-2]["item"] = item
    elif "text" in body:
        final = response(output=[message('{"answer": "red"}')])
        events = events_for(text_events(['{"answer": ', '"red"}']), final)
    else:
        final = response(output=[message("Hello")])
        events = events_for(text_events(["Hel", "lo"]), final)
    if "message.output_text.logprobs" in body.get("include", ()):
        tokens = [
            {"token": t, "logprob": -0.5, "bytes": list(t.encode()), "top_logprobs": []}
            for t in ("Hel", "lo")
        ]
        final["output"][0]["content"][0]["logprobs"] = tokens
    if body.get("stream"):
        return 200, encode(events), "text/event-stream"
    return 200, json.dumps(final).encode(), "application/json"


def test_the_battery_has_every_responses_probe() -> None:
    names = {p.name for p in RESPONSES_PROBES}
    assert names == {
        "responses",
        "responses-stream",
        "responses-tool-call",
        "responses-tool-result",
        "responses-json-schema",
        "responses-max-output-tokens",
        "responses-logprobs",
        "responses-image-input",
        "responses-file-input",
        "responses-invalid",
    }


@pytest.mark.parametrize("name", [p.name for p in RESPONSES_PROBES])
def test_openai_like_answers_pass(name: str) -> None:
    result, sent = run(name, openai_like)
    assert sent["path"] == RESPONSES
    assert (result.outcome, result.verdict.findings) == ("pass", [])


@pytest.mark.parametrize("name", [p.name for p in RESPONSES_PROBES if p.name != "responses-invalid"])
def test_each_valid_probe_request_is_one_openai_accepts(name: str) -> None:
    _, sent = run(name, openai_like)
    assert list(request_validator("response_request").iter_errors(sent["body"])) == []


@pytest.mark.parametrize("name", [p.name for p in RESPONSES_PROBES])
def test_a_server_without_the_route_is_unsupported(name: str) -> None:
    result, _ = run(name, lambda body: (404, b'{"detail":"Not Found"}', "application/json"))
    assert result.outcome == "unsupported"
    assert [f.rule for f in result.verdict.findings] == ["feature-unsupported"]


def test_the_tool_result_probe_sends_the_call_and_its_output() -> None:
    _, sent = run("responses-tool-result", openai_like)
    kinds = [item.get("type", "message") for item in sent["body"]["input"]]
    assert kinds == ["message", "function_call", "function_call_output"]
    assert sent["body"]["input"][1]["call_id"] == sent["body"]["input"][2]["call_id"]


def test_completed_at_the_limit_fails_the_max_output_tokens_probe() -> None:
    def completed(body: dict[str, Any]) -> tuple[int, bytes, str]:
        usage = {**response()["usage"], "output_tokens": 16, "total_tokens": 21}
        events = events_for(text_events(["7, 8", ", 9"]), response(output=[message("7, 8, 9")], usage=usage))
        return 200, encode(events), "text/event-stream"

    result, _ = run("responses-max-output-tokens", completed)
    # One fact, said once: usage shows the limit reached under 'completed' (issue 33).
    assert {f.rule for f in result.verdict.errors} == {"responses-limit-completed"}


def test_arguments_outside_the_tool_schema_fail_the_tool_call_probe() -> None:
    def wrong(body: dict[str, Any]) -> tuple[int, bytes, str]:
        events = events_for(
            call_events(['{"town": "Paris"}']), response(output=[function_call('{"town": "Paris"}')])
        )
        return 200, encode(events), "text/event-stream"

    result, _ = run("responses-tool-call", wrong)
    assert {f.rule for f in result.verdict.errors} == {"responses-function-arguments"}


def test_text_without_the_logprobs_asked_fails_the_logprobs_probe() -> None:
    result, sent = run(
        "responses-logprobs",
        lambda body: (200, json.dumps(response(output=[message("Hi")])).encode(), "application/json"),
    )
    assert (sent["body"]["include"], sent["body"]["top_logprobs"]) == (["message.output_text.logprobs"], 2)
    assert {f.rule for f in result.verdict.errors} == {"responses-logprobs-missing"}


def test_an_invalid_request_served_fails() -> None:
    result, _ = run(
        "responses-invalid",
        lambda body: (200, json.dumps(response(output=[message("Hi")])).encode(), "application/json"),
    )
    assert {f.rule for f in result.verdict.errors} == {"invalid-request-accepted"}


@pytest.mark.parametrize("name", ["responses-image-input", "responses-file-input"])
def test_an_attachment_a_text_only_model_declines_is_unsupported_and_a_500_fails(name: str) -> None:
    """The Open Responses suite's image and file tests: a model that reads text only may decline them
    with a 400; llama-server b11434 answered the image with a 500 (issue 38)."""
    declined = json.dumps(
        {"error": {"message": "no images", "type": "invalid_request_error", "param": "input", "code": None}}
    ).encode()
    result, sent = run(name, lambda body: (400, declined, "application/json"))
    assert sent["body"]["input"][0]["content"][1]["type"] in ("input_image", "input_file")
    assert (result.outcome, [f.rule for f in result.verdict.findings]) == (
        "unsupported",
        ["feature-unsupported"],
    )
    failed = json.dumps(
        {
            "error": {
                "message": "image input is not supported",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        }
    ).encode()
    result, _ = run(name, lambda body: (500, failed, "application/json"))
    assert "feature-server-error" in {f.rule for f in result.verdict.errors}


_OPEN_RESPONSES_FIELDS = json.dumps(
    {
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "completed_at": None,
        "truncation": "disabled",
        "reasoning": None,
        "max_tool_calls": None,
        "store": True,
        "background": False,
        "service_tier": "default",
        "safety_identifier": None,
        "prompt_cache_key": None,
    }
)[1:-1].encode()
"""What Open Responses adds to OpenAI's answers here (each Response snapshot gets them)."""


@pytest.mark.parametrize("name", ["responses", "responses-stream"])
def test_check_holds_a_server_to_the_open_responses_response_by_default(name: str) -> None:
    """OpenAI's own answers lack the penalties Open Responses requires: ``check`` (whose default profile
    is open-responses) reports what the compliance suite reports; with both filled in, they pass."""
    assert ProbeContext("m").profile == OPEN_RESPONSES_PROFILE
    result, _ = run(name, openai_like, OPEN_RESPONSES_PROFILE)
    assert {f.rule for f in result.verdict.errors} == {"open-responses-response-field"}
    assert all("missing" in f.message for f in result.verdict.errors)

    def open_responses_like(body: dict[str, Any]) -> tuple[int, bytes, str]:
        status, answer, kind = openai_like(body)
        return status, answer.replace(b'"top_p": 1.0', b'"top_p": 1.0, ' + _OPEN_RESPONSES_FIELDS), kind

    result, _ = run(name, open_responses_like, OPEN_RESPONSES_PROFILE)
    assert (result.outcome, result.verdict.findings) == ("pass", [])
