"""A protocol's request sent to an upstream that speaks the protocol itself, its answer normalized by the
protocol (``--responses native``, or ``auto`` where the upstream answers: llama-server's
``/v1/responses``).

The source forwards the client's body (with what only the proxy knows written in: a stored
conversation, the model as the upstream serves it) to the upstream's path for it, and hands every event
to the protocol's :class:`conformance.protocols.front_end.NativeStream`, which numbers, completes and
stores them; a JSON answer is normalized and stored whole. It runs under the same response writer as
every other source (held status, first-byte timeout, coalesced writes, cancel on disconnect, retry on
another replica before the first byte), and its output writes the protocol's events as they are: a
stream that breaks off before the protocol's terminal event ends with the protocol's failure events
(``response.failed``), never cut.
"""

from __future__ import annotations

from typing import Any

from conformance import jsoncodec
from conformance.api_errors import APIError
from conformance.protocols.front_end import NativeStream, Output, Pieces, pieces_of
from conformance.sse import SSELineTooLong, SSEParser

from ..errors import error_from_payload, is_error_payload
from ..upstream import MAX_JSON_BODY, Upstream, UpstreamStream
from .base import Source

__all__ = ["NativeOutput", "NativeSource"]


class NativeOutput(Output):
    """A native answer's events, written as the protocol frames them (they are the protocol's already)."""

    synthesizes = False  # a whole native answer goes out as the upstream sent it: JSON

    def __init__(self, answer: NativeStream) -> None:
        self._answer = answer

    def opening(self, chunks: list[dict[str, Any]]) -> bytes | Pieces:
        return self._answer.encode(chunks)

    def events(self, chunks: list[dict[str, Any]]) -> bytes | Pieces:
        return self._answer.encode(chunks)

    async def tail(self, failure: dict[str, Any] | None, usage: dict[str, Any] | None) -> bytes | Pieces:
        answer = self._answer
        if answer.ended:
            return b""  # its terminal event went out with the last events
        if failure is None:
            failure = APIError.make("the upstream server ended the stream without a terminal event", 502).body
        return answer.encode(await answer.kept(answer.fail(failure)))

    def cut(self, error: dict[str, Any]) -> bytes:
        answer = self._answer
        return b"" if answer.ended else b"".join(pieces_of(answer.encode(answer.fail(error))))

    async def body(self, body: dict[str, Any]) -> dict[str, Any]:
        return body  # normalized and stored by the source


class NativeSource(Source):
    """One request to an upstream's own endpoint of a protocol (see the module's docstring)."""

    def __init__(
        self,
        upstream: Upstream,
        path: bytes,
        body: bytes,
        headers: list[tuple[bytes, bytes]],
        answer: NativeStream,
        *,
        streamed: bool,
        max_line_bytes: int,
    ) -> None:
        """``streamed``: whether the client asked for a stream (an upstream that streams what was asked
        without is refused: its events are no whole answer)."""
        self._upstream = upstream
        self._path = path
        self._body = body
        self._headers = headers
        self._answer = answer
        self._streamed = streamed
        self._parser = SSEParser(max_line_bytes=max_line_bytes)
        self._stream: UpstreamStream | None = None
        self._fed = False  # an event of the protocol came (chat chunks are none: they have no type)
        self.output = NativeOutput(answer)

    async def start(self) -> list[dict[str, Any]]:
        stream = self._stream = await self._upstream.forward("POST", self._path, self._body, self._headers)
        self.upstream_status = stream.status
        if stream.status >= 300:
            raise await stream.error()
        if "event-stream" not in stream.content_type:
            await self._read_whole(stream)
            return []
        if not self._streamed:
            name = self._answer.answer_name
            raise APIError.make(
                "the upstream server streamed its answer to a request asked without streaming: ask for "
                f"it with stream: true, or serve this protocol translated (no whole {name} is read from a "
                "stream)",
                502,
            )
        while (batch := await self.next_batch()) is not None:
            if batch:
                return batch
        if self._failure is not None and not self._fed:
            raise self._failure  # nothing of an answer came: the failure is the answer, before any byte
        return []

    async def _read_whole(self, stream: UpstreamStream) -> None:
        try:
            body = jsoncodec.loads(await stream.read_all(MAX_JSON_BODY))
        except ValueError:
            body = None
        answer = self._answer
        if not isinstance(body, dict) or not answer.answers(body):
            if is_error_payload(body):  # an error in a 200, as the chat route gets from some (Q21, Q45)
                raise error_from_payload(body)
            raise APIError.make(f"the upstream server sent a body that is not a {answer.answer_name}", 502)
        self.body = await answer.kept_body(answer.whole(body))

    async def next_batch(self) -> list[dict[str, Any]] | None:
        """The next events to send; None once the protocol's terminal event went, or the stream ended
        (its failure, if it broke off, in ``failure``)."""
        answer, stream = self._answer, self._stream
        if answer.ended or stream is None:
            return None
        out: list[dict[str, Any]] = []
        try:
            data = await stream.read()
            if data is None:  # the upstream's end; without the terminal event, ``tail`` says so
                if not self._fed:
                    self._failure = APIError.make(
                        f"the upstream server's stream held no event of a {answer.answer_name}: it answered "
                        "in another protocol (serve this protocol translated)",
                        502,
                    )
                await self.aclose()
                return None
            for block in self._parser.feed(data):
                if block.data is None or block.data.strip() in ("", "[DONE]"):
                    continue
                event = jsoncodec.loads(block.data)
                if isinstance(event, dict):
                    out += answer.feed(event)
            self._fed = self._fed or bool(out)
        except SSELineTooLong:
            self._failure = APIError.make("the upstream server sent an SSE line over the size limit", 502)
        except ValueError:
            self._failure = APIError.make("the upstream server sent an event that is not valid JSON", 502)
        except APIError as raised:  # the transport's
            self._failure = raised
        if self._failure is not None:
            await self.aclose()
            return out or None  # events read before the fault go out before its failure events
        if answer.ended:  # kept before the client has the end: its next request may name it
            out = await answer.kept(out)
            await self.aclose()
        return out

    async def aclose(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.aclose()
