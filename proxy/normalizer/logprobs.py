"""Chat-style logprobs on ``/v1/completions`` converted to the legacy shape (Q67, Q68); logprobs that
are not finite numbers (``-Infinity``, ``NaN``), which JSON cannot carry, made OpenAI's floor."""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "LogprobEntry",
    "chat_logprobs",
    "from_entries",
    "legacy_logprobs",
    "logprob_entries",
    "logprobs_up_to",
]

_FLOOR = -9999.0  # OpenAI's "very unlikely"; llama.cpp sends -3.4e38 for -inf (Q67)


def _lp(entry: dict[str, Any]) -> float | None:
    value = entry.get("logprob")
    if value is None and isinstance(entry.get("prob"), int | float):
        prob = float(entry["prob"])  # post_sampling_probs renames logprob to prob (Q67)
        value = math.log(prob) if prob > 0 else _FLOOR
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _finite(float(value))
    return None


def _finite(value: float) -> float:
    """``value`` as a logprob JSON can carry: at least the floor, and a number (NaN and -inf: the floor)."""
    if math.isnan(value):
        return _FLOOR
    return min(max(value, _FLOOR), 0.0)


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
    content = raw.get("content")
    if isinstance(content, list) and not all(_all_finite(entry) for entry in content):
        content = [_made_finite(entry) for entry in content]
    elif "content" in raw and "refusal" in raw:
        return raw, False
    return {"content": content, "refusal": raw.get("refusal")}, True


def _all_finite(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return True
    value = entry.get("logprob")
    if isinstance(value, float) and not math.isfinite(value):
        return False
    top = entry.get("top_logprobs")
    return not isinstance(top, list) or all(_all_finite(alt) for alt in top)


def _made_finite(entry: Any) -> Any:
    """A copy of a chat logprob entry (and its alternatives) with a non-finite logprob replaced."""
    if not isinstance(entry, dict):
        return entry
    out = dict(entry)
    value = out.get("logprob")
    if isinstance(value, float) and not math.isfinite(value):
        out["logprob"] = _finite(value)
    if isinstance(out.get("top_logprobs"), list):
        out["top_logprobs"] = [_made_finite(alt) for alt in out["top_logprobs"]]
    return out


# -- logprobs cut with the text at a stop sequence the proxy enforces (Q76) ---------------------------

LogprobEntry = tuple[str, Any]
"""One token's logprobs: its text and what stands for it in the shape it came in."""

_LEGACY_KEYS = ("tokens", "token_logprobs", "top_logprobs", "text_offset")


def logprob_entries(logprobs: dict[str, Any]) -> list[LogprobEntry]:
    """The tokens of chat (``content``) or legacy (parallel arrays) logprobs, in order."""
    content = logprobs.get("content")
    if isinstance(content, list):
        return [(str(e.get("token", "")) if isinstance(e, dict) else "", e) for e in content]
    columns = [logprobs.get(key) or [] for key in _LEGACY_KEYS]
    return [(str(row[0]), row) for row in zip(*columns, strict=False)]


def from_entries(logprobs: dict[str, Any], entries: list[LogprobEntry]) -> dict[str, Any]:
    """``logprobs`` (the shape the entries came in) holding only ``entries``."""
    if isinstance(logprobs.get("content"), list):
        return {**logprobs, "content": [entry for _, entry in entries]}
    rows = [entry for _, entry in entries]
    return {key: [row[i] for row in rows] for i, key in enumerate(_LEGACY_KEYS)}


def logprobs_up_to(logprobs: Any, chars: int) -> Any:
    """``logprobs`` without the tokens that start at or past ``chars`` characters of the text."""
    if not isinstance(logprobs, dict):
        return logprobs
    kept: list[LogprobEntry] = []
    start = 0
    for token, entry in logprob_entries(logprobs):
        if start >= chars:
            break
        kept.append((token, entry))
        start += len(token)
    return from_entries(logprobs, kept)
