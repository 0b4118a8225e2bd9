"""The core's normalized chat output written as a Responses API answer (``POST /v1/responses``).

The proxy's response writer (proxy/writer.py) runs exactly as for chat completions (held status,
coalesced writes, cancel on disconnect, the upstream's failure after the first byte), and the backend
writes its chat chunks through the same output; this output only changes what the chunks become:
Responses stream events (``event: TYPE`` and ``data: JSON`` per event, as OpenAI sends them; the one
encoder of them, ``encode_events``), ending with one terminal event, ``response.failed`` where the chat
stream would have ended with an error event; or a whole ``Response`` object.
"""

from __future__ import annotations

from typing import Any

from ..front_end import NamedEventOutput, named_events
from .store_base import Store
from .stored import remember, remember_terminal
from .translation import ChatTranslation

__all__ = ["ResponsesOutput"]


class ResponsesOutput(NamedEventOutput):
    """One Responses answer made of the normalized chat output of the request ``translation`` made."""

    def __init__(
        self,
        translation: ChatTranslation,
        model: str | None,
        store: Store | None = None,
        items: list[Any] | None = None,
    ) -> None:
        self._translation = translation
        self._model = model
        self._store = store
        self._items = items or []
        """The whole input the Response is generated from, stored with it (store.py)."""
        self._ending: list[dict[str, Any]] | None = None
        """The stream's last events, once made (``tail``)."""
        self._events = translation.events(model)
        super().__init__(self._events)

    @property
    def response(self) -> dict[str, Any] | None:
        """The final Response of a stream, once it ended."""
        return self._events.response

    async def tail(self, failure: dict[str, Any] | None, usage: dict[str, Any] | None) -> bytes:
        events = self._events.fail(failure) if failure is not None else self._events.finish(usage)
        self._ending = events
        if self._store is not None:  # before the client has the end: its next request may name it
            events = await remember_terminal(self._store, events, self._items)
        return named_events(events)

    def cut(self, error: dict[str, Any]) -> bytes:
        # Cut while its end was being stored: that end, numbered already, is the stream's last words.
        if self._ending is not None:
            return named_events(self._ending)
        return named_events([self._events.error(error)])

    async def body(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self._translation.response({**body, "model": self._model or body.get("model")})
        if self._store is not None:
            response = await remember(self._store, response, self._items)
        return response
