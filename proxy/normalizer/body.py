"""Whole (non-streaming) responses normalized with the same rules as streams.

Also merges several bodies into one: llama.cpp's JSON array reply to a prompt array (Q73) and the
proxy's own fan-out of ``n`` and prompt arrays (Q70-Q73).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..emulation.stop import truncate_at_stop
from ..errors import ProxyError, error_from_payload, is_error_payload
from .choices import as_dict, fix_tool_call
from .finish import FAILURE_REASONS, map_finish_reason
from .identity import Identity
from .logprobs import chat_logprobs, legacy_logprobs, logprobs_within
from .repairs import Repairs
from .request import RequestInfo
from .stream import failure_for_reason
from .text_lost import text_lost
from .usage import counted_usage, nothing_generated, sum_usage

__all__ = ["merge_bodies", "normalize_body"]


def normalize_body(
    obj: Any,
    request: RequestInfo,
    *,
    repairs: Repairs,
    identity: Identity | None = None,
    status: int = 200,
) -> dict[str, Any]:
    """One OpenAI response object; raises :class:`ProxyError` for an error in any upstream shape."""
    identity = identity or Identity(request.endpoint, request.model)
    if isinstance(obj, list) and obj and all(isinstance(item, dict) for item in obj):
        repairs.add("Q73")
        parts = [normalize_body(item, request, repairs=repairs, identity=identity) for item in obj]
        return merge_bodies(parts)
    if not isinstance(obj, dict):
        raise ProxyError.make("the upstream server sent a response that is not a JSON object", 502)
    if is_error_payload(obj):
        raise error_from_payload(obj, status if status >= 400 else 500, quirk="N2")
    raw_choices = obj.get("choices")
    if not isinstance(raw_choices, list):
        raise ProxyError.make("the upstream server sent a response without choices", 502)
    identity.stamp(obj, repairs)
    usage = counted_usage(obj.get("usage"), repairs)
    if not request.generates:
        usage = nothing_generated(usage)
    single = len(raw_choices) == 1
    choices: list[dict[str, Any]] = []
    shown: list[bool] = []
    for position, raw in enumerate(raw_choices):
        if not isinstance(raw, dict):
            continue
        index = raw.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            repairs.add("Q06")
            index = position
        tokens = int(usage["completion_tokens"]) if usage is not None and single else None
        shown.append(_shows_output(raw, request.endpoint == "chat"))
        if request.endpoint == "chat":
            choices.append(_chat_choice(raw, index, request, repairs, tokens))
        else:
            choices.append(_text_choice(raw, index, request, repairs, tokens))
    if request.generates:
        judged = [(c["index"], seen, c["finish_reason"]) for c, seen in zip(choices, shown, strict=True)]
        lost = text_lost(judged, usage)
        if lost is not None:
            raise lost
    body: dict[str, Any] = {
        "id": identity.id,
        "object": request.body_object_name,
        "created": identity.created,
        "model": identity.model,
        "choices": choices,
        "usage": usage,
    }
    if obj.get("object") != request.body_object_name:
        repairs.add("Q12")
    return body


def merge_bodies(bodies: Sequence[dict[str, Any]], samples_per_prompt: int = 1) -> dict[str, Any]:
    """One response of the bodies' choices in order, re-indexed; usage summed (``sum_usage``)."""
    first = bodies[0]
    choices: list[dict[str, Any]] = []
    for body in bodies:
        for choice in body["choices"]:
            choices.append({**choice, "index": len(choices)})
    usages = [body.get("usage") for body in bodies]
    usage = sum_usage(usages, samples_per_prompt) if all(u is not None for u in usages) else None
    return {**first, "choices": choices, "usage": usage}


def _finish(
    raw: dict[str, Any], request: RequestInfo, repairs: Repairs, stopped: bool, tokens: int | None
) -> str:
    reason, quirk = map_finish_reason(raw.get("finish_reason"), request.endpoint)
    if quirk is not None:
        repairs.add(quirk)
    if reason in FAILURE_REASONS:
        raise failure_for_reason(str(reason), quirk)
    if not request.generates:
        return "length"  # max_tokens 0: the one token asked of the upstream was cut
    if stopped:
        return "stop"
    if reason is None:
        repairs.add("Q16")
        reason = "stop"
    if (
        reason == "stop"
        and request.max_tokens is not None
        and tokens is not None
        and tokens >= request.max_tokens
    ):
        repairs.add("Q21")
        reason = "length"
    return reason


def _shows_output(raw: dict[str, Any], chat: bool) -> bool:
    """Whether the upstream sent any output for the choice, before stop sequences cut it (text_lost)."""
    if not chat:
        return bool(raw.get("text"))
    message = as_dict(raw.get("message"))
    keys = ("content", "refusal", "reasoning_content", "reasoning", "tool_calls")
    return any(message.get(key) for key in keys)


def _echoed_tokens(text: str, logprobs: Any, count: int) -> tuple[str, Any]:
    """A ``max_tokens: 0`` answer to a prompt of ``count`` token ids, echoed: its first ``count``
    tokens (and their text), without the one the upstream was let generate. Without token logprobs
    there is no telling where the prompt ends, and the text is kept as it is."""
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    if not isinstance(tokens, list) or len(tokens) < count or not all(isinstance(t, str) for t in tokens):
        return text, logprobs
    prompt = "".join(tokens[:count])
    if not text.startswith(prompt):
        return text, logprobs
    return prompt, {k: v[:count] if isinstance(v, list) else v for k, v in logprobs.items()}


def _enforce_stop(text: str, request: RequestInfo, repairs: Repairs) -> tuple[str, bool]:
    if not request.stop:
        return text, False
    text, hit = truncate_at_stop(text, request.stop, request.echoed)
    if hit and request.generates:
        repairs.add("Q76")
    return text, hit


def _chat_choice(
    raw: dict[str, Any], index: int, request: RequestInfo, repairs: Repairs, tokens: int | None
) -> dict[str, Any]:
    message = as_dict(raw.get("message"))
    content = message.get("content")
    stopped = False
    if isinstance(content, str):
        content, stopped = _enforce_stop(content, request, repairs)
    elif content is not None:
        content = None
    out: dict[str, Any] = {"role": "assistant", "content": content, "refusal": message.get("refusal")}
    if "refusal" not in message:
        repairs.add("Q61")
    calls = message.get("tool_calls")
    if isinstance(calls, dict):  # TGI before v3.2.0 (Q65)
        calls = [calls]
        repairs.add("Q65")
    if isinstance(calls, list) and calls:
        out["tool_calls"] = [fix_tool_call(c, repairs) for c in calls if isinstance(c, dict)]
    reasoning = message.get("reasoning_content", message.get("reasoning"))
    if isinstance(reasoning, str) and reasoning:
        out["reasoning_content"] = reasoning
    reason = _finish(raw, request, repairs, stopped, tokens)
    if reason == "stop" and out.get("tool_calls"):
        repairs.add("Q64")
        reason = "tool_calls"
    if "logprobs" not in raw:
        repairs.add("Q61")
    logprobs, repaired = chat_logprobs(raw.get("logprobs"), request.alternatives)
    if repaired:
        repairs.add("Q61")
    if stopped or content:  # (no text at all, as with tool calls: nothing to measure them against)
        # The tokens past a stop sequence go with the text it cut (here or at the upstream).
        logprobs = logprobs_within(logprobs, content or "", chat=True)
    return {"index": index, "message": out, "logprobs": logprobs, "finish_reason": reason}


def _text_choice(
    raw: dict[str, Any], index: int, request: RequestInfo, repairs: Repairs, tokens: int | None
) -> dict[str, Any]:
    text = raw.get("text")
    if not isinstance(text, str):
        text = ""
    logprobs, _, converted = legacy_logprobs(raw.get("logprobs"))
    if converted:
        repairs.add("Q67")
    if not request.generates and request.echoed_tokens:
        text, logprobs = _echoed_tokens(text, logprobs, request.echoed_tokens)
        stopped = True
    else:
        text, stopped = _enforce_stop(text, request, repairs)
    if stopped or text:
        logprobs = logprobs_within(logprobs, text, chat=False)
    reason = _finish(raw, request, repairs, stopped, tokens)
    return {"text": text, "index": index, "logprobs": logprobs, "finish_reason": reason}
