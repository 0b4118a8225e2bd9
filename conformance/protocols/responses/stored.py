"""The stored side of ``/v1/responses``, for the proxy and the backend alike: ``previous_response_id``
resolved to the conversation it continues, and ``GET`` / ``DELETE /v1/responses/{id}`` and ``GET
/v1/responses/{id}/input_items`` answered from the store.

OpenAI's answers, as clients test for them: an unknown id on the three routes is a 404
``invalid_request_error`` "Response with id '...' not found." (``param`` and ``code`` null); an unknown
``previous_response_id`` on a new request is a 400 with ``param`` ``previous_response_id`` and ``code``
``previous_response_not_found`` (the body OpenAI sent in maximhq/bifrost#2441, and what Codex CLI
proxies retry on: Soju06/codex-lb#1817). ``DELETE`` answers ``{"id", "object": "response", "deleted":
true}`` (the example in OpenAI's OpenAPI spec). ``input_items`` pages as the spec says: ``limit`` 1-100
(20), ``order`` ``asc`` or ``desc`` (the default), ``after`` an item id; items without an id (a string
input, a message given without one) get one derived from the response's id and their position, so that
pages name the same items every time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from starlette.responses import JSONResponse

from conformance.api_errors import APIError, InvalidRequest, error_response, quoted

from ..spooled_text import SpooledJSON, TextSpool
from .store import StoredResponse, StoredTooLarge, StoreUnavailable
from .store_base import Store

__all__ = [
    "delete_response",
    "input_items",
    "list_input_items",
    "previous_items",
    "remember",
    "remember_terminal",
    "retrieve_response",
]

TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})

_Response = TypeVar("_Response", dict[str, Any], SpooledJSON)

_ORDERS = ("asc", "desc")
_ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def _not_found(response_id: str) -> JSONResponse:
    return error_response(f"Response with id '{quoted(response_id)}' not found.", 404)


def _unavailable(exc: StoreUnavailable) -> JSONResponse:
    return error_response(str(exc), 503)


def input_items(body: Mapping[str, Any]) -> list[Any]:
    """A request's ``input`` as a list of items: a string is one user message (as OpenAI reads it)."""
    given = body.get("input")
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": given}]}]
    return list(given) if isinstance(given, list) else []


async def previous_items(
    store: Store, body: Mapping[str, Any], *, body_size: int = 0, max_bytes: int | None = None
) -> list[Any]:
    """The conversation that ``body``'s ``previous_response_id`` names (its input items, then its
    output items: what goes before the new input); no items when it names none. Raises the
    ``APIError`` to answer for an id that is no string, or names nothing stored, or (``max_bytes``) a
    conversation that with the new body (``body_size`` bytes) is larger than a fresh request may be:
    12 continuations of 15 MB each built a 180 MB conversation under a 16 MiB ``--max-body``, and four
    120-byte continuations of it sent 4 x 180 MB upstream (issue 32). The Response echoes the field;
    ``instructions`` are the new request's alone."""
    previous = body.get("previous_response_id")
    if previous is None:
        return []
    if not isinstance(previous, str) or not previous:
        raise InvalidRequest.make(
            "Invalid type for 'previous_response_id': expected a non-empty string.",
            400,
            param="previous_response_id",
            code="invalid_type",
        )
    try:
        stored = await store.load(previous, None if max_bytes is None else max_bytes - body_size)
    except StoreUnavailable as exc:
        raise APIError.make(str(exc), 503) from None
    except StoredTooLarge as large:  # refused by its recorded size, before it is read
        raise _too_large(large.size + body_size, max_bytes or 0) from None
    if stored is None:
        raise InvalidRequest.make(
            f"Previous response with id '{quoted(previous)}' not found.",
            400,
            param="previous_response_id",
            code="previous_response_not_found",
        )
    if max_bytes is not None and stored.size + body_size > max_bytes:
        raise _too_large(stored.size + body_size, max_bytes)
    return stored.conversation


def _too_large(size: int, max_bytes: int) -> APIError:
    return APIError.make(
        f"The conversation previous_response_id continues and this request are {size} bytes together, "
        f"more than this server takes in one request ({max_bytes}): start a new conversation, or send "
        "it whole without previous_response_id.",
        413,
        param="previous_response_id",
        code="request_too_large",
    )


async def remember(store: Store, response: _Response, items: list[Any]) -> _Response:
    """Store a finished ``response`` (one that says ``"store": true``) with the input ``items`` it was
    generated from: call it before the client gets the terminal event or body, so that a
    ``previous_response_id`` sent the moment it arrives finds it. Returns the response as the client
    gets it: with ``"store": false`` when it could not be stored (larger than the store's bound, the
    file failing), so that no client counts on an entry that is not there; never fails the response.
    A streamed Response whose texts went to files (``SpooledJSON``) is stored from them a piece at a
    time, its size counted so too (protocols/spooled_text.py)."""
    value = response.value if isinstance(response, SpooledJSON) else response
    if value.get("store") is not True:
        return response
    try:
        if await store.save(response, items):
            return response
    except StoreUnavailable:
        pass  # logged by the store
    unstored = {**value, "store": False}
    return SpooledJSON(unstored, response.spools) if isinstance(response, SpooledJSON) else unstored


async def remember_terminal(
    store: Store,
    events: list[dict[str, Any]],
    items: list[Any],
    spools: Mapping[str, TextSpool] | None = None,
) -> list[dict[str, Any]]:
    """``events`` with the Response of the terminal event among them (a stream's last) stored, as
    ``remember`` does (``spools``: the texts that placeholders in it stand for); the events as they
    are when none is terminal."""
    for position, event in enumerate(events):
        if event.get("type") in TERMINAL_EVENTS and isinstance(event.get("response"), dict):
            response = event["response"]
            if spools:
                kept = (await remember(store, SpooledJSON(response, spools), items)).value
            else:
                kept = await remember(store, response, items)
            if kept is not response:
                events = [*events[:position], {**event, "response": kept}, *events[position + 1 :]]
    return events


async def retrieve_response(store: Store, response_id: str, query: Mapping[str, str]) -> JSONResponse:
    """``GET /v1/responses/{id}``. ``stream=true`` replays a background response's events at OpenAI;
    there are no background responses here, so it is refused by name rather than ignored."""
    if query.get("stream", "false").lower() not in ("false", "0", ""):
        return error_response(
            "Streaming a stored response is not supported by this server.", 400, param="stream"
        )
    found = await _load(store, response_id)
    return found if isinstance(found, JSONResponse) else JSONResponse(found.response)


async def cancel_response(store: Store, response_id: str) -> JSONResponse:
    """``POST /v1/responses/{id}/cancel``: OpenAI cancels only a background response, and there are none
    here (``background: true`` is refused), so a response this owner has is a 400 that says why, as
    OpenAI answers for one created in the foreground, and another id a 404, as ``GET`` answers it."""
    found = await _load(store, response_id)
    if isinstance(found, JSONResponse):
        return found
    return error_response(
        "Only responses created with background set to true can be cancelled; this server runs none in "
        "the background.",
        400,
        code="invalid_request",
    )


async def delete_response(store: Store, response_id: str) -> JSONResponse:
    """``DELETE /v1/responses/{id}``."""
    try:
        deleted = await store.delete(response_id)
    except StoreUnavailable as exc:
        return _unavailable(exc)
    if not deleted:
        return _not_found(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


async def list_input_items(store: Store, response_id: str, query: Mapping[str, str]) -> JSONResponse:
    """``GET /v1/responses/{id}/input_items``: ``{"object": "list", "data", "first_id", "last_id",
    "has_more"}``."""
    limit_text = query.get("limit", "20")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= 100:
        return error_response(
            f"Invalid 'limit': {limit_text!r}; expected an integer from 1 to 100.", 400, param="limit"
        )
    order = query.get("order", "desc")
    if order not in _ORDERS:
        return error_response(f"Invalid 'order': {order!r}; expected 'asc' or 'desc'.", 400, param="order")
    found = await _load(store, response_id)
    if isinstance(found, JSONResponse):
        return found
    items = _with_ids(found)
    if order == "desc":
        items.reverse()
    after = query.get("after")
    if after is not None:
        position = next((i for i, item in enumerate(items) if item["id"] == after), None)
        if position is None:
            return error_response(
                f"No input item with id '{after}' in response '{response_id}'.", 400, param="after"
            )
        items = items[position + 1 :]
    page = items[: int(limit_text)]
    return JSONResponse(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > len(page),
        }
    )


async def _load(store: Store, response_id: str) -> StoredResponse | JSONResponse:
    try:
        found = await store.load(response_id)
    except StoreUnavailable as exc:
        return _unavailable(exc)
    return _not_found(response_id) if found is None else found


def _with_ids(stored: StoredResponse) -> list[dict[str, Any]]:
    """The input items as the listing shows them (OpenAI's ``ItemResource``: each has an ``id`` and a
    ``type``; a message given as ``{"role", "content"}`` is a message, its string content one text part)."""
    key = str(stored.response.get("id", "")).removeprefix("resp_")
    shown = []
    for position, item in enumerate(stored.input_items):
        entry = dict(item) if isinstance(item, Mapping) else {"type": "message", "content": item}
        entry.setdefault("type", "message")
        if entry["type"] == "message" and isinstance(entry.get("content"), str):
            part = "output_text" if entry.get("role") == "assistant" else "input_text"
            entry["content"] = [{"type": part, "text": entry["content"]}]
        prefix = _ID_PREFIXES.get(str(entry["type"]), "item")
        entry.setdefault("id", f"{prefix}_{key}_{position}")
        shown.append(entry)
    return shown
