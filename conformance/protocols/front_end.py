"""A wire protocol served over the core: what its front-end does with a client's request and with the
core's answer to it.

The core (the proxy's normalizer, sources and emulations; the bundled backend's engine) serves one
protocol of its own: OpenAI's chat completions (and its legacy completions), whose normalized chunks it
repairs and writes. Every other protocol is a translation over it, both ways:

- ``FrontEnd.translate`` reads the client's body and gives a :class:`Translation`: the core request
  (a chat or completions body) and how to write the core's answer back;
- ``Translation.output`` gives the :class:`Output` of one response: the normalized chunks (or whole
  body) as this protocol's stream events (or body), its terminal event, its cut on shutdown;
- ``FrontEnd.error`` words an error of the core (an upstream's refusal, a limit) in the protocol's own
  error body; errors of the translation itself come out of ``translate`` worded already.

A protocol that an upstream may speak itself (the Responses API on llama-server) also names its path
there and gives a :class:`NativeStream`: the proxy then sends the client's body to that path and the
protocol normalizes what comes back (``Translation.native``).

A protocol may also have a WebSocket mode on its path (:class:`SocketRoute`: the Responses API's, issue
38), whose turns each server answers through its own generating route (``Answering``), so that a turn
is served exactly as the same HTTP request would be.

The proxy and the backend each serve a table of front-ends (proxy/routes.py, backend/routes.py); the
judge reads the same protocol's :class:`conformance.protocols.wire.WireProtocol`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from conformance import jsoncodec
from conformance.api_errors import APIError
from conformance.request import Endpoint
from conformance.request_validation import parse_request
from conformance.sse import DONE_EVENT, encode_data

from .wire import WireProtocol

__all__ = [
    "CHUNKS",
    "Answering",
    "CoreFrontEnd",
    "CountRoute",
    "DataLines",
    "EventMaker",
    "FrontEnd",
    "NamedEventOutput",
    "NativeCall",
    "NativeStream",
    "Output",
    "Pieces",
    "SocketRoute",
    "StateRoute",
    "Translation",
    "named_events",
    "pieces_of",
    "with_stop_named",
]

_dumps = jsoncodec.dumps


class Pieces:
    """A body part too long to be held as one ``bytes``, made a piece at a time as it is read: the
    events that repeat a Response's spooled text (protocols/spooled_text.py). Its reader sends each
    piece before it takes the next."""

    __slots__ = ("_pieces",)

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self._pieces = pieces

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._pieces)


def pieces_of(part: bytes | Pieces) -> Iterable[bytes]:
    """A body part as pieces: ``bytes`` is one."""
    return (part,) if isinstance(part, bytes) else part


class Output:
    """How the core's normalized output reaches the client of one protocol; one instance per response.

    The per-chunk methods (``opening``, ``events``) are the hot path and do not wait; ``tail`` and
    ``body`` may (a Response is stored before the client gets its end: protocols/responses/output.py).
    A stream's parts are ``bytes``, or ``Pieces`` where one is too long to hold (its writer sends them
    in turn: ``pieces_of``).
    """

    synthesizes = True
    """Whether a whole answer (a JSON body) becomes a stream for a client that asked for one: the core's
    chunks can be made from a body; a protocol's native body (``NativeCall``) goes out as it came."""

    def opening(self, chunks: list[dict[str, Any]]) -> bytes | Pieces:
        """The stream's first body part: the source's first chunks."""
        raise NotImplementedError

    def events(self, chunks: list[dict[str, Any]]) -> bytes | Pieces:
        """The body part for a batch of chunks after the first."""
        raise NotImplementedError

    async def tail(self, failure: dict[str, Any] | None, usage: dict[str, Any] | None) -> bytes | Pieces:
        """The stream's last body part: its end, or the error (an OpenAI error body) that broke it off."""
        raise NotImplementedError

    failure: APIError | None = None
    """An error that ends the stream after the part just made (a Response's text the server could not
    keep: protocols/spooled_text.py), its writer then writing ``tail`` with it; None, the usual (read
    after each part: an attribute, for the per-chunk path)."""

    def prompt_counted(self, tokens: int) -> None:
        """The prompt's tokens, told before the opening where the protocol's stream opens with them
        (``Translation.states_prompt_tokens``); the other outputs have no use for them."""

    def cut(self, error: dict[str, Any]) -> bytes:
        """The last event of a stream cut where it stands (the shutdown deadline came outside the wait
        for the upstream, where ``tail`` would not be in order): ``error``, an OpenAI error body."""
        raise NotImplementedError

    async def body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The JSON body for a whole answer (``body``: the core's, normalized)."""
        raise NotImplementedError


class EventMaker(Protocol):
    """A protocol's state machine of one stream: its first events, then each chunk's."""

    def start(self) -> list[dict[str, Any]]: ...

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]: ...


class NamedEventOutput(Output):
    """An output whose stream is the events a protocol's state machine makes of the chunks, each named
    on its ``event:`` line (``named_events``): the Responses API's and the Messages API's."""

    def __init__(self, events: EventMaker) -> None:
        self._maker = events

    def _fed(self, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        feed = self._maker.feed
        return [event for chunk in chunks for event in feed(chunk)]

    def opening(self, chunks: list[dict[str, Any]]) -> bytes | Pieces:
        return named_events(self._maker.start() + self._fed(chunks))

    def events(self, chunks: list[dict[str, Any]]) -> bytes | Pieces:
        return named_events(self._fed(chunks))


def _data_lines(chunks: list[dict[str, Any]]) -> bytes:
    # Compact JSON never holds a raw line end (both encoders escape them), so each chunk is one data
    # line without encode_data's check; most batches hold one chunk.
    if len(chunks) == 1:
        return b"data: " + _dumps(chunks[0]) + b"\n\n"
    return b"".join([b"data: " + _dumps(chunk) + b"\n\n" for chunk in chunks])


_EVENT_HEADS: dict[str, bytes] = {}


def _event_head(kind: str) -> bytes:
    head = _EVENT_HEADS.get(kind)
    if head is None:
        if len(_EVENT_HEADS) < 256:  # a protocol's event types: a few dozen
            _EVENT_HEADS[kind] = head = b"event: " + kind.encode() + b"\ndata: "
        else:
            head = b"event: " + kind.encode() + b"\ndata: "
    return head


def named_events(events: list[dict[str, Any]]) -> bytes:
    """Events with an ``event:`` line naming each by its ``type``, then its ``data:`` line, as OpenAI's
    Responses streams and Anthropic's Messages streams frame them (compact JSON holds no raw line end)."""
    if len(events) == 1:  # a delta: most batches
        event = events[0]
        return _event_head(event["type"]) + _dumps(event) + b"\n\n"
    return b"".join([_event_head(event["type"]) + _dumps(event) + b"\n\n" for event in events])


class DataLines(Output):
    """The core's own wire: each chunk one ``data:`` line, ``data: [DONE]`` at the end, as OpenAI streams
    chat completions and completions; an error that breaks a stream off is its last data line (which
    openai-python raises as ``APIError``), with no ``[DONE]`` after it."""

    def opening(self, chunks: list[dict[str, Any]]) -> bytes:
        return _data_lines(chunks)

    def events(self, chunks: list[dict[str, Any]]) -> bytes:
        # Each chunk goes out alone as one line, whatever came before it: a source may write the chunks
        # that need no repair itself (``Source.next_lines``, proxy/sources/upstream.py).
        return _data_lines(chunks)

    async def tail(self, failure: dict[str, Any] | None, usage: dict[str, Any] | None) -> bytes:
        return DONE_EVENT if failure is None else encode_data(_dumps(failure))

    def cut(self, error: dict[str, Any]) -> bytes:
        return encode_data(_dumps(error))

    async def body(self, body: dict[str, Any]) -> dict[str, Any]:
        return body


CHUNKS = DataLines()
"""The one :class:`DataLines` output: it holds no state."""


class NativeStream(Protocol):
    """One answer of an upstream that speaks the protocol itself, normalized event by event by the
    protocol (protocols/responses/native.py for the Responses API)."""

    answer_name: str
    """What a whole answer is called in the protocol ("Message", "Response"), for the errors about one."""

    @property
    def ended(self) -> bool:
        """Whether the protocol's terminal event was fed."""

    def answers(self, body: Mapping[str, Any]) -> bool:
        """Whether a whole body is the protocol's answer: not an error, nor another protocol's answer
        (a chat completion sent to a client of the Messages API)."""

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The events to send for one upstream event (none, once ``ended``)."""

    def fail(self, error: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """The events that end a stream broken off before its terminal event (``error``: an OpenAI
        error body saying why)."""

    def whole(self, body: dict[str, Any]) -> dict[str, Any]:
        """An upstream's whole (non-streamed) answer, normalized."""

    def encode(self, events: list[dict[str, Any]]) -> bytes | Pieces:
        """Events as the protocol frames them on the wire (in pieces where they hold a text too long
        to hold whole)."""

    async def kept(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``events`` once what they finish is stored, where the protocol keeps answers (before the
        client has them: its next request may name them)."""

    async def kept_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """A whole answer once stored, likewise."""


@dataclass(frozen=True, slots=True)
class NativeCall:
    """A request as it goes to an upstream that speaks the protocol itself."""

    path: bytes
    """The upstream's path for it (``/v1/responses``)."""
    body: dict[str, Any]
    """What is sent there: the client's body, with what only the core knows (a stored conversation)
    written in; the proxy names the model as the upstream serves it."""
    stream: Callable[[str | None, Mapping[str, float] | None], NativeStream]
    """The normalizer of one answer, given the model name the client is shown and the upstream's
    sampling defaults where the core knows them (conformance/protocols/sampling.py)."""


def with_stop_named(choice: dict[str, Any], matched: str | None) -> dict[str, Any]:
    """A finished choice of the core marked with the stop sequence that ended it, ``matched``
    (``Translation.names_stop``), as vLLM names it: ``stop_reason``, which the protocol's output reads
    (a Message's ``stop_sequence``). Only a choice that finished ``stop`` met one."""
    if matched is not None and choice.get("finish_reason") == "stop":
        choice["stop_reason"] = matched
    return choice


class Translation:
    """One client request as the core serves it."""

    def __init__(
        self,
        body: dict[str, Any] | None,
        *,
        native: NativeCall | None = None,
        refusal: Exception | None = None,
        stream: bool | None = None,
        model: Any = None,
    ) -> None:
        self.body = body
        """The core's request: a chat or completions body; None where the translation refused it."""
        self.native = native
        """How an upstream that speaks the protocol itself gets it, where the front-end has a native path."""
        self.refusal = refusal
        """Why the core cannot serve it (an ``APIError`` in the protocol's words), kept for a native
        upstream that may take what the translation refuses (``FrontEnd.translate(keep_refusal=True)``)."""
        self.stream = stream if stream is not None else bool(body and body.get("stream") is True)
        """Whether the client asked for a stream."""
        self.model = model if body is None else body.get("model")
        """The model the client asked for (the core request's, where there is one)."""

    states_sampling = False
    """Whether the protocol's answer states the sampling it was generated with (a Response does): the
    core then gives ``output`` its defaults, or asks with every sampling field named where it does not
    know them (conformance/protocols/sampling.py)."""

    names_stop = False
    """Whether the protocol's answer names the stop sequence that ended the text (a Message's
    ``stop_sequence``): the core then marks its finished choice with it (``with_stop_named``); a chat
    client never gets that mark."""

    states_prompt_tokens = False
    """Whether the protocol's stream opens with the prompt's token count (a Message's ``message_start``
    usage, where Claude Code's context meter reads it, Q88), which the core's chunks bring only at their
    end: the core then counts the prompt before the opening (``Output.prompt_counted``)."""

    def output(self, model: str | None, sampling: Mapping[str, float] | None = None) -> Output:
        """The output of the answer, naming the model ``model`` (None: as the answer names it);
        ``sampling``: the core's sampling defaults, where the protocol states them and the core knows."""
        return CHUNKS

    def shortened(self, refused: APIError) -> Translation | None:
        """This request made shorter where the core's request was ``refused`` as past the model's
        context (``context_length_exceeded``) and the protocol asks for that (a Responses request's
        ``truncation: "auto"``); None: the refusal is the client's answer."""
        return None


@dataclass(frozen=True, slots=True)
class CountRoute:
    """A protocol's route that counts a request's prompt tokens without generating an answer
    (``POST /v1/messages/count_tokens``): ``read`` translates the body as for generating (its refusals
    worded in the protocol's terms), the server counts the prompt of the core's request as its model
    reads it, and ``answer`` words the count."""

    path: str
    read: Callable[[bytes], Awaitable[Translation]]
    answer: Callable[[int], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class StateRoute:
    """A route of the protocol's own state (``GET /v1/responses/{id}``): the proxy and the backend both
    serve it, the proxy behind its API key."""

    path: str
    methods: tuple[str, ...]
    handle: Callable[[Request], Awaitable[Response]]


Answering = Callable[["FrontEnd"], ASGIApp]
"""A server's generating route for a front-end, as the ASGI app of one HTTP request to the front-end's
path: what a WebSocket turn is answered by (the proxy's behind its access log, the backend's)."""


@dataclass(frozen=True, slots=True)
class SocketRoute:
    """A protocol's WebSocket mode on ``path`` (the Responses API's on ``/v1/responses``, issue 38). The
    server hands each socket to ``serve`` (the proxy once the handshake carried its API key), with its
    ``Answering``: ``serve`` accepts the socket and answers each turn as an HTTP request to the server's
    own generating route, so that limits, failover, repairs and logging are those of HTTP."""

    path: str
    serve: Callable[[WebSocket, Answering], Awaitable[None]]


class FrontEnd:
    """One wire protocol served over the core (see the module's docstring). Its description's parts
    that every request reads are its own attributes: the generating route's per-request path."""

    def __init__(
        self,
        wire: WireProtocol,
        routes: tuple[StateRoute, ...] = (),
        counting: CountRoute | None = None,
        socket: SocketRoute | None = None,
    ) -> None:
        self.wire = wire
        self.routes = routes
        self.counting = counting
        """Its route that counts a prompt's tokens, if it has one."""
        self.socket = socket
        """Its WebSocket mode, if it has one."""
        self.name = wire.name
        self.paths = wire.paths
        self.endpoint: Endpoint = wire.endpoint
        self.native_path = wire.paths[0] if wire.native else None
        """The path of an upstream that speaks this protocol itself (its own); None: always translated."""

    async def translate(self, raw: bytes, *, keep_refusal: bool = False) -> Translation:
        """The client's body as the core's request; raises an ``APIError`` worded in this protocol's
        terms (``keep_refusal``: a refusal of the translation alone is kept in the ``Translation``
        instead, where the request may still go to a native upstream)."""
        raise NotImplementedError

    def error(self, body: dict[str, Any], status: int) -> dict[str, Any]:
        """An error of the core (an OpenAI error body, answered with ``status``) as this protocol's
        error body (``WireProtocol.error``, which the answers written before the route use too)."""
        worded = self.wire.error
        return body if worded is None else worded(body, status)

    def redact_stored(self, redact: Callable[[str], str]) -> None:
        """Where the protocol keeps answers (a store), what it keeps goes through ``redact`` first: the
        proxy cuts every upstream key out. Nothing to do for a protocol that keeps none."""

    async def aclose(self) -> None:
        """Let go of the protocol's state (its store), when the server stops."""


_T = TypeVar("_T")

OFF_LOOP_BYTES = 256 * 1024
"""A body larger than this is parsed, checked and translated in a worker thread, so the event loop keeps
serving the other connections meanwhile (the GIL passes back to it every few milliseconds): a body of
100,000 input items under ``--max-body`` costs a second or more of CPU however linear the work (issue
32: 400,000 held the loop 18.7 s). Smaller ones, nearly every real request, stay on the loop, which
costs no thread hand-off."""


SCHEMAS_OFF_LOOP_OBJECTS = 256
"""A body with more JSON objects than this that gives JSON Schemas (a function's ``parameters``, a
structured output's ``schema``, a Messages tool's ``input_schema``) is read off the loop too: a schema
not seen before is checked against the meta-schema (conformance/given_schemas.py), 20-60 us a subschema,
and 32 KB of ``{"allOf": [{}, {}, ...]}`` (10,600 of them) held the loop for 250 ms. Counted by its
opening braces, a scan at memory speed; a real agent's tools pass it (checked in a thread once, then
known)."""


def is_large(raw: bytes) -> bool:
    if len(raw) > OFF_LOOP_BYTES:
        return True
    has_schemas = b'"parameters"' in raw or b'schema"' in raw
    return has_schemas and raw.count(b"{") > SCHEMAS_OFF_LOOP_OBJECTS


async def off_the_loop(work: Callable[[], _T], *, heavy: bool) -> _T:
    """``work()``, in a worker thread where it is ``heavy`` (``is_large`` of the body it works on)."""
    if not heavy:
        return work()
    return await asyncio.to_thread(work)


class CoreFrontEnd(FrontEnd):
    """The front-end of a protocol that is the core's own (chat completions, completions): the client's
    body, checked against the protocol's request schema, is the core's request."""

    async def translate(self, raw: bytes, *, keep_refusal: bool = False) -> Translation:
        parsed = await off_the_loop(lambda: parse_request(self.wire.request_schema, raw), heavy=is_large(raw))
        return Translation(parsed)
