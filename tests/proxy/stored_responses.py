"""What the response stores' tests store and how they call a store: one Response, one user message, calls
in turn on one event loop (tests/proxy/test_responses_store*.py)."""

from __future__ import annotations

import asyncio
from typing import Any

MiB = 1024 * 1024
DAY = 24 * 3600.0


def response(key: str, text: str = "hi", **extra: Any) -> dict[str, Any]:
    """A completed Response ``resp_<key>`` whose one message says ``text``."""
    message = {"type": "message", "id": "msg_" + key, "role": "assistant", "status": "completed"}
    message["content"] = [{"type": "output_text", "text": text, "annotations": []}]
    return {"id": "resp_" + key, "object": "response", "status": "completed", "output": [message], **extra}


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def run(store: Any, *calls: Any) -> list[Any]:
    """Each call (a function of the store returning an awaitable), in turn, on one event loop."""

    async def main() -> list[Any]:
        return [await call(store) for call in calls]

    return asyncio.run(main())
