"""The generic adapter: any OpenAI-compatible server, reached on its ``/v1`` endpoints."""

from __future__ import annotations

from typing import Any

from ..normalizer.request import Endpoint
from ..upstream import Upstream
from .base import OPENAI_PATHS, UpstreamCall

__all__ = ["OpenAIAdapter"]


class OpenAIAdapter:
    name = "openai"

    def __init__(self) -> None:
        self._tokenizer: str | None = None  # the tokenize endpoint found, "" when there is none

    def call(self, endpoint: Endpoint, body: dict[str, Any]) -> UpstreamCall:
        return UpstreamCall(OPENAI_PATHS[endpoint], body)

    async def count_tokens(self, upstream: Upstream, text: str, timeout: float) -> int | None:  # noqa: ASYNC109
        """Token count from the upstream's tokenizer: llama-cpp-python's or llama.cpp's endpoint. When
        neither answers in ``timeout`` while they are probed, the upstream counts as having none from
        then on; a found tokenizer that is slow once is asked again next time."""
        if self._tokenizer == "":
            return None
        probing = self._tokenizer is None
        candidates = ["/extras/tokenize/count", "/tokenize"] if probing else [self._tokenizer]
        for path in candidates:
            assert path is not None
            body = {"input": text} if path.startswith("/extras") else {"content": text}
            answer = await upstream.json("POST", path, body, timeout=timeout)
            count = _count(answer)
            if count is not None:
                self._tokenizer = path
                return count
        if probing:
            self._tokenizer = ""
        return None


def _count(answer: Any) -> int | None:
    if isinstance(answer, dict):
        if isinstance(answer.get("count"), int):
            return int(answer["count"])
        if isinstance(answer.get("tokens"), list):
            return len(answer["tokens"])
    return None
