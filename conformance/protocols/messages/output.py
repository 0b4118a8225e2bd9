"""The core's normalized chat output written as a Messages API answer (``POST /v1/messages``): stream
events framed with their ``event:`` line, as Anthropic sends them (``named_events``), or a whole
``Message``. The proxy's response writer and the backend write through it as they do for chat."""

from __future__ import annotations

from typing import Any

from ..front_end import NamedEventOutput, Pieces, named_events
from .events import MessageEvents
from .response import message_from_chat

__all__ = ["MessagesOutput"]


class MessagesOutput(NamedEventOutput):
    """One Messages answer made of the normalized chat output of a translated request."""

    def __init__(self, model: str | None, stops: tuple[str, ...], prefill: str = "") -> None:
        """``model``: the name the client asked for (or ``--model-alias``); None where it asked none,
        which Anthropic requires but local servers serve (conformance/schemas.py): the answer then names
        the model its upstream named, as chat's and the Responses API's do (it said ``"model"``, a name
        no server has; found by black-box testing)."""
        self._model = model
        self._stops = stops
        self._prefill = prefill
        self._events = MessageEvents(model or "", stops, prefill)
        super().__init__(self._events)

    def opening(self, chunks: list[dict[str, Any]]) -> bytes | Pieces:
        named = chunks[0].get("model") if chunks else None
        if self._model is None and isinstance(named, str):
            self._events.model = named
        return super().opening(chunks)

    def prompt_counted(self, tokens: int) -> None:
        self._events.prompt_tokens = tokens

    async def tail(self, failure: dict[str, Any] | None, usage: dict[str, Any] | None) -> bytes:
        events = self._events.fail(failure) if failure is not None else self._events.finish(usage)
        return named_events(events)

    def cut(self, error: dict[str, Any]) -> bytes:
        return named_events(self._events.fail(error))

    async def body(self, body: dict[str, Any]) -> dict[str, Any]:
        return message_from_chat(body, self._model, self._stops, self._prefill)
