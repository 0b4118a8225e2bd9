"""An upstream's own ``/v1/responses`` (``--responses native``, or ``auto`` when it answers), normalized.

llama-server's /v1/responses served a Codex CLI turn through the proxy's plain pass-through, but its
events lacked ``sequence_number``, ``output_index`` and ``content_index``, named the model by its file
path, and said ``completed`` when ``max_output_tokens`` cut the answer (docs/responses.md, `native`). The
same rules as the chat route's apply here as far as they can: one ``resp_`` id on every Response, the
model as the client may name it (Q09: no local path, or ``--model-alias``), ``sequence_number`` from 0
without a gap, every item's ``output_index`` and every part's ``content_index``, ``incomplete`` with
``incomplete_details.reason: "max_output_tokens"`` for an answer that used all of its limit, and a
stream that breaks off ends with ``response.failed`` instead of being cut.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.types import Send

from conformance.responses_state import ResponseStore, remember, remember_terminal
from conformance.responses_translation import new_response_id
from conformance.responses_translation.body import failed_error, new_item_id
from conformance.sse import SSEParser

from .. import graceful, jsoncodec
from ..errors import ProxyError
from ..normalizer import clean_model_name
from ..observability import Exchange
from ..respond import redacting, send_json
from ..upstream import MAX_JSON_BODY, Upstream, UpstreamStream
from .output import encode_events

__all__ = ["NativeEvents", "NativeResponses", "StoredAs", "normalize_response", "serve_native"]

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_PROBE_TIMEOUT = 5.0
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_NO_ROUTE = frozenset({404, 405, 501})
_REQUIRED: dict[str, Any] = {
    "created_at": lambda: int(time.time()),
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "metadata": dict,
    "output": list,
    "tools": list,
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "temperature": None,
    "top_p": None,
}


@dataclass(frozen=True, slots=True)
class StoredAs:
    """Where a native Response is kept, with the whole input it answered (conformance/responses_state/)."""

    store: ResponseStore
    items: list[Any]

    async def keep(self, response: dict[str, Any]) -> dict[str, Any]:
        return await remember(self.store, response, self.items)

    async def keep_terminal(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return await remember_terminal(self.store, events, self.items)


class NativeResponses:
    """Whether ``POST /v1/responses`` goes to the upstream's own endpoint: ``--responses``, and for
    ``auto`` one probe (an empty request: a server with the route refuses it, one without has no
    route), remembered for the life of the process."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._answers: bool | None = None
        self._lock = asyncio.Lock()

    async def native(self, upstream: Upstream) -> bool:
        if self.mode != "auto":
            return self.mode == "native"
        if self._answers is None:
            async with self._lock:
                if self._answers is None:
                    status, _ = await upstream.answer("POST", "/v1/responses", {}, _PROBE_TIMEOUT)
                    if status is not None:  # no answer at all says nothing: asked again next time
                        self._answers = status not in _NO_ROUTE
        return bool(self._answers)


def _limit(request: Mapping[str, Any]) -> int | None:
    limit = request.get("max_output_tokens")
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def normalize_response(
    response: dict[str, Any], request: Mapping[str, Any], *, response_id: str, model: str | None
) -> dict[str, Any]:
    """An upstream's Response object with the proxy's id and model, and ``incomplete`` where the
    request's ``max_output_tokens`` was used up but the upstream said ``completed``."""
    response["id"] = response_id
    response["object"] = "response"
    for key, default in _REQUIRED.items():  # the fields OpenAI's spec requires that a server left out
        response.setdefault(key, default() if callable(default) else default)
    upstream_model = response.get("model")
    if model is not None:
        response["model"] = model
    elif isinstance(upstream_model, str) and upstream_model:
        response["model"] = clean_model_name(upstream_model)
    usage = response.get("usage")
    if isinstance(usage, dict):
        response["usage"] = usage = _usage(usage)
    limit = _limit(request)
    used = usage.get("output_tokens") if isinstance(usage, Mapping) else None
    if (
        response.get("status") == "completed"
        and limit is not None
        and isinstance(used, int)
        and used >= limit
        and not _called(response)
    ):
        response["status"] = "incomplete"
        response["incomplete_details"] = {"reason": "max_output_tokens"}
        response["completed_at"] = None
    for item in response.get("output") or ():
        if isinstance(item, dict) and not item.get("id"):
            item["id"] = new_item_id(_prefix(item))
        _complete_parts(item)
    # The client's own settings: the proxy keeps the state (it sends the upstream a continuation as the
    # whole conversation), so the upstream's echo of these says nothing.
    response["store"] = request.get("store", True) is not False
    response["previous_response_id"] = request.get("previous_response_id")
    return response


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    """``ResponseUsage`` with its detail objects and total, which a server may leave out."""
    counts = {key: usage.get(key) for key in ("input_tokens", "output_tokens")}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in counts.values()):
        return usage
    usage.setdefault("input_tokens_details", {"cached_tokens": 0})
    usage.setdefault("output_tokens_details", {"reasoning_tokens": 0})
    if isinstance(usage["input_tokens_details"], dict):
        usage["input_tokens_details"].setdefault("cached_tokens", 0)
        usage["input_tokens_details"].setdefault("cache_write_tokens", 0)
    usage["total_tokens"] = sum(counts.values())
    return usage


def _complete_parts(item: Any) -> None:
    """An output item's ``output_text`` parts with the ``annotations`` and ``logprobs`` OpenAI always
    sends (llama-server's ``content_part.added`` has neither)."""
    if not isinstance(item, dict):
        return
    for part in item.get("content") or ():
        _complete_part(part)


def _complete_part(part: Any) -> None:
    if isinstance(part, dict) and part.get("type") == "output_text":
        part.setdefault("annotations", [])
        part.setdefault("logprobs", [])


def _called(response: Mapping[str, Any]) -> bool:
    """Whether the answer ended in a tool call (which stops generation by itself)."""
    output = response.get("output")
    return isinstance(output, list) and any(
        isinstance(item, Mapping) and str(item.get("type", "")).endswith("call") for item in output
    )


def _prefix(item: Mapping[str, Any]) -> str:
    kind = item.get("type")
    return {"message": "msg", "function_call": "fc", "reasoning": "rs"}.get(str(kind), "item")


class NativeEvents:
    """One upstream Responses stream, event by event, normalized (see the module's docstring)."""

    def __init__(self, request: Mapping[str, Any], model: str | None) -> None:
        self._request = request
        self._model = model
        self.response_id = new_response_id()
        self._sequence = 0
        self._indexes: dict[str, int] = {}
        self._items = 0
        self._current: str | None = None
        self._open: dict[str, dict[str, Any]] = {}  # items added and not yet done
        self._open_parts: set[str] = set()  # items whose content part is added and not yet done
        self._texts: dict[str, list[str]] = {}  # an open message's text deltas
        self._done: list[dict[str, Any]] = []
        self.ended = False
        self.last_response: dict[str, Any] | None = None

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        if not isinstance(kind, str) or self.ended:
            return []
        response = event.get("response")
        if isinstance(response, dict):
            event["response"] = normalize_response(
                response, self._request, response_id=self.response_id, model=self._model
            )
            self.last_response = event["response"]
            if kind == "response.completed" and event["response"]["status"] == "incomplete":
                kind = event["type"] = "response.incomplete"
        if kind == "response.output_item.added":
            item = event.get("item")
            if isinstance(item, dict):
                item_id = item.get("id") or new_item_id(_prefix(item))
                item["id"] = item_id
                index = event.get("output_index")
                self._indexes[item_id] = index if isinstance(index, int) else self._items
                self._items = max(self._items, self._indexes[item_id] + 1)
                self._current = item_id
                self._open[item_id] = item
        elif kind == "response.output_item.done":
            item = event.get("item")
            if isinstance(item, dict):
                if not item.get("id") and self._current is not None:
                    item["id"] = self._current
                self._open.pop(item["id"], None)
                self._done.append(item)
        _complete_parts(event.get("item"))
        _complete_part(event.get("part"))
        if kind.startswith("response.") and kind not in _TERMINAL and "response" not in event:
            self._fill_indexes(event, kind)
            self._follow_parts(event, kind)
        if kind in _TERMINAL:
            self.ended = True
        event["sequence_number"] = self._sequence
        self._sequence += 1
        return [event]

    def _fill_indexes(self, event: dict[str, Any], kind: str) -> None:
        item_id = event.get("item_id")
        if "item" not in event and not (isinstance(item_id, str) and item_id) and self._current is not None:
            item_id = event["item_id"] = self._current
        item = event.get("item")
        if isinstance(item, Mapping):
            item_id = item.get("id")
        if not isinstance(event.get("output_index"), int) and isinstance(item_id, str):
            event["output_index"] = self._indexes.get(item_id, max(self._items - 1, 0))
        if kind in ("response.output_text.delta", "response.output_text.done"):
            event.setdefault("logprobs", [])
        has_part = "part" in event or "text" in kind or "refusal" in kind
        if has_part and kind.endswith((".delta", ".done", ".added")) and "content_index" not in event:
            event["content_index"] = 0

    def _follow_parts(self, event: dict[str, Any], kind: str) -> None:
        """Note the open content parts and the text of open messages, for ``fail``."""
        item_id = event.get("item_id")
        if not isinstance(item_id, str):
            return
        if kind == "response.content_part.added":
            self._open_parts.add(item_id)
        elif kind == "response.content_part.done":
            self._open_parts.discard(item_id)
        elif kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            self._texts.setdefault(item_id, []).append(event["delta"])

    def _stamped(self, event: dict[str, Any]) -> dict[str, Any]:
        event["sequence_number"] = self._sequence
        self._sequence += 1
        return event

    def _closed(self) -> list[dict[str, Any]]:
        """The events that end the items still open when the stream broke off, as incomplete."""
        out: list[dict[str, Any]] = []
        for item_id, item in sorted(self._open.items(), key=lambda pair: self._indexes.get(pair[0], 0)):
            index = self._indexes.get(item_id, 0)
            done = {**item, "status": "incomplete"}
            if item.get("type") == "message":
                text = "".join(self._texts.get(item_id, ()))
                part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
                done["content"] = [part]
                if item_id in self._open_parts:
                    where = {"item_id": item_id, "output_index": index, "content_index": 0}
                    out.append(
                        self._stamped(
                            {"type": "response.output_text.done", **where, "text": text, "logprobs": []}
                        )
                    )
                    out.append(self._stamped({"type": "response.content_part.done", **where, "part": part}))
            out.append(
                self._stamped({"type": "response.output_item.done", "output_index": index, "item": done})
            )
            self._done.append(done)
        self._open.clear()
        return out

    def fail(self, error: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """The events that end a stream that broke off before its own terminal event: its open items
        ended as incomplete, then ``response.failed``."""
        out = self._closed()
        response = dict(self.last_response or {})
        response.update(
            {
                "id": self.response_id,
                "object": "response",
                "status": "failed",
                "error": failed_error(error),
                "incomplete_details": None,
            }
        )
        response["output"] = self._done
        response.setdefault("model", self._model or "model")
        self.ended = True
        return [*out, self._stamped({"type": "response.failed", "response": response})]


async def serve_native(
    send: Send,
    upstream: Upstream,
    raw: bytes,
    request: Mapping[str, Any],
    headers: list[tuple[bytes, bytes]],
    exchange: Exchange,
    model: str | None,
    secret: str | None = None,
    stored: StoredAs | None = None,
) -> None:
    """Answer with the upstream's own ``/v1/responses``, normalized; errors before the first event as
    OpenAI error bodies at their status, as on the chat route. ``secret``: the upstream key, cut out of
    every error and body as on the chat route. ``stored``: where the Response is kept (``request`` is
    the client's own body, whose ``store`` and ``previous_response_id`` it echoes)."""
    send = redacting(send, secret)
    try:
        stream = await upstream.forward("POST", b"/v1/responses", raw, headers)
    except ProxyError as raised:
        await _refuse(send, raised.redacted(secret), exchange)
        return
    try:
        exchange.upstream_status = stream.status
        if stream.status >= 300:
            await _refuse(send, (await stream.error()).redacted(secret), exchange)
            return
        if "event-stream" not in stream.content_type:
            try:
                body = jsoncodec.loads(await stream.read_all(MAX_JSON_BODY))
            except (ValueError, ProxyError):
                body = None
            if not isinstance(body, dict):
                error = ProxyError.make("the upstream server sent a body that is not a Response", 502)
                await _refuse(send, error, exchange)
                return
            exchange.mark_first_token()
            answer = normalize_response(body, request, response_id=new_response_id(), model=model)
            await send_json(send, 200, answer if stored is None else await stored.keep(answer))
            return
        await _relay_events(send, stream, request, exchange, model, secret, stored)
    finally:
        await stream.aclose()


async def _refuse(send: Send, error: ProxyError, exchange: Exchange) -> None:
    exchange.take_error(error)
    await send_json(send, error.status, error.body, error.headers)


async def _relay_events(
    send: Send,
    stream: UpstreamStream,
    request: Mapping[str, Any],
    exchange: Exchange,
    model: str | None,
    secret: str | None,
    stored: StoredAs | None,
) -> None:
    events = NativeEvents(request, model)
    parser = SSEParser()
    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
    exchange.mark_first_token()
    failure: dict[str, Any] | None = None
    # Events numbered but not sent yet: whatever breaks the loop off (a later block that is not JSON, the
    # shutdown deadline during the store's write or a slow client's send), they go out first at the end.
    unsent: list[dict[str, Any]] = []
    try:
        while not events.ended and (data := await stream.read()) is not None:
            for block in parser.feed(data):
                if block.data is None or block.data.strip() in ("", "[DONE]"):
                    continue
                event = jsoncodec.loads(block.data)
                if isinstance(event, dict):
                    unsent += events.feed(event)
            if unsent and events.ended and stored is not None:  # kept before the client has the end
                unsent = await stored.keep_terminal(unsent)
            if unsent:
                await send({"type": "http.response.body", "body": encode_events(unsent), "more_body": True})
                unsent = []
    except ProxyError as raised:
        redacted = raised.redacted(secret)
        exchange.take_error(redacted)
        failure = redacted.body
    except ValueError:
        failure = ProxyError.make("the upstream server sent an event that is not valid JSON", 502).body
    except asyncio.CancelledError:
        if (error := graceful.shutdown_failure(exchange)) is None:
            raise
        await graceful.last_words(_end(send, events, error.body, stored, unsent))
        return
    await _end(send, events, failure, stored, unsent)


async def _end(
    send: Send,
    events: NativeEvents,
    failure: dict[str, Any] | None,
    stored: StoredAs | None,
    unsent: list[dict[str, Any]],
) -> None:
    """The stream's last body message: the events not sent yet, then, unless the upstream's own terminal
    event was among what was made, the open items ended and ``response.failed`` with ``failure`` (or
    the upstream's early end)."""
    tail = encode_events(unsent) if unsent else b""
    if not events.ended:
        if failure is None:
            failure = ProxyError.make(
                "the upstream server ended the stream without a terminal event", 502
            ).body
        ending = events.fail(failure)
        tail += encode_events(ending if stored is None else await stored.keep_terminal(ending))
    await send({"type": "http.response.body", "body": tail})
