"""What differs per upstream family: which endpoint serves a request, its native format, tokenizing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..normalizer.request import Endpoint
from ..upstream import Upstream

__all__ = ["Adapter", "UpstreamCall"]

OPENAI_PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


class Translate(Protocol):
    def __call__(self, payload: Any, /) -> Any: ...


@dataclass(slots=True)
class UpstreamCall:
    """One upstream request: where it goes, its body, and how to read native events (None: OpenAI)."""

    path: str
    body: dict[str, Any]
    translate: Translate | None = None


class Adapter(Protocol):
    name: str

    def call(self, endpoint: Endpoint, body: dict[str, Any]) -> UpstreamCall: ...

    async def count_tokens(self, upstream: Upstream, text: str, timeout: float) -> int | None:  # noqa: ASYNC109
        """``text``'s tokens by the upstream's tokenizer; None without one, or when it takes longer."""
        ...
