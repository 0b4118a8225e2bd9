"""Each rule's severity, listed, so that changing one is a deliberate edit of this table (issue 33).

The policy (docs/validate.md, "Severity"): an error is what makes a strict client (openai-python,
openai-node, the AI SDK, Codex, Claude Code) fail or silently get a wrong result; a warning is what
works but differs from the reference. The table is read from the source itself: every
``ctx.error("rule", ...)`` and ``ctx.warn("rule", ...)`` call, so a rule added, removed or moved to the
other severity fails this test until the table says so.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ERROR, WARNING = "error", "warning"
BOTH = "error or warning"

SEVERITIES = {
    "body-blank-lines": WARNING,
    "body-empty": ERROR,
    "body-not-object": ERROR,
    "choice-after-finish": ERROR,
    "choice-count": ERROR,
    "choice-index-gap": ERROR,
    "choice-index-range": ERROR,
    "chunk-not-object": ERROR,
    "content-null-then-text": WARNING,
    "content-type": ERROR,
    "context-overflow-code": ERROR,
    "context-overflow-in-stream": ERROR,
    "context-overflow-status": ERROR,
    "created-changed": WARNING,
    "data-after-done": ERROR,
    "data-not-json": ERROR,
    "delta-empty": WARNING,
    "delta-null-field": WARNING,
    "done-missing": ERROR,
    "done-unterminated": WARNING,
    "echo-ignored": ERROR,
    "error-body-shape": BOTH,
    "error-event-shape": WARNING,
    "error-in-stream": ERROR,
    "error-leaks-path": ERROR,
    "error-leaks-traceback": ERROR,
    "error-message-empty": ERROR,
    "error-status": ERROR,
    "error-with-200": ERROR,
    "expected-success": ERROR,
    "feature-server-error": ERROR,
    "feature-unsupported": WARNING,
    "finish-length-expected": ERROR,
    "finish-on-content": WARNING,
    "finish-reason-missing": ERROR,
    "finish-reason-repeated": ERROR,
    "finish-reason-value": ERROR,
    "finish-stop-at-limit": ERROR,
    "finish-tool-calls-without-calls": ERROR,
    "http-status": ERROR,
    "http-status-nonstandard": WARNING,
    "id-prefix": WARNING,
    "intent-unknown": WARNING,
    "invalid-request-accepted": BOTH,
    "invalid-request-status": ERROR,
    "json-object-invalid": ERROR,
    "json-schema-invalid": ERROR,
    "json-too-deep": ERROR,
    "logprob-sentinel": WARNING,
    "logprobs-lengths": ERROR,
    "logprobs-missing": ERROR,
    "logprobs-shape": ERROR,
    "logprobs-tokens-past-end": ERROR,
    "logprobs-top-count": ERROR,
    "max-tokens-zero-generated": ERROR,
    "messages-block-index": ERROR,
    "messages-block-not-stopped": ERROR,
    "messages-block-overlap": WARNING,
    "messages-block-unknown": ERROR,
    "messages-calls-not-tool-use": ERROR,
    "messages-count-tokens": ERROR,
    "messages-delta-missing": ERROR,
    "messages-delta-type": ERROR,
    "messages-done-sentinel": WARNING,
    "messages-error-type": WARNING,
    "messages-event-after-end": ERROR,
    "messages-event-line": ERROR,
    "messages-event-line-missing": ERROR,
    "messages-id-empty": ERROR,
    "messages-id-prefix": WARNING,
    "messages-limit-end-turn": ERROR,
    "messages-max-tokens-expected": ERROR,
    "messages-overflow-words": ERROR,
    "messages-start-content": ERROR,
    "messages-start-first": ERROR,
    "messages-start-input-tokens": WARNING,
    "messages-start-twice": ERROR,
    "messages-stop-missing": ERROR,
    "messages-stop-sequence": ERROR,
    "messages-stop-sequence-reason": ERROR,
    "messages-tool-use-id": ERROR,
    "messages-tool-use-without-calls": ERROR,
    "messages-usage-over-limit": ERROR,
    "model-is-local-path": WARNING,
    "no-response": ERROR,
    "object-value": ERROR,
    "parallel-calls-fewer": WARNING,
    "parallel-tool-calls-off": ERROR,
    "prompt-truncated": ERROR,
    "reasoning-field-name": WARNING,
    "reasoning-not-shown": WARNING,
    "required-key": BOTH,
    "responses-call-id-empty": ERROR,
    "responses-content-index": ERROR,
    "responses-created-first": ERROR,
    "responses-done-sentinel": WARNING,
    "responses-done-text": ERROR,
    "responses-event-line": WARNING,
    "responses-failed-error": ERROR,
    "responses-function-arguments": ERROR,
    "responses-function-unknown": ERROR,
    "responses-id-changed": ERROR,
    "responses-id-empty": ERROR,
    "responses-id-prefix": WARNING,
    "responses-incomplete-expected": ERROR,
    "responses-incomplete-reason": ERROR,
    "responses-index-unknown": ERROR,
    "responses-item-after-done": ERROR,
    "responses-item-done-mismatch": ERROR,
    "responses-item-done-twice": ERROR,
    "responses-item-id-empty": ERROR,
    "responses-item-id-mismatch": ERROR,
    "responses-item-id-prefix": WARNING,
    "responses-item-not-done": ERROR,
    "responses-limit-completed": ERROR,
    "responses-logprobs-missing": ERROR,
    "responses-output-index": ERROR,
    "responses-output-mismatch": ERROR,
    "responses-output-schema": ERROR,
    "responses-sequence-number": ERROR,
    "responses-status-details": ERROR,
    "responses-status-early": ERROR,
    "responses-terminal-missing": ERROR,
    "responses-terminal-status": ERROR,
    "responses-usage-arithmetic": ERROR,
    "responses-usage-missing": ERROR,
    "responses-usage-over-limit": ERROR,
    "role-late": WARNING,
    "role-missing": WARNING,
    "role-repeated": ERROR,
    "schema": ERROR,
    "sse-bom": ERROR,
    "sse-not-utf8": ERROR,
    "sse-comment": WARNING,
    "sse-cut-off": ERROR,
    "sse-empty-data": ERROR,
    "sse-empty-event": ERROR,
    "sse-error-field": ERROR,
    "sse-event-field": ERROR,
    "sse-id-field": WARNING,
    "sse-line-too-long": ERROR,
    "sse-retry-field": WARNING,
    "sse-unknown-field": ERROR,
    "stop-ignored": ERROR,
    "stream-empty": ERROR,
    "stream-not-sse": ERROR,
    "template-token-in-content": WARNING,
    "text-lost": ERROR,
    "text-offset-past-end": ERROR,
    "tool-arguments-json": ERROR,
    "tool-arguments-schema": ERROR,
    "tool-call-blank-repeat": WARNING,
    "tool-call-id-duplicate": ERROR,
    "tool-call-id-missing": ERROR,
    "tool-call-id-repeated": ERROR,
    "tool-call-in-content": ERROR,
    "tool-call-index-gap": ERROR,
    "tool-call-name-missing": ERROR,
    "tool-call-name-repeated": ERROR,
    "tool-call-type-missing": ERROR,
    "tool-call-unknown": ERROR,
    "tool-calls-empty": WARNING,
    "tool-calls-finish-reason": WARNING,
    "tool-choice-allowed-ignored": ERROR,
    "tool-choice-named-ignored": ERROR,
    "tool-choice-none-called": ERROR,
    "tool-choice-required-ignored": ERROR,
    "tool-markup-in-content": WARNING,
    "unknown-field": WARNING,
    "unknown-model-accepted": WARNING,
    "usage-arithmetic": ERROR,
    "usage-below-length": WARNING,
    "usage-in-choice-chunk": ERROR,
    "usage-missing": ERROR,
    "usage-not-last": ERROR,
    "usage-over-max-tokens": ERROR,
    "usage-prompt-array": ERROR,
    "usage-repeated": ERROR,
    "usage-unrequested": ERROR,
}
"""Rule id -> severity. ``BOTH``: a warning in the one case the policy names (``required-key`` for
``refusal`` and ``choices[].logprobs``, which clients read as null; ``invalid-request-accepted`` for
``max_output_tokens`` below OpenAI's floor of 16; ``error-body-shape`` for an error object's ``type``,
``param`` or ``code`` missing, ``param`` of another type or a numeric ``code``, which every strict client
reads loosely), an error otherwise."""

# Rule ids the source builds rather than writes out, with their severities, and the call sites that
# build them (file, the id's expression).
NAMED_BY_EXPRESSION = {
    "id-empty": ERROR,
    "model-empty": ERROR,
    "id-changed": ERROR,
    "model-changed": ERROR,
    "responses-terminal-last": ERROR,
    "responses-terminal-once": ERROR,
    "open-responses-response-field": ERROR,
    "open-responses-tool-field": ERROR,
    "body-not-json": ERROR,
}
BUILT_AT = {
    ("conformance/judge.py", "rule"),
    ("conformance/protocols/responses/open_responses.py", "f'open-responses-{what}-field'"),
    (
        "conformance/protocols/responses/stream_rules.py",
        "'responses-terminal-last' if not again else 'responses-terminal-once'",
    ),
    ("conformance/rules/identity.py", "f'{key}-empty'"),
    ("conformance/rules/identity.py", "f'{key}-changed'"),
}


def _calls() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """Every ``ctx.error``/``ctx.warn`` call under conformance/: the literal rule ids by severity, and
    where an id is an expression."""
    found: dict[str, set[str]] = {}
    built: set[tuple[str, str]] = set()
    for path in sorted((ROOT / "conformance").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("error", "warn")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "ctx"
                and node.args
            ):
                continue
            rule = node.args[0]
            if isinstance(rule, ast.Constant) and isinstance(rule.value, str):
                severity = ERROR if node.func.attr == "error" else WARNING
                found.setdefault(rule.value, set()).add(severity)
            else:
                built.add((str(path.relative_to(ROOT)), ast.unparse(rule)))
    return found, built


def test_every_rule_has_the_severity_the_table_gives() -> None:
    found, built = _calls()
    actual = {rule: BOTH if len(s) == 2 else next(iter(s)) for rule, s in found.items()}
    assert actual == SEVERITIES
    assert built == BUILT_AT


def test_the_policy_cases_named_in_the_issue() -> None:
    # An answer cut at its limit and reported complete: the client acts on half an answer.
    assert SEVERITIES["finish-stop-at-limit"] == ERROR
    # A path as `model`, a new `created` per chunk: no client fails on either.
    assert SEVERITIES["model-is-local-path"] == WARNING
    assert SEVERITIES["created-changed"] == WARNING
    assert SEVERITIES["required-key"] == BOTH
    assert SEVERITIES["invalid-request-accepted"] == BOTH


def test_every_rule_is_documented_with_the_policy() -> None:
    documented = (ROOT / "docs" / "validate.md").read_text()
    assert "## Severity" in documented
    missing = sorted(r for r in {*SEVERITIES, *NAMED_BY_EXPRESSION} if f"`{r}`" not in documented)
    assert missing == []


def test_every_harm_named_is_of_an_error_rule() -> None:
    # Servers are ranked by what their errors break (conformance/harms.py); a warning weighs nothing,
    # so a harm named for a rule that is not an error, or for no rule at all, would be a typo.
    from conformance.harms import LEAK, WRONG_RESULT

    assert {rule for rule in WRONG_RESULT | LEAK if SEVERITIES.get(rule) not in (ERROR, BOTH)} == set()
