"""Anthropic's Messages API's front-end: a ``POST /v1/messages`` body (``?beta=true``, as Claude Code
asks, alike) as a chat request, the chat output as a Message, errors in Anthropic's shape, ``POST
/v1/messages/count_tokens``, and an upstream's own endpoint where one serves it natively.

The request is read as the judge reads it (``schemas/messages_request.json``), then as the chat
request it becomes, checked as a chat request is; every refusal is Anthropic's error body, its message
naming the Messages parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.api_errors import APIError
from conformance.request_validation import check_request, parse_json_object, validate_request

from ..front_end import (
    CountRoute,
    FrontEnd,
    NativeCall,
    NativeStream,
    Output,
    Translation,
    is_large,
    off_the_loop,
)
from .errors import reject_field
from .native import NativeMessages
from .output import MessagesOutput
from .protocol import MESSAGES
from .request import COUNT_PATH, PATH, SCHEMA
from .translation import ChatTranslation, translate_request

__all__ = ["MessagesFrontEnd", "MessagesTranslation"]

NATIVE_PATH = PATH


class MessagesTranslation(Translation):
    """A Messages request as the core serves it, and how its answer is written."""

    names_stop = True  # a Message's stop_reason "stop_sequence" and its stop_sequence
    states_prompt_tokens = True  # message_start's usage.input_tokens

    def __init__(self, asked: dict[str, Any], chat: ChatTranslation | None, refusal: APIError | None) -> None:
        native = NativeCall(NATIVE_PATH.encode(), asked, self._native_answer)
        super().__init__(
            None if chat is None else chat.chat,
            native=native,
            refusal=refusal,
            stream=asked.get("stream") is True,
            model=asked.get("model"),
        )
        self._chat = chat

    def output(self, model: str | None, sampling: Mapping[str, float] | None = None) -> Output:
        assert self._chat is not None, "a refused translation has no chat output"
        return MessagesOutput(model, self._chat.stop_sequences, self._chat.prefill)

    def _native_answer(self, model: str | None, sampling: Mapping[str, float] | None = None) -> NativeStream:
        return NativeMessages(model, "" if self._chat is None else self._chat.prefill)


class MessagesFrontEnd(FrontEnd):
    """``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` over the core."""

    def __init__(self) -> None:
        counting = CountRoute(COUNT_PATH, self._count_request, lambda tokens: {"input_tokens": tokens})
        super().__init__(MESSAGES, counting=counting)

    async def translate(self, raw: bytes, *, keep_refusal: bool = False) -> Translation:
        return await off_the_loop(
            lambda: self._translated(self._parsed(raw), keep_refusal), heavy=is_large(raw)
        )

    async def _count_request(self, raw: bytes) -> Translation:
        """A count_tokens body: a Messages request without ``max_tokens`` (Anthropic's count_tokens
        takes none) and never streamed, translated as one, off the loop as ``translate`` is."""
        return await off_the_loop(
            lambda: self._translated(self._counted(raw), keep_refusal=False), heavy=is_large(raw)
        )

    def _counted(self, raw: bytes) -> dict[str, Any]:
        asked = {key: value for key, value in self._parsed(raw).items() if key != "stream"}
        asked.setdefault("max_tokens", 1)
        return asked

    def _parsed(self, raw: bytes) -> dict[str, Any]:
        try:
            return parse_json_object(raw)
        except APIError as refused:
            raise self._worded(refused) from None

    def _translated(self, asked: dict[str, Any], keep_refusal: bool) -> Translation:
        try:
            validate_request(SCHEMA, asked, reject_field)
            chat = translate_request(asked)
            validate_request("chat_completion_request", chat.chat)
            check_request(chat.chat)
        except APIError as refused:
            worded = refused if refused.body.get("type") == "error" else self._worded(refused)
            if not keep_refusal:
                raise worded from None
            return MessagesTranslation(asked, None, worded)
        return MessagesTranslation(asked, chat, None)

    def _worded(self, refused: APIError) -> APIError:
        return type(refused)(refused.status, self.error(refused.body, refused.status))
