"""What an error rule's deviation does to a client, so that servers are ranked by what they break (issue 33).

Every error makes a strict client fail or get a wrong result (docs/validate.md, "Severity"); they do not
hurt alike. A client that raises tells its user something went wrong; a wrong result that looks right
(an answer cut at the limit reported whole, text lost, a forced tool call answered with prose, an
invalid request served as if valid) goes on into the user's program unnoticed, and a stack trace or a
local path in an error shows strangers the server's insides. Counting distinct rules alone ranked
llama-cpp-python's server (500s with a traceback, `n` ignored, an empty 200 on overflow) level with
servers whose errors were missing keys.

Each error rule's harm and its weight; a rule not named in :data:`WRONG_RESULT` or :data:`LEAK` makes
the client fail. Warnings weigh nothing: the client works.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "EXPOSES",
    "FAILS",
    "HARM_WEIGHTS",
    "LEAK",
    "WRONG",
    "WRONG_RESULT",
    "answer_harm",
    "harm_of",
    "rule_weight",
    "weight",
]

WRONG_RESULT = frozenset(
    {
        # an answer that looks whole and is not: cut, emptied, or its text lost
        "text-lost",
        "finish-stop-at-limit",
        "finish-length-expected",
        "stream-empty",
        "sse-error-field",
        "error-in-stream",
        "context-overflow-in-stream",
        "prompt-truncated",
        "responses-limit-completed",
        "responses-incomplete-expected",
        "messages-limit-end-turn",
        "messages-max-tokens-expected",
        # what was asked for, silently not done
        "stop-ignored",
        "echo-ignored",
        "choice-count",
        "logprobs-missing",
        "responses-logprobs-missing",
        "max-tokens-zero-generated",
        "invalid-request-accepted",
        "json-object-invalid",
        "json-schema-invalid",
        "responses-output-schema",
        "tool-choice-required-ignored",
        "tool-choice-named-ignored",
        "tool-choice-allowed-ignored",
        "tool-choice-none-called",
        "parallel-tool-calls-off",
        "tool-call-in-content",
        "tool-arguments-schema",
        # counts a client bills or budgets by, wrong
        "usage-over-max-tokens",
        "usage-arithmetic",
        "usage-prompt-array",
        "responses-usage-over-limit",
        "responses-usage-arithmetic",
        "messages-usage-over-limit",
    }
)
"""Rules whose deviation gives the client a wrong result that looks right."""

LEAK = frozenset({"error-leaks-path", "error-leaks-traceback"})
"""Rules whose deviation shows the server's insides to whoever sent the request."""

WRONG, EXPOSES, FAILS = "wrong result", "exposes internals", "client fails"
HARM_WEIGHTS = {WRONG: 3, EXPOSES: 3, FAILS: 2}
"""A wrong result or a leak weighs more than a failure the client reports: nobody notices it."""


def harm_of(rule: str) -> str:
    """What the error rule ``rule`` breaks: one of :data:`HARM_WEIGHTS`."""
    if rule in WRONG_RESULT:
        return WRONG
    if rule in LEAK:
        return EXPOSES
    return FAILS


def rule_weight(rule: str) -> int:
    """The weight of the error rule ``rule``: what its harm weighs."""
    return HARM_WEIGHTS[harm_of(rule)]


def weight(error_rules: Iterable[str]) -> int:
    """The weight of a set of distinct error rules: what a server's errors break, added up."""
    return sum(rule_weight(rule) for rule in set(error_rules))


def answer_harm(error_rules: Iterable[str]) -> int:
    """What one answer does to the client that gets it: the weight of its heaviest error, 0 for none."""
    return max((rule_weight(rule) for rule in error_rules), default=0)
