"""The Responses API's WebSocket mode on ``/v1/responses`` (Open Responses 2026-04-24, issue 38): a client
keeps one socket open and starts each turn with a ``response.create`` message, the body of ``POST
/v1/responses`` with a ``type`` and without ``stream``, ``stream_options`` or ``background`` (the spec
forbids the three: a socket always streams, and a background response would outlive its socket).

One piece of code serves a turn and an HTTP request alike: the message, less its ``type`` and with
``stream: true``, is the body of an HTTP request that the server's own generating route answers
in-process (``Answering``: the proxy's behind its access log, so that a turn is limited, routed, failed
over, repaired and logged as that POST would be; the backend's). Each event of that answer goes out as
one text message, the JSON its SSE ``data:`` line held; an answer that is no stream (a refusal before
the first event) is one ``error`` message, the spec's ``WebSocketErrorEvent``: ``{"type": "error",
"status", "error": {"type", "code", "message", "param"}}``. A message that is no ``response.create``
(binary, past ``--max-body``, not JSON, another ``type``, a forbidden field) is answered with one too,
and the socket stays open for the next.

An event is held whole before it goes (the spec sends each as one message, and ASGI's ``websocket.send``
takes a message whole), so that one message is bounded (``MAX_MESSAGE``), as the messages read are
(``--max-body``): an event past it (the Response of an answer of many MiB, which HTTP streaming writes a
piece at a time) is not sent, nor the rest of its turn, which is read to its end and let go; the client
gets one error message, ``websocket_message_too_large``, and the turn counts as failed.

Turns are sequential, as the spec has them: a ``response.create`` sent while another runs waits for
it, first in first out; up to ``WAITING`` are read ahead, then the socket is not read until one starts.

Connection-local state (``SocketStore``): the socket remembers its last response and the conversation
it ended, so that the next turn continues it with ``previous_response_id`` and only its new input, with
``store: false`` too (nothing of it is written anywhere); other ids are looked up in the server's
store, where only stored responses are. A reconnected client's ``store: false`` id is therefore
unknown: a 400 ``previous_response_not_found``, as over HTTP. A turn that continues the remembered
response and fails (an error message, ``response.failed``) forgets it, so that a client retries from
state it knows rather than from a response whose continuation broke. A stored response is read from the
server's store, as over HTTP (a socket that kept its own copy continued one deleted over HTTP, and stored
it again); what the sockets of one server remember of unstored ones is bounded together
(``SocketMemory``), the least recently remembered forgotten first (30 idle sockets held 1.2 GB). A
socket lasts
``CONNECTION_LIFETIME`` (the spec's 60 minutes): then, between turns, it gets an error message
``websocket_connection_limit_reached`` and is closed (1000), and the client opens another.

When the server stops, a socket closes (1012, Service Restart, as uvicorn closes it) once the turn under
way is answered, not before: uvicorn closed every socket at once, and a turn under way was cancelled
upstream as a request whose client left. The server says it stops by an ``asyncio.Event`` in the
socket scope's ``state`` under ``STOPPING`` (the proxy's: proxy/graceful.py); a turn still running at its
shutdown deadline is ended as an HTTP response is (``response.failed``), then the socket closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from starlette.types import ASGIApp, Message, Receive, Scope
from starlette.websockets import WebSocket, WebSocketDisconnect

from conformance import jsoncodec
from conformance.api_errors import APIError, quoted
from conformance.openai_errors import error_body
from conformance.request_validation import parse_json_object

from ..front_end import is_large, off_the_loop
from ..spooled_text import SpooledJSON
from .store import StoredResponse, StoredTooLarge
from .store_base import Store
from .stored import input_items

__all__ = [
    "CONNECTION_LIFETIME",
    "MAX_MESSAGE",
    "SOCKET_MEMORY",
    "STOPPING",
    "WAITING",
    "SocketMemory",
    "SocketStore",
    "error_event",
    "serve_socket",
]

log = logging.getLogger("conformant.responses")

CONNECTION_LIFETIME = 60 * 60.0
"""Seconds a socket lasts, the spec's limit: past it the socket is closed between turns."""
WAITING = 2
"""Messages read ahead of the turn that runs."""
MAX_MESSAGE = 8 * 1024 * 1024
"""Bytes of one event, at most, that a socket sends. The spec sends each event as one text message and
ASGI's ``websocket.send`` takes a message whole, so an event is in memory in several copies (its bytes,
its text, the Response read from it, the server's encoded frame) before it goes: unbounded, a 200 MiB
answer took the proxy to 1.8 GB. Measured (bench/hostile_load.py, ``run_long_socket``), an event just
under 16 MiB took it to 73 to 103 MB over its idle size, past issue 32's 100 MB; just under 8 MiB, 49 MB.
8 MiB of text is some two million tokens, past any model's output. The mirror of ``--max-body`` on the
messages read; past it, an error message points the client at HTTP streaming, which writes a long event
in pieces."""
CLOSE_NORMAL = 1000
CLOSE_SERVICE_RESTART = 1012
STOPPING = "conformant.stopping"
"""The key, in a socket scope's ``state``, of the server's stop: an ``asyncio.Event`` set when it
begins to stop (see the module's docstring)."""
_WAKE: Message = {"type": "conformant.wake"}
"""Queued when the server begins to stop, so that a socket waiting for its next message closes."""
_FORBIDDEN = ("stream", "stream_options", "background")
"""Fields of the HTTP request a ``response.create`` must not carry (the spec's schema)."""
_TERMINAL = frozenset({b"response.completed", b"response.incomplete", b"response.failed"})
_NOT_CARRIED = frozenset({b"upgrade", b"connection", b"content-length", b"content-type", b"x-request-id"})
"""Handshake headers a turn's HTTP request does not carry (nor any ``sec-websocket-*``): the socket's
own, and a request id, which each turn gets anew."""


SOCKET_MEMORY = 256 << 20
"""Bytes the sockets of one server process may remember of their unstored responses, together."""


class SocketMemory:
    """What the sockets of one server remember, bounded together: past ``most`` bytes, the socket that
    remembered least recently forgets its response (its continuation is then
    ``previous_response_not_found``, which tells the client to send the conversation again)."""

    def __init__(self, most: int = SOCKET_MEMORY) -> None:
        self.most = most
        self.total = 0
        self._held: dict[SocketStore, int] = {}  # (in the order they were remembered: oldest first)

    def hold(self, owner: SocketStore, size: int) -> None:
        self.release(owner)
        self._held[owner] = size
        self.total += size
        while self.total > self.most and (oldest := next(iter(self._held))) is not owner:
            oldest.last = None
            self.release(oldest)

    def release(self, owner: SocketStore) -> None:
        self.total -= self._held.pop(owner, 0)


class SocketStore:
    """The store a socket's turns read and write: the server's (``shared``), with the socket's last
    unstored response in front of it (see the module's docstring)."""

    def __init__(self, shared: Store, memory: SocketMemory) -> None:
        self.shared = shared
        self.memory = memory
        self.last: StoredResponse | None = None
        """The socket's last unstored response, with the whole conversation it ended."""
        self.continued: StoredResponse | None = None
        """What the running turn's ``previous_response_id`` named, once looked up."""

    @property
    def redact(self) -> Callable[[str], str]:
        return self.shared.redact

    @redact.setter
    def redact(self, redact: Callable[[str], str]) -> None:
        self.shared.redact = redact

    @property
    def location(self) -> str:
        return self.shared.location

    async def save(self, response: Mapping[str, Any] | SpooledJSON, input_items: Sequence[Any]) -> bool:
        return await self.shared.save(response, input_items)

    async def load(self, response_id: str, most: int | None = None) -> StoredResponse | None:
        last = self.last
        found = last if last is not None and last.response.get("id") == response_id else None
        if found is None:
            found = await self.shared.load(response_id, most)
        elif most is not None and found.size > most:
            raise StoredTooLarge(found.size)
        self.continued = found
        return found

    async def delete(self, response_id: str) -> bool:
        return await self.shared.delete(response_id)

    async def aclose(self) -> None:
        """Nothing: the server closes its store; the socket's memory goes with the socket."""

    def open_now(self) -> None:
        """Nothing: the server opened its store."""

    def remember(self, response: dict[str, Any], asked: Mapping[str, Any], size: int) -> None:
        """Keep a turn's ``response`` as the socket's last: what its request continued, then its input
        (``asked``), make the conversation its output ends. ``size``: the bytes of the request and of the
        Response, as the turn sent them (written again, each string of a long non-ASCII text would keep
        orjson's UTF-8 copy of itself, as long as the socket remembers it)."""
        if response.get("store") is True:  # the store has it, and a DELETE there must hold here too
            self.last = None
            self.memory.release(self)
            return
        continued = self.continued if asked.get("previous_response_id") is not None else None
        earlier = continued.conversation if continued is not None else []
        size += continued.size if continued is not None else 0
        self.last = StoredResponse(response, [*earlier, *input_items(asked)], size)
        self.memory.hold(self, size)

    def forget(self, response_id: Any = None) -> None:
        """A continuation of ``response_id`` failed (None: the socket closed): the socket no longer
        continues it."""
        if self.last is not None and response_id in (None, self.last.response.get("id")):
            self.last = None
            self.memory.release(self)


def error_event(status: int, body: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI error body answered with ``status``, as the spec's ``WebSocketErrorEvent``: its
    ``code`` and ``message`` are strings always (OpenAI's own ``code`` may be null: its ``type``
    then names the error)."""
    inner = body.get("error")
    inner = inner if isinstance(inner, Mapping) else {}
    kind = inner.get("type") if isinstance(inner.get("type"), str) else None
    kind = kind or ("server_error" if status >= 500 else "invalid_request_error")
    code = inner.get("code") if isinstance(inner.get("code"), str) else kind
    message = inner.get("message") if isinstance(inner.get("message"), str) else "the request failed"
    param = inner.get("param") if isinstance(inner.get("param"), str) else None
    error = {"type": kind, "code": code, "message": message, "param": param}
    return {"type": "error", "status": status, "error": error}


def _refusal(status: int, message: str, *, code: str, param: str | None = None) -> dict[str, Any]:
    return error_event(status, error_body(message, status, param=param, code=code))


async def serve_socket(
    websocket: WebSocket, app: ASGIApp, store: SocketStore, max_bytes: int | None, lifetime: float
) -> None:
    """Accept ``websocket`` and serve its turns through ``app`` (the server's generating route for a
    front-end on ``store``) until the client leaves or the socket's ``lifetime`` ends."""
    await websocket.accept()
    socket = _Socket(websocket, app, store, max_bytes)
    stopping = (websocket.scope.get("state") or {}).get(STOPPING)
    reader = asyncio.create_task(socket.read())
    waker = asyncio.create_task(socket.wake_on(stopping)) if isinstance(stopping, asyncio.Event) else None
    try:
        ended = await socket.serve(asyncio.get_running_loop().time() + lifetime, stopping)
        if ended == "stopping":
            await socket.close(CLOSE_SERVICE_RESTART, "server_shutting_down")
        elif ended == "lifetime":
            await socket.send_event(
                _refusal(
                    400,
                    "Responses WebSocket connection limit reached (60 minutes): open a new WebSocket "
                    "connection to continue.",
                    code="websocket_connection_limit_reached",
                )
            )
            await socket.close(CLOSE_NORMAL, "websocket_connection_limit_reached")
    finally:
        reader.cancel()
        if waker is not None:
            waker.cancel()


@dataclass(slots=True)
class _Request:
    """A ``response.create`` as the HTTP request that answers it."""

    body: bytes
    asked: dict[str, Any]


class _Socket:
    """One socket's turns (see the module's docstring)."""

    def __init__(self, websocket: WebSocket, app: ASGIApp, store: SocketStore, max_bytes: int | None) -> None:
        self.websocket = websocket
        self.app = app
        self.store = store
        self.max_bytes = max_bytes
        self.messages: asyncio.Queue[Message | None] = asyncio.Queue()
        self.room = asyncio.Semaphore(WAITING)
        """Messages read and not yet taken by a turn."""
        self.gone = asyncio.Event()
        """Set when the client left (or the server closed the socket)."""

    async def read(self) -> None:
        """Read messages while there is room; None queued when the socket closes."""
        try:
            while True:
                await self.room.acquire()
                message = await self.websocket.receive()
                if message["type"] != "websocket.receive":
                    return
                self.messages.put_nowait(message)
                # Not held while the next is awaited: an idle socket kept its last message (15 MiB of
                # input: about 25 MB a socket, past the bound on what sockets remember).
                del message
        except (WebSocketDisconnect, RuntimeError, OSError):
            return  # a socket the server closed: nothing more to read
        finally:
            self.gone.set()
            self.messages.put_nowait(None)

    async def wake_on(self, stopping: asyncio.Event) -> None:
        """Wake ``serve`` where it waits for a message, once the server begins to stop."""
        await stopping.wait()
        self.messages.put_nowait(_WAKE)

    async def serve(
        self, deadline: float, stopping: asyncio.Event | None = None
    ) -> Literal["lifetime", "closed", "stopping"]:
        """Answer messages in order, until the socket's lifetime ends, it closes, or the server stops
        (``stopping``: no turn starts once it is set)."""
        while True:
            if stopping is not None and stopping.is_set():
                return "stopping"
            try:
                async with asyncio.timeout_at(deadline):
                    message = await self.messages.get()
            except TimeoutError:
                return "lifetime"
            if message is None or self.gone.is_set():  # (what waited for a client now gone: dropped)
                return "closed"
            if message is _WAKE:
                continue
            self.room.release()
            await self._turn(message)
            del message  # (as in ``read``: not held while the next is awaited)
            if asyncio.get_running_loop().time() >= deadline:
                return "lifetime"

    async def _turn(self, message: Message) -> None:
        request = await self._request(message)
        if isinstance(request, dict):
            await self.send_event(request)
            return
        self.store.continued = None
        relay = _Relay(self.send_text)
        answer = self.app(self._scope(len(request.body)), self._receive(request), relay)
        try:
            # A task of its own: the route cancels the task it runs in when its client leaves.
            await asyncio.ensure_future(answer)
        except OSError:
            self.gone.set()  # the client left while the answer was sent
            return
        except Exception:
            if self.gone.is_set():
                return
            log.exception("a WebSocket turn failed in the server")  # the client gets no traceback
            relay.failed = True
            if not relay.dropped:  # (a dropped turn's client already has its one error message)
                await self._quietly(_refusal(500, "internal error in the server", code="server_error"))
        else:
            await relay.finish()
        self._remember(request, relay)

    async def _request(self, message: Message) -> _Request | dict[str, Any]:
        """The HTTP request for a message, or the error message that answers it."""
        text = message.get("text")
        if not isinstance(text, str):
            return _refusal(
                400,
                "Binary messages are not read: send each response.create as a JSON text message.",
                code="invalid_message",
            )
        raw = text.encode("utf-8", "surrogatepass")
        if self.max_bytes is not None and len(raw) > self.max_bytes:
            return _refusal(413, f"message larger than {self.max_bytes} bytes", code="request_too_large")
        try:
            asked = await off_the_loop(lambda: parse_json_object(raw), heavy=is_large(raw))
        except APIError as refused:
            return error_event(refused.status, refused.body)
        refusal = _event_refusal(asked)
        if refusal is not None:
            return refusal
        del asked["type"]
        asked["stream"] = True
        body = await off_the_loop(lambda: jsoncodec.dumps(asked), heavy=is_large(raw))
        return _Request(body, asked)

    def _scope(self, size: int) -> Scope:
        """The HTTP request of a turn: the handshake's, a POST of ``size`` bytes of JSON."""
        socket = self.websocket.scope
        headers = [
            (name, value)
            for name, value in socket["headers"]
            if name not in _NOT_CARRIED and not name.startswith(b"sec-websocket-")
        ]
        headers += [(b"content-type", b"application/json"), (b"content-length", b"%d" % size)]
        return {
            "type": "http",
            # 2.3: the route watches receive() for the client's leaving (Starlette's StreamingResponse
            # does so only below 2.4); that is how a turn stops when its socket closes.
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "https" if socket.get("scheme") == "wss" else "http",
            "path": socket["path"],
            "raw_path": socket["path"].encode(),
            "root_path": socket.get("root_path", ""),
            "query_string": b"",
            "headers": headers,
            "client": socket.get("client"),
            "server": socket.get("server"),
            "state": dict(socket.get("state") or {}),
        }

    def _receive(self, request: _Request) -> Receive:
        """The turn's body, then the client's leaving, whenever the socket closes."""
        given = False

        async def receive() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": request.body, "more_body": False}
            await self.gone.wait()
            return {"type": "http.disconnect"}

        return receive

    def _remember(self, request: _Request, relay: _Relay) -> None:
        if relay.failed or relay.final is None:
            self.store.forget(request.asked.get("previous_response_id"))
        else:
            self.store.remember(relay.final, request.asked, len(request.body) + relay.final_size)

    async def send_text(self, text: str) -> None:
        """One message to the client; an ``OSError`` when it left, as a closed HTTP connection raises
        to the route that writes to it."""
        try:
            await self.websocket.send({"type": "websocket.send", "text": text})
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.gone.set()
            raise OSError("the client closed the WebSocket") from None

    async def send_event(self, event: Mapping[str, Any]) -> None:
        await self._quietly(event)

    async def _quietly(self, event: Mapping[str, Any]) -> None:
        """``event`` sent, where the client is still there to read it."""
        with contextlib.suppress(OSError):
            await self.send_text(jsoncodec.dumps(event).decode())

    async def close(self, code: int, reason: str) -> None:
        if not self.gone.is_set():
            with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
                await self.websocket.close(code, reason)


def _event_refusal(asked: dict[str, Any]) -> dict[str, Any] | None:
    """The error message for a client message that is no ``response.create`` the spec allows."""
    kind = asked.get("type")
    if kind is None:
        return _refusal(
            400, "Missing required parameter: 'type'.", code="missing_required_parameter", param="type"
        )
    if kind != "response.create":
        shown = quoted(kind) if isinstance(kind, str) else kind
        return _refusal(
            400,
            f"Invalid value for 'type': {shown!r}. Supported values are: 'response.create'.",
            code="invalid_value",
            param="type",
        )
    for name in _FORBIDDEN:
        if name in asked:
            return _refusal(
                400,
                f"Unsupported parameter: '{name}' is not sent over a WebSocket, where every response "
                "is streamed and lasts no longer than its socket.",
                code="unsupported_parameter",
                param=name,
            )
    return None


def _too_large(most: int) -> dict[str, Any]:
    """The error message for a turn whose event passed ``most`` bytes. A 400, as the spec's other limit of
    the WebSocket mode (``websocket_connection_limit_reached``) is: the same request fails the same way
    again, so no retry, but HTTP streaming or a shorter answer."""
    return _refusal(
        400,
        f"The response has an event larger than one WebSocket message may carry ({most} bytes): a long "
        "output, or instructions and tools that its first events repeat. It was not sent, nor the rest "
        "of the response. Stream it over HTTP (POST /v1/responses with stream: true), which sends a long "
        "event in pieces, or ask for less output (max_output_tokens).",
        code="websocket_message_too_large",
    )


class _Relay:
    """One turn's HTTP answer as the socket's messages: each event of a 200 stream as it comes, any
    other answer as one message at its end (``finish``); past ``most`` bytes, one error message in place
    of the event and of the rest of the turn."""

    def __init__(self, send_text: Callable[[str], Awaitable[None]], most: int | None = None) -> None:
        self._send_text = send_text
        self._most = MAX_MESSAGE if most is None else most  # (read now: a test patches it)
        self.status = 0
        self._streaming = False
        self._pending: list[bytes] = []
        """The start of an event not yet ended: a long one comes in pieces (output.py)."""
        self._whole: list[bytes] = []
        self._held = 0
        """Bytes in ``_pending`` or ``_whole``: what the bound counts."""
        self.dropped = False
        """Whether an event passed the bound: what follows of the turn is read and let go."""
        self.final: dict[str, Any] | None = None
        """The Response of the terminal event, once sent."""
        self.final_size = 0
        """Bytes of the terminal event's JSON."""
        self.failed = False
        """Whether the turn failed: an error message, ``response.failed``."""

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self._streaming = self.status == 200 and _is_event_stream(message.get("headers", ()))
        elif message["type"] == "http.response.body" and not self.dropped:
            body = message.get("body", b"")
            if self._streaming:
                await self._events(body)
            else:
                await self._hold(self._whole, body)

    async def _hold(self, parts: list[bytes], body: bytes) -> None:
        """``body`` kept in ``parts``, the message under way, unless that passes the bound."""
        self._held += len(body)
        if self._held > self._most:
            await self._drop()
        else:
            parts.append(body)

    async def _drop(self) -> None:
        """The message under way passed the bound: let go of it, and tell the client. An ``OSError`` when
        it left, so that the route stops as for a client gone."""
        self.dropped = self.failed = True
        self.final = None
        self._pending, self._whole, self._held = [], [], 0
        await self._send_text(jsoncodec.dumps(_too_large(self._most)).decode())

    async def _events(self, body: bytes) -> None:
        # Each body part holds whole events, or a piece of a long one (output.py); a part cut inside an
        # event waits, in a list: added to the bytes before it, each of a 200 MiB event's pieces would
        # copy all that came before.
        pending = self._pending
        if pending and pending[-1].endswith(b"\n") and body.startswith(b"\n"):  # its two line ends cut
            pending[-1] = pending[-1][:-1]
            body = b"\n" + body
        start = 0
        while (end := body.find(b"\n\n", start)) != -1:
            if end > start:
                await self._hold(pending, body[start:end])
            if self.dropped:
                return
            if pending:
                await self._event(pending)
            start = end + 2
        if start < len(body):
            await self._hold(pending, body[start:] if start else body)

    async def _event(self, parts: list[bytes]) -> None:
        """The event in ``parts``, which it empties, as one message. It lets go of each copy as soon as
        it can: at the bound each is 8 MiB, and the send makes two more."""
        event = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        self._held = 0
        at = event.find(b"data: ")  # "event: TYPE\n", then the JSON on one line
        kind = (event if at < 0 else event[:at]).removeprefix(b"event: ").strip()
        payload = memoryview(event)[at + 6 :] if at >= 0 else memoryview(b"")
        if kind in _TERMINAL or kind == b"error":
            self.final_size = len(payload)
            self._ended(jsoncodec.loads(bytes(payload)))
        text = str(payload, "utf-8")
        del event, payload
        await self._send_text(text)

    def _ended(self, event: Any) -> None:
        response = event.get("response") if isinstance(event, dict) else None
        if isinstance(response, dict):
            self.final = response
        self.failed = not isinstance(response, dict) or response.get("status") == "failed"

    async def finish(self) -> None:
        """The message for an answer that was no stream: a Response (an upstream's whole answer on the
        native path) as its terminal event, an error as the spec's error message; nothing where the
        client left before any answer, or where the answer passed the bound (its error message went).
        A stream that ended without its terminal event gets an error message too (see ``_unended``)."""
        if self._streaming:
            await self._unended()
            return
        if self.dropped or self.status in (0, 499):
            return
        self.final_size = self._held
        try:
            body = jsoncodec.loads(b"".join(self._whole))
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        if self.status == 200 and body.get("object") == "response":
            event = {"type": f"response.{body.get('status')}", "sequence_number": 0, "response": body}
            self._ended(event)
        else:
            event = error_event(self.status, body)
            self.failed = True
        with contextlib.suppress(OSError):
            await self._send_text(jsoncodec.dumps(event).decode())

    async def _unended(self) -> None:
        """A stream that ended with neither its terminal event nor an error: its HTTP connection was
        closed inside an event (a long text that could not be read back, proxy/writer.py). Over HTTP
        the cut says so; a socket stays open, and its client would wait for ever (issue 32's review):
        the half event is let go, and the client gets a ``server_error`` error message."""
        if self.final is not None or self.failed or self.dropped:
            return
        self._pending, self._held, self.failed = [], 0, True
        with contextlib.suppress(OSError):
            message = _refusal(500, "the server could not finish the response", code="server_error")
            await self._send_text(jsoncodec.dumps(message).decode())


def _is_event_stream(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    return any(name == b"content-type" and value.startswith(b"text/event-stream") for name, value in headers)
