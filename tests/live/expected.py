"""What a check of llama-cpp-python's server must find: its known deviations, by probe, rule and quirk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# (probe, rule id, quirk id)
LLAMA_CPP_PYTHON_DEVIATIONS = [
    ("chat-stream-usage", "usage-missing", "Q28"),  # no stream usage despite include_usage
    ("completion-stream-usage", "usage-missing", "Q28"),
    ("invalid-type", "invalid-request-status", "Q43"),  # HTTP 500 for an invalid parameter
    ("missing-prompt", "invalid-request-accepted", "spec"),  # HTTP 200 and text for no prompt at all
    ("invalid-range", "invalid-request-accepted", "spec"),  # temperature 7 served
    ("prompt-array", "feature-server-error", "Q73"),  # HTTP 500 for two prompts
    ("token-prompt", "feature-server-error", "Q74"),  # HTTP 500 for a token-id prompt
    ("malformed-json", "invalid-request-status", "Q43"),
    # An empty 200 stream on overflow: the judge's stream-empty, which the overflow intent leaves alone.
    ("context-overflow-stream", "stream-empty", "Q52"),
    ("invalid-type", "error-leaks-traceback", "spec"),  # the 500's message holds a Python frame
    ("invalid-type", "error-leaks-path", "spec"),  # and the site-packages path
    ("prompt-array", "error-message-empty", "spec"),  # a 500 with message ""
    ("chat-logprobs-no-top", "logprobs-missing", "Q69"),  # logprobs: null unless top_logprobs is set
    # max_tokens 0 read as "no limit"; its usage counts the text truly, not a second deviation (issue 33).
    ("max-tokens-zero-echo", "max-tokens-zero-generated", "spec"),
    # Tools (issue 20): only a named tool_choice gets a grammar and a call; its stream repeats the call's
    # id and the function name on every fragment (and a null legacy function_call beside them: a
    # warning, delta-null-field, since openai-python types it optional; issue 33).
    ("tool-choice-named-stream", "tool-call-name-repeated", "Q63"),
    ("tool-choice-named-stream", "tool-call-id-repeated", "Q63"),
    ("tool-choice-required", "tool-choice-required-ignored", "spec"),  # text instead of a call (Q80)
    ("tool-choice-required-stream", "tool-choice-required-ignored", "spec"),
    ("parallel-tool-calls", "tool-choice-required-ignored", "spec"),  # Q80: "required" served as auto
    ("tool-round-trip", "feature-server-error", "Q43"),  # 500: an assistant call with content null (Q81)
    ("json-schema", "feature-server-error", "Q43"),  # HTTP 500 for response_format json_schema
    ("json-schema-stream", "feature-server-error", "Q43"),
]


def findings_by_probe(report: Path) -> dict[str, set[tuple[str, Any]]]:
    """``{probe: {(rule, quirk), ...}}`` from a JSON report's errors: each quirk a finding cited."""
    loaded = json.loads(report.read_text())
    return {
        r["source"]: {(e["rule"], quirk) for e in r["errors"] for quirk in e["quirks"] or [e["quirk"]]}
        for r in loaded["results"]
    }


def missing_deviations(report: Path) -> list[tuple[str, str, str]]:
    found = findings_by_probe(report)
    return [d for d in LLAMA_CPP_PYTHON_DEVIATIONS if (d[1], d[2]) not in found.get(d[0], set())]
