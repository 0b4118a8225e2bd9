"""The most messages one request may carry (``--max-items``).

Everything the proxy does with a request is linear in its messages, but each message costs a few
microseconds in each of several passes on the event loop (counting, prefix keys, repairs' checks): a
body of 400,000 one-word messages, 14 MB and under ``--max-body``, held the loop 1.7 s (chat) and
stalled ``/health`` with it (issue 32; the Responses translation, quadratic then, took 18.7 s). A bound
on the count of messages as the upstream would get them (translated, where the front-end joins input
items of one role: that translation runs beside the loop, front_end.off_the_loop) keeps the loop's share
of any request small, as OpenAI's own array limits do (its error code is reused:
``array_above_max_length``). The default, 10,000, is some 5,000 tool calls in one
conversation: far beyond any context window a model has today.
"""

from __future__ import annotations

from typing import Any

from conformance.api_errors import APIError

__all__ = ["too_many_items"]


def too_many_items(body: dict[str, Any], limit: int) -> APIError | None:
    """A 400 for a core request (chat) with more than ``limit`` messages, a message of several content
    parts counting as that many (one of 350,000 parts held the loop 540 ms in the passes over its
    parts); None when it has fewer."""
    messages = body.get("messages")
    count = sum(_items_in(message) for message in messages) if isinstance(messages, list) else 0
    if count <= limit:
        return None
    return APIError.make(
        f"Too many messages: {count}, counting each content part of a message (on the Responses API: "
        f"input items, with the conversation they continue); this server takes at most {limit} in one "
        "request (--max-items).",
        400,
        code="array_above_max_length",
    )


def _items_in(message: Any) -> int:
    content = message.get("content") if isinstance(message, dict) else None
    return max(1, len(content)) if isinstance(content, list) else 1
