"""The core's normalized chat output written as a Responses API answer (``POST /v1/responses``).

The proxy's response writer (proxy/writer.py) runs exactly as for chat completions (held status,
coalesced writes, cancel on disconnect, the upstream's failure after the first byte), and the backend
writes its chat chunks through the same output; this output only changes what the chunks become:
Responses stream events (``event: TYPE`` and ``data: JSON`` per event, as OpenAI sends them; the one
encoder of them, ``encode_events``), ending with one terminal event, ``response.failed`` where the chat
stream would have ended with an error event; or a whole ``Response`` object.

The events that repeat a text gone to a file (events.py, protocols/spooled_text.py) are written as
``Pieces``, the text escaped into them a piece at a time: the same bytes ``named_events`` would write
with the text in place. 200 MiB of text through the proxy: 2,276 MB peak RSS before (2,503 MB stored),
60 MB after (64 MB stored), 7 MB over its size at rest (bench/hostile_load.py shape 6; docs/responses.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from conformance.api_errors import APIError

from ..front_end import NamedEventOutput, Pieces, named_events, pieces_of
from ..spooled_text import SpooledJSON, TextSpool
from .store_base import Store
from .stored import remember, remember_terminal
from .translation import ChatTranslation

__all__ = ["WHOLE_TEXT_EVENTS", "ResponsesOutput", "written_events"]

WHOLE_TEXT_EVENTS = frozenset(
    {
        "response.output_text.done",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
        "response.incomplete",
        "response.failed",
    }
)
"""The events that may repeat an item's whole text: the only ones a spooled text's placeholder is in."""


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
        self._ending_sent = False
        """Whether a piece of the stream's last events went out (``cut`` cannot add a whole event then)."""
        self._events = translation.events(model)
        super().__init__(self._events)

    @property
    def response(self) -> dict[str, Any] | None:
        """The final Response of a stream, once it ended (with the placeholders of ``spools``)."""
        return self._events.response

    def opening(self, chunks: list[dict[str, Any]]) -> bytes | Pieces:
        events = self._maker.start() + self._fed(chunks)
        self._note_failure()
        return self._written(events)

    def events(self, chunks: list[dict[str, Any]]) -> bytes | Pieces:
        events = self._fed(chunks)
        self._note_failure()
        if not self._events.spools:  # the per-chunk path of every usual stream: as NamedEventOutput's
            return named_events(events)
        return self._written(events)

    async def tail(self, failure: dict[str, Any] | None, usage: dict[str, Any] | None) -> bytes | Pieces:
        events = self._events.fail(failure) if failure is not None else self._events.finish(usage)
        if failure is None:
            self._note_failure()  # its end failed in its stead (events.py: ``finish``)
        self._ending = events
        if self._store is not None:  # before the client has the end: its next request may name it
            events = await remember_terminal(self._store, events, self._items, self._events.spools)
        written = self._written(events)
        if isinstance(written, bytes):
            return written
        return Pieces(self._noted(written))

    def cut(self, error: dict[str, Any]) -> bytes:
        # Cut while its end was being stored: that end, numbered already, is the stream's last words
        # (read whole: a shutdown's last message is one); cut while it was being sent in pieces, nothing
        # more can be said inside the event under way: b"", and the writer closes the connection
        # (proxy/writer.py, HeldResponse), as a client's SSE parser drops an event that never ends.
        if self._ending_sent:
            return b""
        if self._ending is not None:
            return b"".join(pieces_of(self._written(self._ending)))
        return named_events([self._events.error(error)])

    async def body(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self._translation.response({**body, "model": self._model or body.get("model")})
        if self._store is not None:
            response = await remember(self._store, response, self._items)
        return response

    def _note_failure(self) -> None:
        # A text that could not be kept ends the stream (events.py): said once its writer has what the
        # chunks made, sequence numbers and all, so that its end (``tail``) follows them without a gap.
        if self.failure is None and (failure := self._events.failed_spool()) is not None:
            self.failure = APIError.make(failure, 500)

    def _written(self, events: list[dict[str, Any]]) -> bytes | Pieces:
        return written_events(events, self._events.spools)

    def _noted(self, pieces: Pieces) -> Iterator[bytes]:
        for piece in pieces:
            self._ending_sent = True
            yield piece


def written_events(events: list[dict[str, Any]], spools: dict[str, TextSpool]) -> bytes | Pieces:
    """``named_events(events)``, or its pieces where a spooled text is in them."""
    if not spools or not any(event["type"] in WHOLE_TEXT_EVENTS for event in events):
        return named_events(events)  # every usual stream, and every delta of a long one
    return Pieces(_spooled_events(events, spools))


def _spooled_events(events: list[dict[str, Any]], spools: dict[str, TextSpool]) -> Iterator[bytes]:
    """The bytes ``named_events(events)`` would be with the spooled texts in place, in pieces."""
    for event in events:
        if event["type"] not in WHOLE_TEXT_EVENTS:
            yield named_events([event])
            continue
        yield b"event: " + event["type"].encode() + b"\ndata: "
        yield from SpooledJSON(event, spools).pieces()
        yield b"\n\n"
