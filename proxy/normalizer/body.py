"""Whole (non-streaming) responses normalized with the same rules as streams: each choice through the
named repairs of ``field_repairs`` (the message repairs, then the finish repairs a stream ends with).

Also merges several bodies into one: llama.cpp's JSON array reply to a prompt array (Q73) and the
proxy's own fan-out of ``n`` and prompt arrays (Q70-Q73).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conformance.api_errors import APIError
from conformance.protocols.front_end import with_stop_named
from conformance.request_info import RequestInfo

from ..errors import error_from_payload, is_error_payload
from .choices import as_dict
from .field_repairs import CHAT_MESSAGE_REPAIRS, TEXT_MESSAGE_REPAIRS, Message, choice_index
from .finish import stopping_word
from .identity import Identity
from .repairs import Repairs
from .text_lost import text_lost
from .usage import counted_usage, nothing_generated, sum_usage, within_limit

__all__ = ["merge_bodies", "normalize_body"]


def normalize_body(
    obj: Any,
    request: RequestInfo,
    *,
    repairs: Repairs,
    identity: Identity | None = None,
    status: int = 200,
    unshown_tokens: bool = False,
    shown: Sequence[bool] = (),
) -> dict[str, Any]:
    """One OpenAI response object; raises :class:`APIError` for an error in any upstream shape.
    ``unshown_tokens``: the upstream's usage counts tokens it never shows (text_lost); ``shown``: by
    position, the choices the upstream showed output for where the proxy read its answer as something
    else first (``shown_choices``)."""
    identity = identity or Identity(request.endpoint, request.model)
    if isinstance(obj, list) and obj and all(isinstance(item, dict) for item in obj):
        repairs.add("Q73")
        parts = [
            normalize_body(item, request, repairs=repairs, identity=identity, unshown_tokens=unshown_tokens)
            for item in obj
        ]
        return merge_bodies(parts)
    raw_choices = _upstream_choices(obj, status)
    identity.stamp(obj, repairs)
    usage = counted_usage(obj.get("usage"), repairs)
    if (within := within_limit(usage, request)) is not usage:
        repairs.add("Q85")
        usage = within
    if not request.generates:
        usage = nothing_generated(usage)
    word = stopping_word(obj, request.stop) if request.names_stop and len(raw_choices) == 1 else None
    choices, seen = _choices(raw_choices, request, repairs, usage, word, shown)
    if request.generates:
        lost = text_lost(
            [(c["index"], was, c["finish_reason"]) for c, was in zip(choices, seen, strict=True)],
            usage,
            unshown_tokens=unshown_tokens,
            stops=request.stop,
        )
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


def _upstream_choices(obj: Any, status: int) -> list[Any]:
    """The upstream's choices; raises the error its body is, or one for a body that is not a response."""
    if not isinstance(obj, dict):
        raise APIError.make("the upstream server sent a response that is not a JSON object", 502)
    if is_error_payload(obj):
        raise error_from_payload(obj, status if status >= 400 else 500, quirk="N2")
    raw_choices = obj.get("choices")
    if not isinstance(raw_choices, list):
        raise APIError.make("the upstream server sent a response without choices", 502)
    return raw_choices


def _choices(
    raw_choices: list[Any],
    request: RequestInfo,
    repairs: Repairs,
    usage: dict[str, Any] | None,
    word: str | None,
    upstream_shown: Sequence[bool],
) -> tuple[list[dict[str, Any]], list[bool]]:
    """The choices repaired (field_repairs, in its order), and whether each showed output (text_lost),
    here or, by position, before the proxy read it as something else (``upstream_shown``); ``word``:
    the stop sequence llama-server says its one choice met (``stopping_word``)."""
    chat = request.endpoint == "chat"
    order = CHAT_MESSAGE_REPAIRS if chat else TEXT_MESSAGE_REPAIRS
    # The upstream's count of completion tokens is the choice's only when there is one choice (Q21).
    tokens = int(usage["completion_tokens"]) if usage is not None and len(raw_choices) == 1 else None
    choices: list[dict[str, Any]] = []
    shown: list[bool] = []
    for position, raw in enumerate(raw_choices):
        if not isinstance(raw, dict):
            continue
        index = choice_index(raw, position, repairs)
        upstream = position < len(upstream_shown) and upstream_shown[position]
        shown.append(upstream or _shows_output(raw, chat))
        message = Message(raw, request, repairs, tokens, index)
        for repair in order:
            repair(message)
        if chat:
            choice = {
                "index": index,
                "message": message.out,
                "logprobs": message.logprobs,
                "finish_reason": message.reason,
            }
        else:
            choice = {
                "text": message.text,
                "index": index,
                "logprobs": message.logprobs,
                "finish_reason": message.reason,
            }
        choices.append(with_stop_named(choice, (message.matched or word) if request.names_stop else None))
    return choices, shown


def _shows_output(raw: dict[str, Any], chat: bool) -> bool:
    """Whether the upstream sent any output for the choice, before stop sequences cut it (text_lost)."""
    if not chat:
        return bool(raw.get("text"))
    message = as_dict(raw.get("message"))
    keys = ("content", "refusal", "reasoning_content", "reasoning", "tool_calls")
    return any(message.get(key) for key in keys)
