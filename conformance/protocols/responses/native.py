"""An upstream's own ``/v1/responses`` (``--responses native``, or ``auto`` when it answers), normalized.

llama-server's /v1/responses served a Codex CLI turn through the proxy's plain pass-through, but its
events lacked ``sequence_number``, ``output_index`` and ``content_index``, named the model by its file
path, and said ``completed`` when ``max_output_tokens`` cut the answer (docs/responses.md, `native`). The
same rules as the chat route's apply here as far as they can: one ``resp_`` id on every Response, the
model as the client may name it (Q09: no local path, or ``--model-alias``), ``sequence_number`` from 0
without a gap, every item's ``output_index`` and every part's ``content_index``, ``incomplete`` with
``incomplete_details.reason: "max_output_tokens"`` for an answer that used all of its limit, each
message's ``phase`` (Open Responses 2026-04-24: ``commentary`` where a call is the next item, else
``final_answer``; a message's ``output_item.done`` waits for the next event to tell), and a stream that
breaks off ends with ``response.failed`` instead of being cut.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from conformance.model_names import clean_model_name
from conformance.request import integer

from ..front_end import Pieces
from ..sampling import SAMPLING_FIELDS, sampling_used
from ..spooled_text import SpoolFile, TextSpool
from .output import written_events
from .response import failed_error, listed_tool, new_item_id, new_response_id, phase_of, settings_echo
from .store_base import Store
from .stored import remember, remember_terminal

__all__ = ["NativeAnswer", "NativeEvents", "normalize_response"]

_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_REQUIRED: dict[str, Any] = {
    "created_at": lambda: int(time.time()),
    "completed_at": None,
    "usage": None,
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "metadata": dict,
    "output": list,
    "tools": list,
    "tool_choice": "auto",
    "parallel_tool_calls": True,
}


def _limit(request: Mapping[str, Any]) -> int | None:
    limit = request.get("max_output_tokens")
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def normalize_response(
    response: dict[str, Any],
    request: Mapping[str, Any],
    *,
    response_id: str,
    model: str | None,
    sampling: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """An upstream's Response object with the proxy's id and model, and ``incomplete`` where the
    request's ``max_output_tokens`` was used up but the upstream said ``completed``; ``sampling``: the
    upstream's sampling defaults where known (conformance/protocols/sampling.py)."""
    response["id"] = response_id
    response["object"] = "response"
    for key, default in _REQUIRED.items():  # the fields OpenAI's spec requires that a server left out
        response.setdefault(key, default() if callable(default) else default)
    _state_settings(response, request, sampling)
    upstream_model = response.get("model")
    if model is not None:
        response["model"] = model
    elif isinstance(upstream_model, str) and upstream_model:
        response["model"] = clean_model_name(upstream_model)
    output = response.get("output")
    if isinstance(output, list):
        _phases(output)
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
    if response.get("status") == "completed" and integer(response.get("completed_at")) is None:
        response["completed_at"] = int(time.time())  # (llama-server left it out)
    for item in response.get("output") or ():
        if isinstance(item, dict) and not item.get("id"):
            item["id"] = new_item_id(_prefix(item))
        _complete_parts(item)
    # The client's own settings: the proxy keeps the state (it sends the upstream a continuation as the
    # whole conversation), so the upstream's echo of these says nothing.
    response["store"] = request.get("store", True) is not False
    response["previous_response_id"] = request.get("previous_response_id")
    return response


def _state_settings(
    response: dict[str, Any], request: Mapping[str, Any], sampling: Mapping[str, float] | None
) -> None:
    """The settings the Open Responses spec requires and that llama-server b11434 left null or out
    (issue 38: its own route passed 0 of the suite's 9 tests through the proxy): the request's settings
    as the translated route echoes them, sampling as used, each function tool's ``strict``."""
    for key, value in settings_echo(request).items():
        if response.get(key) is None and key != "model":
            response[key] = value
    used = sampling_used(request, sampling)
    for name in SAMPLING_FIELDS:
        value = response.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            response[name] = used[name]
    if integer(response.get("top_logprobs")) is None:
        response["top_logprobs"] = integer(request.get("top_logprobs")) or 0
    tools = response.get("tools")
    if isinstance(tools, list):
        response["tools"] = [listed_tool(tool) for tool in tools]


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


def _is_call(item: Any) -> bool:
    return isinstance(item, Mapping) and str(item.get("type", "")).endswith("call")


def _unphased_message(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "message" and "phase" not in item


def _phases(output: list[Any]) -> None:
    """Each message of ``output`` without a ``phase`` given one: ``commentary`` where a call follows it
    at once, else ``final_answer`` (the translated route's rule: events.py closes a message so when
    a call opens after it)."""
    for index, item in enumerate(output):
        if _unphased_message(item):
            following = output[index + 1] if index + 1 < len(output) else None
            item["phase"] = phase_of(_is_call(following))


def _called(response: Mapping[str, Any]) -> bool:
    """Whether the answer ended in a tool call (which stops generation by itself)."""
    output = response.get("output")
    return isinstance(output, list) and any(_is_call(item) for item in output)


def _prefix(item: Mapping[str, Any]) -> str:
    kind = item.get("type")
    return {"message": "msg", "function_call": "fc", "reasoning": "rs"}.get(str(kind), "item")


class NativeEvents:
    """One upstream Responses stream, event by event, normalized (see the module's docstring)."""

    def __init__(
        self, request: Mapping[str, Any], model: str | None, sampling: Mapping[str, float] | None = None
    ) -> None:
        self._request = request
        self._model = model
        self._sampling = sampling
        self.response_id = new_response_id()
        self._sequence = 0
        self._indexes: dict[str, int] = {}
        self._items = 0
        self._current: str | None = None
        self._open: dict[str, dict[str, Any]] = {}  # items added and not yet done
        self._open_parts: set[str] = set()  # items whose content part is added and not yet done
        self._texts: dict[str, TextSpool] = {}  # an open message's text, kept for ``fail`` (spooled:
        # held as a list, it was the whole text of a long stream; 200 MiB took the proxy to 1.2 GB)
        self.spools: dict[str, TextSpool] = {}
        """The texts that placeholders in the failure's events stand for (protocols/spooled_text.py)."""
        self._spool_file = SpoolFile()
        self._done: list[dict[str, Any]] = []
        self._held: dict[str, Any] | None = None
        """A message's ``output_item.done``, sent with the next event, which tells its ``phase``."""
        self._calls: dict[int, bool] = {}  # whether each output index's item, as added, is a call
        self.ended = False
        self.last_response: dict[str, Any] | None = None

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        if not isinstance(kind, str) or self.ended:
            return []
        held = self._release(_is_call(event.get("item")) and kind == "response.output_item.added")
        return [*held, *self._feed(event, kind)]

    def _release(self, call_follows: bool) -> list[dict[str, Any]]:
        """The held message's ``output_item.done``, its ``phase`` told by what follows it: a call
        opening next (as ``_phases`` reads the final output: the item after it), else its last word."""
        event, self._held = self._held, None
        if event is None:
            return []
        event["item"].setdefault("phase", phase_of(call_follows))
        return [self._stamped(event)]

    def _feed(self, event: dict[str, Any], kind: str) -> list[dict[str, Any]]:
        response = event.get("response")
        if isinstance(response, dict):
            event["response"] = normalize_response(
                response,
                self._request,
                response_id=self.response_id,
                model=self._model,
                sampling=self._sampling,
            )
            self.last_response = event["response"]
            if kind == "response.completed" and event["response"]["status"] == "incomplete":
                kind = event["type"] = "response.incomplete"
        item = event.get("item")
        if isinstance(item, dict) and kind == "response.output_item.added":
            self._added(item, event.get("output_index"))
        elif isinstance(item, dict) and kind == "response.output_item.done":
            self._ended_item(item)
        _complete_parts(item)
        _complete_part(event.get("part"))
        if kind.startswith("response.") and kind not in _TERMINAL and "response" not in event:
            self._fill_indexes(event, kind)
            self._follow_parts(event, kind)
        if kind in _TERMINAL:
            self.ended = True
        if kind == "response.output_item.done" and isinstance(item, dict) and _unphased_message(item):
            call_follows = self._calls.get(self._indexes.get(item["id"], -2) + 1)
            if call_follows is None:  # the next item is not known yet: the next event tells
                self._held = event
                return []
            item["phase"] = phase_of(call_follows)
        return [self._stamped(event)]

    def _added(self, item: dict[str, Any], index: Any) -> None:
        """An item opened: its id (made where it has none), output index and whether it is a call noted."""
        item_id = item.get("id") or new_item_id(_prefix(item))
        item["id"] = item_id
        self._indexes[item_id] = index if isinstance(index, int) else self._items
        self._items = max(self._items, self._indexes[item_id] + 1)
        self._calls[self._indexes[item_id]] = _is_call(item)
        self._current = item_id
        self._open[item_id] = item

    def _ended_item(self, item: dict[str, Any]) -> None:
        """An item done: no longer open, kept for the output of a ``fail``, its held text let go."""
        if not item.get("id"):  # (a done with no added before it: an id of its own)
            item["id"] = self._current if self._current is not None else new_item_id(_prefix(item))
        self._open.pop(item["id"], None)
        self._done.append(item)
        if (spool := self._texts.pop(item["id"], None)) is not None:
            spool.close()  # the upstream's own event has the text: none of it is held
            if not self._texts:  # nothing open refers to the file: a new one, the old one
                self._spool_file = SpoolFile()  # gone with its texts (else it grew all along)

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
            if (spool := self._texts.get(item_id)) is None:
                if self._open.get(item_id, {}).get("type") != "message":
                    return  # only an open message's text is ever read (``_closed``): held for no item,
                    # the deltas of 100,000 made-up ids held 43 MB (issue 32's review)
                spool = self._texts[item_id] = TextSpool(file=self._spool_file)
            spool.append(event["delta"])

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
                text = self._text(item_id)
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

    def _text(self, item_id: str) -> str:
        """An open message's text so far: the text, or the placeholder of a spooled one."""
        spool = self._texts.pop(item_id, None)
        return "" if spool is None else spool.placed(self.spools)

    def fail(self, error: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """The events that end a stream that broke off before its own terminal event: its open items
        ended as incomplete, then ``response.failed``."""
        out = [*self._release(False), *self._closed()]
        response = normalize_response(
            dict(self.last_response or {}),
            self._request,
            response_id=self.response_id,
            model=self._model,
            sampling=self._sampling,
        )
        response.update({"status": "failed", "error": failed_error(error), "incomplete_details": None})
        response["completed_at"] = None
        response["output"] = self._done
        response.setdefault("model", self._model or "model")
        if self._sequence == 0:  # (nothing sent yet: a client takes the id from response.created first)
            started = {**response, "status": "in_progress", "error": None}
            out.insert(0, self._stamped({"type": "response.created", "response": started}))
        self.ended = True
        return [*out, self._stamped({"type": "response.failed", "response": response})]


class NativeAnswer:
    """One answer of an upstream's own ``/v1/responses``, normalized (``NativeEvents``, or
    ``normalize_response`` for a whole one) and kept in the store before the client has its end: the
    protocol's :class:`conformance.protocols.front_end.NativeStream`. ``request``: the client's own
    body, whose ``store`` and ``previous_response_id`` the Response echoes; ``items``: the whole input
    it answers, stored with it."""

    answer_name = "Response"

    def __init__(
        self,
        request: Mapping[str, Any],
        model: str | None,
        store: Store,
        items: list[Any],
        sampling: Mapping[str, float] | None = None,
    ) -> None:
        self._request = request
        self._model = model
        self._store = store
        self._items = items
        self._sampling = sampling
        self._events = NativeEvents(request, model, sampling)

    @property
    def ended(self) -> bool:
        return self._events.ended

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        return self._events.feed(event)

    def fail(self, error: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        return self._events.fail(error)

    def answers(self, body: Mapping[str, Any]) -> bool:
        # A failed Response holds an ``error`` of its own: its ``object`` says what it is.
        return body.get("object") == "response" or (
            isinstance(body.get("output"), list) and "error" not in body
        )

    def whole(self, body: dict[str, Any]) -> dict[str, Any]:
        return normalize_response(
            body, self._request, response_id=new_response_id(), model=self._model, sampling=self._sampling
        )

    def encode(self, events: list[dict[str, Any]]) -> bytes | Pieces:
        return written_events(events, self._events.spools)

    async def kept(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return await remember_terminal(self._store, events, self._items, self._events.spools)

    async def kept_body(self, body: dict[str, Any]) -> dict[str, Any]:
        return await remember(self._store, body, self._items)
