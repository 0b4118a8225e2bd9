"""``stream: true`` on an upstream that cannot stream: a normalized body replayed as OpenAI chunks."""

from __future__ import annotations

from typing import Any

from conformance.request_info import RequestInfo

__all__ = ["synthesize_chunks"]


def synthesize_chunks(body: dict[str, Any], request: RequestInfo) -> list[dict[str, Any]]:
    head = {
        "id": body["id"],
        "object": request.object_name,
        "created": body["created"],
        "model": body["model"],
    }
    chunks: list[dict[str, Any]] = []
    finals: list[dict[str, Any]] = []
    for choice in body["choices"]:
        index = choice["index"]
        if request.endpoint == "completions":
            part = {
                "text": choice["text"],
                "index": index,
                "logprobs": choice["logprobs"],
                "finish_reason": None,
            }
            chunks.append({**head, "choices": [part]})
            finals.append(
                {"text": "", "index": index, "logprobs": None, "finish_reason": choice["finish_reason"]}
            )
            continue
        message = choice["message"]
        calls = message.get("tool_calls")
        first: dict[str, Any] = {"role": "assistant", "content": None if calls else ""}
        chunks.append(
            {**head, "choices": [{"index": index, "delta": first, "logprobs": None, "finish_reason": None}]}
        )
        delta: dict[str, Any] = {}
        reasoning = request.reasoning_field
        if message.get(reasoning):
            delta[reasoning] = message[reasoning]
        if message.get("content"):
            delta["content"] = message["content"]
        if message.get("refusal"):
            delta["refusal"] = message["refusal"]
        if calls:
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(calls)]
        if delta:
            part = {"index": index, "delta": delta, "logprobs": choice["logprobs"], "finish_reason": None}
            chunks.append({**head, "choices": [part]})
        finals.append(
            {"index": index, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
        )
    chunks.extend({**head, "choices": [final]} for final in finals)
    if request.include_usage:
        chunks.append({**head, "choices": [], "usage": body.get("usage")})
    return chunks
