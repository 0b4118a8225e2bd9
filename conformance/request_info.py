"""What serving one request needs to know of it, read once per request: the core's request model.

The proxy's normalizer, sources and emulations, and the response writers, read a request through this
one object. It is built on the judge's :class:`conformance.request.Request`, so that the servers and the
judge read a body the same way (the token limit above all: ``max_completion_tokens`` when given, else
``max_tokens``). It describes the core's own request, a chat or completions body: a protocol served by
translation is read after its translation (conformance/protocols/)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from conformance.model_names import clean_model_name
from conformance.request import Endpoint, Request
from conformance.tool_formats.offered import NO_TOOLS, OfferedTools

__all__ = ["RequestInfo"]


def _echoed(request: Request) -> tuple[str, int]:
    """With ``echo``: the text prompt the answer's text begins with, or how many token ids it has."""
    if not request.echo or request.prompts != 1:
        return "", 0
    return (request.prompt_texts[0] if request.prompt_texts else ""), request.prompt_token_ids


def _prompt_chars(request: Request) -> int:
    """Without ``echo``: the characters of the one text prompt a completion's text follows."""
    if request.echo or request.prompts != 1 or len(request.prompt_texts) != 1:
        return 0
    return len(request.prompt_texts[0])


@dataclass(frozen=True, slots=True)
class RequestInfo:
    endpoint: Endpoint
    model: str | None = None
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    choices: int = 1
    """The choices the client asked for in all (``n`` for each prompt): the most an upstream may send."""
    logprobs: bool = False
    alternatives: bool = True
    """Whether a chat request asked for ``top_logprobs``: without it OpenAI sends ``top_logprobs: []``."""
    echoed: str = ""
    """The prompt a completion's text begins with (``echo`` and a text prompt): no stop sequence in it."""
    echoed_tokens: int = 0
    """How many token ids the prompt a completion's text begins with has (``echo``, a token prompt)."""
    prompt_chars: int = 0
    """The characters of the one text prompt a completion's text follows (no ``echo``): the legacy
    logprobs' ``text_offset`` counts from there, as OpenAI's does (the prompt and the text are one)."""
    tools: OfferedTools = NO_TOOLS
    """The functions the request offers as tools, unless ``tool_choice`` is ``"none"``: a call the
    upstream left as text in the content is repaired only into a call of one of these (tool_text)."""
    reasoning_field: str = "reasoning_content"
    """The field the reasoning goes out in (``--reasoning-field``, Q39)."""
    names_stop: bool = False
    """Whether the client's protocol names the stop sequence that ended the text (the Messages API's
    ``stop_sequence``): the finish chunk then carries it as ``stop_reason`` (vLLM's name for it), for
    the protocol's output to read; a chat client never sees that key."""
    generates: bool = True
    """False for ``max_tokens: 0`` (a prompt scored with ``echo``): no generated text at all. The
    upstream is asked for one token (for 0 some generate without end), which an empty stop sequence,
    matching where the generated text begins, cuts off."""

    @classmethod
    def from_body(
        cls,
        endpoint: Endpoint,
        body: dict[str, Any],
        *,
        alias: str | None = None,
        reasoning_field: str = "reasoning_content",
        names_stop: bool = False,
    ) -> RequestInfo:
        """What ``body`` asks for; the model reported is ``alias`` when given, else the body's, cleaned;
        the reasoning sent in ``reasoning_field``; ``names_stop``: the client's protocol names the stop
        sequence met."""
        request = Request.from_body(endpoint, body)
        limit = request.max_tokens
        asked = request.model
        echoed, echoed_tokens = _echoed(request)
        return cls(
            endpoint=endpoint,
            model=alias or (clean_model_name(asked) if asked else None),
            stream=request.stream,
            include_usage=request.include_usage,
            max_tokens=limit if limit is not None and limit > 0 else None,
            stop=request.stop if request.generates else ("",),
            n=request.per_prompt,
            choices=max(request.per_prompt * request.prompts, 1),
            logprobs=request.logprobs,
            alternatives=endpoint != "chat" or bool(request.top_logprobs),
            echoed=echoed,
            echoed_tokens=echoed_tokens,
            prompt_chars=_prompt_chars(request) if endpoint == "completions" else 0,
            tools=OfferedTools.from_body(body) if endpoint == "chat" else NO_TOOLS,
            reasoning_field=reasoning_field,
            names_stop=names_stop and bool(request.stop),
            generates=request.generates,
        )

    def for_prompt_of(self, body: dict[str, Any]) -> RequestInfo:
        """This request's info for the request ``body`` sent for it (one of a fan-out, or a prompt asked
        again as text): the prompt its text echoes or follows is that request's own."""
        if self.endpoint != "completions":
            return self
        request = Request.from_body(self.endpoint, body)
        echoed, echoed_tokens = _echoed(request)
        return dataclasses.replace(
            self, echoed=echoed, echoed_tokens=echoed_tokens, prompt_chars=_prompt_chars(request)
        )

    @property
    def object_name(self) -> str:
        return "chat.completion.chunk" if self.endpoint == "chat" else "text_completion"

    @property
    def body_object_name(self) -> str:
        return "chat.completion" if self.endpoint == "chat" else "text_completion"
