"""The generic adapter: any OpenAI-compatible server, reached on its ``/v1`` endpoints."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from conformance.api_errors import APIError
from conformance.request import Endpoint

from ..upstream import Upstream
from ..upstream_traits import NO_TOKENIZER, UpstreamTraits
from .base import (
    OPENAI_PATHS,
    TokenCount,
    UpstreamCall,
    messages_with_reasoning_as,
    with_limit,
)
from .server_props import stated_sampling
from .structured_output import (
    for_llama_cpp_python,
    llama_cpp_patterns,
    named_tool_patterns,
    unenforceable_pattern,
    unenforced_schema,
)
from .template_overhead import TemplateLearner, estimated_chat_prompt
from .tool_requests import (
    asks_tools,
    choice_as_tools,
    tool_request_for,
    unforceable_tool_choice,
    unknown_tool_choice,
)

__all__ = ["OpenAIAdapter"]


_TOKENIZERS = ("/extras/tokenize/count", "/tokenize")  # llama-cpp-python's, llama.cpp's
_LISTING_TIMEOUT = 5.0  # seconds for the model listing that tells how the upstream takes a schema


class OpenAIAdapter:
    name = "openai"

    def __init__(
        self, default_max_tokens: int | None = None, traits: UpstreamTraits | None = None, props: Any = None
    ) -> None:
        self._default_max_tokens = default_max_tokens
        self._traits = traits or UpstreamTraits()
        self._sampling = stated_sampling(props)
        # The bundled backend names the stop sequence met when asked as llama-server is (base.py).
        self.reports_stopping_word = isinstance(props, dict) and props.get("reports_stopping_word") is True
        self._template = TemplateLearner()

    def call(self, endpoint: Endpoint, body: dict[str, Any]) -> UpstreamCall:
        body = with_limit(body, self._default_max_tokens)
        traits = self._traits
        if endpoint == "chat":
            body = messages_with_reasoning_as(body, traits.reasoning_field)
            body = tool_request_for(traits, choice_as_tools(body))
            if traits.schema_format == "json_object_schema":  # llama-cpp-python: llama.cpp's converter
                body = named_tool_patterns(llama_cpp_patterns(for_llama_cpp_python(body)))
        wants_logprobs = endpoint == "chat" and body.get("logprobs") is True
        if wants_logprobs and "top_logprobs" not in body and self._traits.chat_logprobs_need_top:
            # 0 is within the spec for every upstream, and the alternatives it brings are taken out
            # again (chat_logprobs).
            body = {**body, "top_logprobs": 0}
        return UpstreamCall(OPENAI_PATHS[endpoint], body)

    def instead_of_refused(self, call: UpstreamCall, refused: APIError) -> UpstreamCall | APIError | None:
        return None  # (an OpenAI-compatible server's refusal is the client's answer)

    async def refusal(self, upstream: Upstream, endpoint: Endpoint, body: dict[str, Any]) -> APIError | None:
        # (An OpenAI-compatible server's context is unknown: it refuses a prompt it cannot serve.)
        traits = upstream.traits
        if not traits.listing_read and (isinstance(body.get("response_format"), dict) or asks_tools(body)):
            # Asked once a response format or a tool request comes: the listing tells llama-cpp-python
            # from the rest.
            await upstream.listing(_LISTING_TIMEOUT)
        if endpoint == "chat" and (
            refused := unknown_tool_choice(body) or unforceable_tool_choice(traits, choice_as_tools(body))
        ):
            return refused
        if traits.schema_format == "json_object_schema" and (refused := unenforceable_pattern(body)):
            return refused  # (llama-cpp-python: llama.cpp's converter)
        return unenforced_schema(traits, endpoint, body)

    async def count_tokens(self, upstream: Upstream, text: str, timeout: float) -> int | None:  # noqa: ASYNC109
        """Token count from the upstream's tokenizer: llama-cpp-python's or llama.cpp's endpoint, asked
        for ``timeout`` seconds in all. Probed once each: when neither gives a count, the upstream
        counts as having none from then on; a found tokenizer that is slow once is asked again."""
        traits = upstream.traits
        if traits.tokenizer == NO_TOKENIZER:
            return None
        if traits.tokenizer is None:
            candidates = [path for path in _TOKENIZERS if path not in traits.tokenizer_unanswered]
        else:
            candidates = [traits.tokenizer]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for path in candidates:
            left = deadline - loop.time()
            if left <= 0:
                return None  # the probe goes on with the next endpoint next time
            count = _count(await upstream.json("POST", path, _body(path, text), timeout=left))
            if count is not None:
                traits.tokenizer = path
                if traits.tokenizer_added is None and (left := deadline - loop.time()) > 0:
                    # The count of "", taken off every count. Not answered in time: asked again on the
                    # next count, not taken for 0 for good.
                    empty = await upstream.json("POST", path, _body(path, ""), timeout=left)
                    traits.tokenizer_added = _count(empty)
                return max(count - (traits.tokenizer_added or 0), 0)
            if traits.tokenizer is None:  # (a probe beside this one may have found it meanwhile)
                traits.tokenizer_unanswered.add(path)
        if traits.tokenizer is None and traits.tokenizer_unanswered.issuperset(_TOKENIZERS):
            traits.tokenizer = NO_TOKENIZER
        return None

    async def native_fits(self, upstream: Upstream, body: dict[str, Any]) -> bool:
        return True  # (what an OpenAI-compatible server's own endpoints lack is not known)

    async def sampling_defaults(self, upstream: Upstream) -> dict[str, float] | None:
        """The defaults the upstream's ``/props`` stated at detection (the bundled backend's does); None
        for a server without one: the request then names the API's. Not asked per request: an upstream
        that answers an unknown path slowly (a test's endless stream did) would hold the request up."""
        return self._sampling

    async def prompt_tokens(
        self,
        upstream: Upstream,
        body: dict[str, Any],
        timeout: float,  # noqa: ASYNC109
    ) -> TokenCount | None:
        """A completion's prompt by the upstream's tokenizer with the tokens it adds (llama-cpp-python's
        start token); a chat request's texts by it and its template's markup as learned
        (template_overhead.py): an OpenAI-compatible server offers no template endpoint."""
        if "messages" not in body:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and all(type(t) is int for t in prompt):  # token ids, counted
                return TokenCount(len(prompt), estimated=False)
            tokens = await self.count_tokens(upstream, prompt if isinstance(prompt, str) else "", timeout)
            added = upstream.traits.tokenizer_added or 0
            return None if tokens is None else TokenCount(tokens + added, estimated=False)

        def count(text: str, timeout: float) -> Awaitable[int | None]:
            return self.count_tokens(upstream, text, timeout)

        return await estimated_chat_prompt(self._template, upstream, body, count, timeout)


def _body(path: str, text: str) -> dict[str, str]:
    return {"input": text} if path.startswith("/extras") else {"content": text}


def _count(answer: Any) -> int | None:
    if isinstance(answer, dict):
        if isinstance(answer.get("count"), int):
            return int(answer["count"])
        if isinstance(answer.get("tokens"), list):
            return len(answer["tokens"])
    return None
