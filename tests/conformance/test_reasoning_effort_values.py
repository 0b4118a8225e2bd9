"""The request schemas name OpenAI's reasoning efforts once each, the same on both routes (openapi.yaml
``ReasoningEffort``: none, minimal, low, medium, high, xhigh, max). The Responses schema lacked ``max``,
so the judge called a valid ``reasoning: {"effort": "max"}`` request invalid; the bundled backend reads
its values from the chat schema."""

from __future__ import annotations

from typing import Any

from conformance.schemas import load_schema, request_validator

SPEC_EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"]


def _enum(node: dict[str, Any]) -> list[str]:
    (values,) = [branch["enum"] for branch in node["anyOf"] if "enum" in branch]
    return list(values)


def test_both_routes_name_the_spec_efforts() -> None:
    chat = load_schema("chat_completion_request")["properties"]["reasoning_effort"]
    responses = load_schema("response_request")["properties"]["reasoning"]["anyOf"][0]["properties"]["effort"]
    assert _enum(chat) == _enum(responses) == SPEC_EFFORTS


def test_a_responses_request_with_the_max_effort_is_valid() -> None:
    body = {"model": "m", "input": "hi", "reasoning": {"effort": "max"}}
    assert list(request_validator("response_request").iter_errors(body)) == []
