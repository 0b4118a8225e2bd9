"""Usage objects: cleaned to OpenAI's integer counts (Q32, Q41) and summed across fan-out requests; and
the estimate of a text's tokens where the upstream has no tokenizer to count usage it did not send (Q28).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from conformance.request_info import RequestInfo

from .repairs import Repairs

__all__ = [
    "USAGE_ESTIMATED",
    "clean_usage",
    "counted_usage",
    "estimated_tokens",
    "generated_tokens",
    "nothing_generated",
    "shown_choices",
    "sum_usage",
    "upstream_text",
    "within_limit",
]

USAGE_ESTIMATED = "usage-estimated"
"""The mark, among a response's repairs, of usage the proxy estimated rather than counted with the
upstream's tokenizer and template: the access log and ``/metrics`` show it (proxy/observability.py)."""

# A word, a run of punctuation, an underscore: what a BPE vocabulary mostly makes one token each.
# Measured with Gemma 3's tokenizer (llama-cpp-python's /extras/tokenize): a sentence of prose 12
# pieces for 12 tokens, '{"city": "Paris", "unit": "celsius"}' 12 for 13, "get_weather" 3 for 3;
# words alone counted 4 for that JSON, one per streamed event 1 for a whole call (issue 37).
_PIECE = re.compile(r"[^\W_]+|[^\w\s]+|_")

_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")
_DETAILS = ("prompt_tokens_details", "completion_tokens_details")


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, float) and value >= 0 and value.is_integer():
        return int(value)
    return None


def estimated_tokens(text: str) -> int:
    """``text``'s tokens as estimated without a tokenizer: its words and runs of punctuation."""
    return sum(1 for _ in _PIECE.finditer(text))


def generated_tokens(payload: Any) -> int | None:
    """The tokens a llama.cpp server says it generated (``timings.predicted_n``, Q35, on an answer and on
    a stream's last events), where it sent no usage: its own count, exact where counting the text again
    is not (JSON made under a grammar tokenizes again in fewer tokens than it was generated in: 31 for
    61, issue 37). One choice's count: the caller takes it for a request of one choice only."""
    if not isinstance(payload, dict) or not isinstance(timings := payload.get("timings"), dict):
        return None
    return _count(timings.get("predicted_n"))


def upstream_text(payload: Any) -> str:
    """The text an upstream's answer or event carries as it sent it (its choices' content or text, or
    llama.cpp's native ``content``): what it generated, where the proxy reads it as something else (a
    call asked as JSON output, proxy/adapters/tool_emulation.py)."""
    if not isinstance(payload, dict):
        return ""
    choices = payload.get("choices")
    if not isinstance(choices, list):
        content = payload.get("content")
        return content if isinstance(content, str) else ""
    return "".join(_choice_texts(choices))


def shown_choices(payload: Any) -> tuple[bool, ...]:
    """Whether each of an upstream's choices (by position) carries text as it sent it: where the proxy
    reads that text as something else, the upstream lost none of it (text_lost, Q14) even where the
    reading shows nothing yet (a JSON call envelope cut off before its function's name)."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    return tuple(bool(text) for text in _choice_texts(choices)) if isinstance(choices, list) else ()


def _choice_texts(choices: list[Any]) -> list[str]:
    texts = []
    for choice in choices:
        if not isinstance(choice, dict):
            texts.append("")
            continue
        part = choice.get("delta") if isinstance(choice.get("delta"), dict) else choice.get("message")
        text = part.get("content") if isinstance(part, dict) else choice.get("text")
        texts.append(text if isinstance(text, str) else "")
    return texts


def clean_usage(raw: Any) -> dict[str, Any] | None:
    """OpenAI's ``CompletionUsage`` from an upstream usage object, or None when it has no counts."""
    if not isinstance(raw, dict):
        return None
    prompt = _count(raw.get("prompt_tokens"))
    completion = _count(raw.get("completion_tokens"))
    if prompt is None and completion is None:
        return None
    prompt = prompt or 0
    completion = completion or 0
    total = _count(raw.get("total_tokens"))
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": total if total is not None and total >= prompt + completion else prompt + completion,
    }
    for key in _DETAILS:
        details = raw.get(key)
        if isinstance(details, dict):
            ints = {k: v for k, v in details.items() if _count(v) is not None}
            if ints:
                usage[key] = ints
    cache_hit = _count(raw.get("prompt_cache_hit_tokens"))  # DeepSeek's name (Q41)
    if cache_hit is not None and "prompt_tokens_details" not in usage:
        usage["prompt_tokens_details"] = {"cached_tokens": cache_hit}
    return usage


def counted_usage(raw: Any, repairs: Repairs) -> dict[str, Any] | None:
    """``clean_usage``, with all zeros taken for no usage: LocalAI sends them on every chunk (Q29), and
    no prompt is zero tokens. The usage is then counted as for an upstream that sends none (Q28)."""
    usage = clean_usage(raw)
    if usage is not None and all(usage.get(k) == 0 for k in _COUNTS):
        repairs.add("Q29")
        return None
    return usage


def within_limit(usage: dict[str, Any] | None, request: RequestInfo) -> dict[str, Any] | None:
    """``usage`` with no more completion tokens than the limit the upstream generated under allows (each
    choice's ``max_tokens``), the same object when it has none more.

    A count past the limit is no count of what was generated: an upstream stops at it. llama-cpp-python
    reported 71 completion tokens for a tool call cut at ``max_tokens`` 64 (issue 37), and text counted
    again with its tokenizer came to 66 for 64 (Q84). The limit is the closer count, and what a client
    that budgets by it was promised; the prompt's count is kept, the total lowered by as much."""
    limit = None if request.max_tokens is None else request.max_tokens * request.choices
    if usage is None or limit is None or usage["completion_tokens"] <= limit:
        return usage
    excess = usage["completion_tokens"] - limit
    within = {**usage, "completion_tokens": limit, "total_tokens": usage["total_tokens"] - excess}
    details = usage.get("completion_tokens_details")
    if isinstance(details, dict):  # (reasoning tokens are part of the completion's)
        within["completion_tokens_details"] = {k: min(v, limit) for k, v in details.items()}
    return within


def nothing_generated(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """``usage`` of an answer to ``max_tokens: 0``: the one token the upstream was let generate (asked
    for 0, llama-cpp-python generates without end) was not sent, and is not counted."""
    if usage is None:
        return None
    details = usage.get("completion_tokens_details")
    return {
        **usage,
        "completion_tokens": 0,
        "total_tokens": usage["prompt_tokens"],
        **({"completion_tokens_details": {k: 0 for k in details}} if isinstance(details, dict) else {}),
    }


def sum_usage(usages: Iterable[dict[str, Any] | None], samples_per_prompt: int = 1) -> dict[str, Any] | None:
    """The usage of one response made of fan-out requests, given in order, ``samples_per_prompt`` per prompt.

    Completion tokens add up over every request, prompt tokens over the prompts only: ``n`` samples of
    one prompt read it once, and OpenAI counts it once.
    """
    prompt = completion = 0
    counted = False
    for position, usage in enumerate(usages):
        if usage is None:
            continue
        counted = True
        if position % samples_per_prompt == 0:
            prompt += int(usage.get("prompt_tokens", 0))
        completion += int(usage.get("completion_tokens", 0))
    if not counted:
        return None
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
