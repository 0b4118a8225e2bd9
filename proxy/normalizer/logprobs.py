"""Chat-style logprobs on ``/v1/completions`` converted to the legacy shape (Q67, Q68)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["chat_logprobs", "legacy_logprobs"]

_FLOOR = -9999.0  # OpenAI's "very unlikely"; llama.cpp sends -3.4e38 for -inf (Q67)


def _lp(entry: dict[str, Any]) -> float | None:
    value = entry.get("logprob")
    if value is None and isinstance(entry.get("prob"), int | float):
        prob = float(entry["prob"])  # post_sampling_probs renames logprob to prob (Q67)
        value = math.log(prob) if prob > 0 else _FLOOR
    if isinstance(value, int | float) and not isinstance(value, bool):
        return max(float(value), _FLOOR)
    return None


def legacy_logprobs(raw: Any, offset: int = 0) -> tuple[dict[str, Any] | None, int, bool]:
    """(legacy logprobs, text length covered, whether a conversion was needed)."""
    if raw is None:
        return None, 0, False
    if not isinstance(raw, dict):
        return None, 0, True  # TGI's flat list (Q68) carries no tokens: drop it
    content = raw.get("content")
    if not isinstance(content, list):
        if "tokens" in raw:
            given = raw.get("tokens") or []
            return raw, sum(len(t) for t in given if isinstance(t, str)), False
        return None, 0, True
    tokens: list[str] = []
    token_lps: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    position = offset
    for entry in content:
        if not isinstance(entry, dict):
            continue
        token = str(entry.get("token", ""))
        tokens.append(token)
        token_lps.append(_lp(entry))
        alternatives = entry.get("top_logprobs", entry.get("top_probs"))
        top: dict[str, float] = {}
        if isinstance(alternatives, list):
            for alt in alternatives:
                if isinstance(alt, dict):
                    value = _lp(alt)
                    if value is not None:
                        top[str(alt.get("token", ""))] = value
        tops.append(top)
        offsets.append(position)
        position += len(token)
    legacy = {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}
    return legacy, position - offset, True


def chat_logprobs(raw: Any) -> tuple[dict[str, Any] | None, bool]:
    """Chat logprobs with both required keys (``content``, ``refusal``); (value, repaired)."""
    if raw is None:
        return None, False
    if not isinstance(raw, dict):
        return None, True
    if "content" in raw and "refusal" in raw:
        return raw, False
    return {"content": raw.get("content"), "refusal": raw.get("refusal")}, True
