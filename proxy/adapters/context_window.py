"""A prompt longer than a llama.cpp server's context, refused with 400 before any generation.

ik_llama.cpp (and llama.cpp before PR #15780) answer an over-long prompt with 200 after cutting it
(ik_llama.cpp at the commit before its #768 serving Gemma 3 270M with ``-c 2048``, measured: a prompt of
3,000 words came back 200 with ``prompt_tokens`` 1978 on ``/v1/completions`` and 2000 on chat), or with
a bare 500 (Q43, Q44); and a request whose prompt fits
but whose ``max_tokens`` does not runs on through a shifting context, forgetting the prompt's start.
OpenAI answers both with 400 ``context_length_exceeded`` (openai-spec.md §2.11, quirks.md header), and
counts the requested completion tokens with the prompt's. The server's context comes from ``/props``
(``default_generation_settings.n_ctx``: one slot's share, which is what one request gets) and the
prompt's tokens from its ``/tokenize``.

A chat prompt is counted as the server templates it where it can say so (llama.cpp's
``/apply-template``); without that endpoint (ik_llama.cpp at that commit) only the messages' texts are
counted, which is fewer tokens than the templated prompt: a prompt refused that way is too long for
certain, and one that the template alone pushes past the context goes through as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from conformance.api_errors import APIError, ContextOverflow
from conformance.request import Endpoint, message_texts

from ..upstream import Upstream
from .base import requested_limit
from .server_props import ServerProps

__all__ = ["ContextWindow", "TokenCounter", "context_of_props"]

_TIMEOUT = 5.0  # seconds for each call to the upstream; past it the prompt goes through unchecked
_CONCURRENT_COUNTS = 4  # /tokenize calls at once for one request: a prompt array may hold hundreds
# No tokenizer makes more tokens of a text than its UTF-8 bytes, plus a start token and the space some
# prepend: a prompt this short needs no call to the upstream at all.
_ADDED_TOKENS = 2


def context_of_props(props: Any) -> int | None:
    """One request's context from a ``GET /props`` answer: a slot's ``n_ctx``, else the server's."""
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    for value in (settings.get("n_ctx") if isinstance(settings, dict) else None, props.get("n_ctx")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


TokenCounter = Callable[[Upstream, str, float], Awaitable[int | None]]
"""The adapter's count of a text's tokens as the server reads it as a prompt (special tokens included)."""


class ContextWindow:
    """The check of each request against the upstream's context size (from its ``/props``)."""

    def __init__(self, count: TokenCounter, props: ServerProps) -> None:
        self._props = props
        self._count = count
        self._templates: bool | None = None  # whether /apply-template answers; None until asked

    async def overflow(self, upstream: Upstream, endpoint: Endpoint, body: dict[str, Any]) -> APIError | None:
        """The 400 for a request whose prompt and requested completion do not fit, else None (also when
        the size or the count cannot be had: the upstream then answers as it would)."""
        # The check runs before the request is sent, where no first-byte or client timeout bounds the
        # wait: past the first-byte timeout it is given up, and the upstream's own answer stands.
        try:
            async with asyncio.timeout(upstream.config.first_byte_timeout):
                return await self._overflow(upstream, endpoint, body)
        except TimeoutError:
            return None

    async def _overflow(
        self, upstream: Upstream, endpoint: Endpoint, body: dict[str, Any]
    ) -> APIError | None:
        size = await self._props.read(upstream, context_of_props)
        if size is None:
            return None
        completion = _completion_tokens(body)
        room = size - max(completion, 1)  # the most prompt tokens that leave room to generate
        counts: list[int | None] = []
        texts: list[str] = []
        for prompt in await self._prompts(upstream, endpoint, body, room):
            if isinstance(prompt, list):
                counts.append(len(prompt))
            elif len(prompt.encode()) + _ADDED_TOKENS > room and prompt not in texts:
                texts.append(prompt)  # a prompt array may repeat one text: counted once
        calls = asyncio.Semaphore(_CONCURRENT_COUNTS)

        async def count(text: str) -> int | None:
            async with calls:
                return await self._count(upstream, text, _TIMEOUT)

        counts += await asyncio.gather(*(count(text) for text in texts))
        longest = max((c for c in counts if c is not None), default=0)
        return _refusal(endpoint, size, longest, completion) if longest > room else None

    async def _prompts(
        self, upstream: Upstream, endpoint: Endpoint, body: dict[str, Any], room: int
    ) -> list[Any]:
        """The prompts the request makes, each a text or a list of token ids (a prompt array: each one)."""
        if endpoint == "completions":
            prompt = body.get("prompt")
            if isinstance(prompt, str) or _token_ids(prompt):
                return [prompt]
            if isinstance(prompt, list):
                return [p for p in prompt if isinstance(p, str) or _token_ids(p)]
            return []
        messages = body.get("messages")
        if not isinstance(messages, list):
            return []
        texts = "\n".join(message_texts(messages))  # one message a line, as the usage count reads them
        if len(texts.encode()) + _ADDED_TOKENS <= room:
            return []  # short: the templated prompt is not worth asking for
        templated = await self.templated(upstream, {"messages": messages})
        return [texts if templated is None else templated]

    async def templated(
        self,
        upstream: Upstream,
        body: dict[str, Any],
        timeout: float = _TIMEOUT,  # noqa: ASYNC109
    ) -> str | None:
        """The prompt the server's template writes for a chat ``body`` (its messages, and its tools
        where given), by its ``/apply-template``; None where it has none or does not answer in
        ``timeout`` seconds."""
        if self._templates is False or timeout <= 0:
            return None
        status, answer = await upstream.answer("POST", "/apply-template", body, timeout=timeout)
        templated = answer.get("prompt") if isinstance(answer, dict) else None
        if isinstance(templated, str):
            self._templates = True
            return templated
        if self._templates is None and status in (404, 405):
            # No such endpoint: not asked again. A timeout or a failed call is asked again next time.
            self._templates = False
        return None


def _completion_tokens(body: dict[str, Any]) -> int:
    """The completion tokens the request asks for, as OpenAI counts them against the context."""
    limit = requested_limit(body)
    return limit if limit is not None and limit > 0 else 0


def _token_ids(prompt: Any) -> bool:
    return isinstance(prompt, list) and bool(prompt) and all(isinstance(t, int) for t in prompt)


def _refusal(endpoint: Endpoint, size: int, prompt: int, completion: int) -> ContextOverflow:
    """OpenAI's 400, in its own words for each endpoint."""
    total = prompt + completion
    if endpoint == "chat":
        param = "messages"
        if completion:
            message = (
                f"This model's maximum context length is {size} tokens. However, you requested {total} "
                f"tokens ({prompt} in the messages, {completion} in the completion). Please reduce the "
                "length of the messages or completion."
            )
        else:
            message = (
                f"This model's maximum context length is {size} tokens. However, your messages resulted "
                f"in {prompt} tokens. Please reduce the length of the messages."
            )
    else:
        param = "prompt"
        message = (
            f"This model's maximum context length is {size} tokens, however you requested {total} tokens "
            f"({prompt} in your prompt; {completion} for the completion). Please reduce your prompt; or "
            "completion length."
        )
    return ContextOverflow.of(message, param=param)
