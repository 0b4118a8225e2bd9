"""A token-id prompt that the upstream refuses, asked again once as its text (Q74).

A completion's prompt may be token ids (OpenAI takes them); a server that takes only text refuses them.
The source asks the upstream's detokenizer (proxy/adapters/token_prompts.py) for the text and builds the
request again from it, with the builder the first attempt came from: no source calls back into the route.
"""

from __future__ import annotations

from typing import Any

from conformance.api_errors import APIError

from ..adapters.token_prompts import detokenize, is_token_prompt, refused_token_prompt
from ..normalizer import Repairs
from .base import Source
from .builder import SourceBuilder

__all__ = ["TextPromptFallback", "source_for"]


def source_for(builder: SourceBuilder, body: dict[str, Any]) -> Source:
    """The source for ``body``; for a token-id prompt, one that can fall back to its text."""
    built = builder.build(body)
    if not is_token_prompt(body.get("prompt")):
        return built
    return TextPromptFallback(built, body, builder)


class TextPromptFallback(Source):
    """A source for a token-id prompt that, when the upstream refuses it, starts over once with text."""

    def __init__(self, first: Source, body: dict[str, Any], builder: SourceBuilder) -> None:
        self._current = first
        self._body = body
        self._builder = builder
        self._spent = Repairs()  # the refused attempt's, and the fallback itself (Q74)

    # Read by the response writer; whichever attempt runs now answers.
    @property
    def body(self) -> dict[str, Any] | None:
        return self._current.body

    @body.setter
    def body(self, value: dict[str, Any] | None) -> None:
        self._current.body = value

    @property
    def upstream_status(self) -> int | None:
        return self._current.upstream_status

    @upstream_status.setter
    def upstream_status(self, value: int | None) -> None:
        self._current.upstream_status = value

    @property
    def failure(self) -> APIError | None:
        return self._current.failure

    @property
    def usage(self) -> dict[str, Any] | None:
        return self._current.usage

    @property
    def repairs(self) -> Repairs:
        total = Repairs(self._spent)
        total.update(self._current.repairs)
        return total

    async def start(self) -> list[dict[str, Any]]:
        try:
            return await self._current.start()
        except APIError as refused:
            if not refused_token_prompt(refused):
                raise
            await self._current.aclose()
            self._spent.update(self._current.repairs)
        builder = self._builder
        llamacpp_first = builder.adapter.name == "llamacpp"
        text = await detokenize(builder.upstream, self._body["prompt"], llamacpp_first=llamacpp_first)
        self._spent.add("Q74")
        text_body = {**self._body, "prompt": text}
        self._current = builder.build(text_body, builder.info.for_prompt_of(text_body))
        return await self._current.start()

    @property
    def active(self) -> Source:
        return self._current.active

    async def next_batch(self) -> list[dict[str, Any]] | None:
        return await self._current.next_batch()

    async def aclose(self) -> None:
        await self._current.aclose()
