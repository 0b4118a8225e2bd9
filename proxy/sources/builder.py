"""One core request as the sources that answer it on one upstream: a single upstream request, or a
fan-out of single requests.

The request plan (proxy/request_plan.py) makes a ``SourceBuilder`` for the request on the replica that
takes it; the builder splits ``n > 1`` and prompt arrays into single requests (Q71, Q73), sent at once
or, to an upstream that serves one at a time (``UpstreamTraits.serial``), one after another without
streaming. A token-id prompt the upstream refuses is built again by it, once, as text (token_prompt.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from conformance.api_errors import APIError
from conformance.request import Endpoint
from conformance.request_info import RequestInfo

from ..adapters import Adapter
from ..adapters.base import Translate, with_stop_asked, without_streaming
from ..upstream import Upstream
from .base import Source
from .fan_out import ConcurrentFanOut, SerialFanOut
from .upstream import UpstreamSource

__all__ = ["SourceBuilder", "fan_out_prompts", "fan_out_refusal"]


def fan_out_prompts(endpoint: Endpoint, body: dict[str, Any]) -> list[Any]:
    """The prompts a fan-out sends one by one: a completion's array of texts or of token arrays."""
    raw_prompt = body.get("prompt")
    uniform = isinstance(raw_prompt, list) and (
        all(isinstance(p, str) for p in raw_prompt) or all(isinstance(p, list) for p in raw_prompt)
    )
    if endpoint == "completions" and uniform and raw_prompt:
        return list(raw_prompt)
    return [raw_prompt]


def fan_out_refusal(
    endpoint: Endpoint, body: dict[str, Any], info: RequestInfo, limit: int, flag: str
) -> APIError | None:
    """A 400 for a request that would fan out to more than ``limit`` upstream requests (prompts x n).

    The limits: ``--max-fan-out`` (a 1 KB request of 200 prompts and n 128 opened 25,600 at once and
    ran the proxy out of files), and for requests sent at once, ``--max-upstream-connections``: they
    are in flight together (proxy/admission.py)."""
    prompts = len(fan_out_prompts(endpoint, body))
    if prompts * info.n <= limit:
        return None
    param = "prompt" if prompts > 1 else "n"
    return APIError.make(
        f"Invalid '{param}': {prompts} prompt(s) x n={info.n} is {prompts * info.n} upstream requests; "
        f"this server sends at most {limit} for one request ({flag}).",
        400,
        code="fan_out_too_large",
        param=param,
    )


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
    lines: bool = False
    """Whether the client reads a single request's stream as the core's data lines (``next_lines``
    only, never ``next_batch``): an answer read whole may then be judged through the relay of plain
    chunks (``UpstreamSource``)."""

    def fans_out(self, body: dict[str, Any]) -> bool:
        """Whether ``body`` goes to the upstream as several requests."""
        return self.fan_out and (self.info.n > 1 or isinstance(body.get("prompt"), list))

    def build(
        self,
        body: dict[str, Any],
        info: RequestInfo | None = None,
        *,
        reading: Callable[[], Translate] | None = None,
    ) -> Source:
        """The source for ``body`` as it is (``info``: the request it makes, when not the client's
        own): one upstream request, or a fan-out of single requests; ``reading`` makes the reader of
        each one's answers where the proxy chose it (a call asked as JSON output), not the adapter."""
        info = info or self.info
        parts = _split(self.endpoint, body, info) if self.fan_out else None
        if parts is None:
            return self._single(body, info, reading=reading, lines=self.lines)
        serial = bool(self.upstream.traits.serial)
        if serial:
            # One request at a time, each answered whole: streamed at once, they would break each other off.
            parts = [without_streaming(part) for part in parts]
        first = self._single(parts[0], info.for_prompt_of(parts[0]), reading=reading)
        sources = [first]
        for index, part in enumerate(parts[1:], start=1):
            # each request's own prompt is counted, not the client's array
            single = self._single(part, info.for_prompt_of(part), first, index, reading=reading)
            sources.append(single)
        if serial:
            return SerialFanOut(sources, info, first_byte_timeout=self.first_byte_timeout)
        return ConcurrentFanOut(sources, info, self.upstream)

    def _single(
        self,
        body: dict[str, Any],
        request: RequestInfo,
        first: UpstreamSource | None = None,
        index_base: int = 0,
        *,
        reading: Callable[[], Translate] | None = None,
        lines: bool = False,
    ) -> UpstreamSource:
        if request.names_stop and self.adapter.reports_stopping_word:
            body = with_stop_asked(body)  # (the client's protocol names the stop sequence met)
        call = self.adapter.call(self.endpoint, body)
        if reading is not None:
            call = replace(call, translate=reading())
        return UpstreamSource(
            self.upstream,
            self.adapter,
            request,
            call,
            max_line_bytes=self.max_line_bytes,
            headers=self.headers,
            identity=None if first is None else first.identity,
            index_base=index_base,
            emit_usage=self.info.include_usage or not self.info.stream,
            lines=lines,
        )
