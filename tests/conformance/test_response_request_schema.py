"""What real clients send on ``/v1/responses`` is valid to the judge's request schema, which the proxy and
the bundled backend now apply before translating: a schema stricter than the clients is a 400 for
every such request."""

from __future__ import annotations

from conformance.schemas import request_validator

# Codex CLI clears a reasoning item's content before sending it back, and serializes the empty field
# as null (codex-rs client_common.rs): every request after a turn with reasoning carries one.
CODEX_REASONING = {
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Looking at the files."}],
    "content": None,
    "encrypted_content": None,
}


def _errors(body: dict[str, object]) -> list[str]:
    return [e.message for e in request_validator("response_request").iter_errors(body)]


def test_codex_reasoning_item_with_null_content_is_valid() -> None:
    assert _errors({"model": "m", "input": [{"role": "user", "content": "hi"}, CODEX_REASONING]}) == []


def test_a_message_with_null_content_is_not() -> None:
    assert _errors({"model": "m", "input": [{"role": "user", "content": None}]}) != []
