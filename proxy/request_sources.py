"""One completion request as the sources that answer it: a single upstream request, a fan-out, and the
text fallback of a token-id prompt, composed here so that no source calls back into the route.

The route builds a ``SourceBuilder`` for the request and asks it for the source of the body; the builder
splits ``n > 1`` and prompt arrays into single requests (Q71, Q73), sent at once or, to an upstream that
serves one at a time (``UpstreamTraits.serial``), one after another without streaming; and a token-id
prompt the upstream refuses is built again, once, as the text the upstream's detokenizer gives (Q74).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .adapters import Adapter
from .adapters.base import without_streaming
from .adapters.token_prompts import detokenize, is_token_prompt, refused_token_prompt
from .errors import ProxyError
from .normalizer import Endpoint, Repairs, RequestInfo
from .source import ConcurrentFanOut, SerialFanOut, Source, UpstreamSource, prompt_text
from .upstream import Upstream

__all__ = ["SourceBuilder", "TextPromptFallback", "fan_out_prompts"]


def fan_out_prompts(endpoint: Endpoint, body: dict[str, Any]) -> list[Any]:
    """The prompts a fan-out sends one by one: a completion's array of texts or of token arrays."""
    raw_prompt = body.get("prompt")
    uniform = isinstance(raw_prompt, list) and (
        all(isinstance(p, str) for p in raw_prompt) or all(isinstance(p, list) for p in raw_prompt)
    )
    if endpoint == "completions" and uniform and raw_prompt:
        return list(raw_prompt)
    return [raw_prompt]


def _split(endpoint: Endpoint, body: dict[str, Any], info: RequestInfo) -> list[dict[str, Any]] | None:
    """One single-choice request per (prompt, sample) when ``n > 1`` or the prompt is an array."""
    prompts = fan_out_prompts(endpoint, body)
    if info.n == 1 and len(prompts) == 1:
        return None
    seed = body.get("seed")
    parts = []
    for prompt in prompts:
        for sample in range(info.n):
            part = {**body, "n": 1}
            if endpoint == "completions":
                part["prompt"] = prompt
            if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 and info.n > 1:
                # One seed for every sample would make the n samples one sample n times; a seed per
                # sample keeps them different and the whole answer as repeatable as the seed makes it.
                # (A negative seed is llama.cpp's "random": left to each sample. The sum stays int64.)
                part["seed"] = (seed + sample) % 2**63
            parts.append(part)
    return parts


@dataclass(slots=True)
class SourceBuilder:
    """What every source of one request shares; ``source(body)`` builds the sources for a body."""

    upstream: Upstream
    adapter: Adapter
    endpoint: Endpoint
    info: RequestInfo
    headers: list[tuple[bytes, bytes]]
    max_line_bytes: int
    first_byte_timeout: float
    fan_out: bool

    def fans_out(self, body: dict[str, Any]) -> bool:
        """Whether ``body`` goes to the upstream as several requests."""
        return self.fan_out and (self.info.n > 1 or isinstance(body.get("prompt"), list))

    def source(self, body: dict[str, Any]) -> Source:
        """The source for ``body``; for a token-id prompt, one that can fall back to its text."""
        built = self.build(body)
        if not is_token_prompt(body.get("prompt")):
            return built
        return TextPromptFallback(built, body, self)

    def build(self, body: dict[str, Any], info: RequestInfo | None = None) -> Source:
        """The source for ``body`` as it is (``info``: the request it makes, when not the client's
        own): one upstream request, or a fan-out of single requests."""
        info = info or self.info
        parts = _split(self.endpoint, body, info) if self.fan_out else None
        if parts is None:
            return self._single(body, info, prompt_text(body))
        serial = bool(self.upstream.traits.serial)
        if serial:
            # One request at a time, each answered whole: streamed at once, they would break each other off.
            parts = [without_streaming(part) for part in parts]
        first = self._single(parts[0], info.echoing(parts[0]), prompt_text(parts[0]))
        sources = [first]
        for index, part in enumerate(parts[1:], start=1):
            # each request's own prompt is counted, not the client's array
            sources.append(self._single(part, info.echoing(part), prompt_text(part), first, index))
        if serial:
            return SerialFanOut(sources, info, first_byte_timeout=self.first_byte_timeout)
        return ConcurrentFanOut(sources, info, self.upstream)

    def _single(
        self,
        body: dict[str, Any],
        request: RequestInfo,
        prompt: str,
        first: UpstreamSource | None = None,
        index_base: int = 0,
    ) -> UpstreamSource:
        return UpstreamSource(
            self.upstream,
            self.adapter,
            request,
            self.adapter.call(self.endpoint, body),
            prompt=prompt,
            max_line_bytes=self.max_line_bytes,
            headers=self.headers,
            identity=None if first is None else first.identity,
            index_base=index_base,
            emit_usage=self.info.include_usage or not self.info.stream,
        )


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
    def failure(self) -> ProxyError | None:
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
        except ProxyError as refused:
            if not refused_token_prompt(refused):
                raise
            await self._current.aclose()
            self._spent.update(self._current.repairs)
        builder = self._builder
        llamacpp_first = builder.adapter.name == "llamacpp"
        text = await detokenize(builder.upstream, self._body["prompt"], llamacpp_first=llamacpp_first)
        self._spent.add("Q74")
        text_body = {**self._body, "prompt": text}
        self._current = builder.build(text_body, builder.info.echoing(text_body))
        return await self._current.start()

    async def next_batch(self) -> list[dict[str, Any]] | None:
        return await self._current.next_batch()

    async def aclose(self) -> None:
        await self._current.aclose()
