"""The Responses API's front-end: a ``POST /v1/responses`` body as a chat request, the chat output as
a Response, the store's routes, and the upstream's own endpoint where one serves it natively.

The translation reads the conversation ``previous_response_id`` names from the store first (a 400
``previous_response_not_found`` for one it does not hold), then the request as the judge reads it
(``schemas/response_request.json``: the translation echoes settings into the Response, and an invalid
one, ``truncation: "middle"``, made a Response its schema refuses), then the chat request it becomes,
checked as a chat request is (its errors worded in the Responses API's names, ``responses_error``).

The same path serves the WebSocket mode (websocket.py, issue 38): each socket's turns are this
front-end's requests, on a store that remembers the socket's last response.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket

from conformance.api_errors import APIError, ContextOverflow
from conformance.given_schemas import check_given_schemas
from conformance.request_validation import parse_json_object, validate_request

from ..front_end import (
    Answering,
    CountRoute,
    FrontEnd,
    NativeCall,
    NativeStream,
    Output,
    SocketRoute,
    StateRoute,
    Translation,
    is_large,
    off_the_loop,
)
from .native import NativeAnswer
from .output import ResponsesOutput
from .protocol import RESPONSES
from .request import SCHEMA
from .store_base import Store
from .stored import (
    cancel_response,
    delete_response,
    input_items,
    list_input_items,
    previous_items,
    retrieve_response,
)
from .translation import ChatTranslation, responses_error, translate_request
from .truncation import MAX_SHORTENINGS, shortened_messages
from .websocket import CONNECTION_LIFETIME, SocketMemory, SocketStore, serve_socket

__all__ = ["NATIVE_PATH", "ResponsesFrontEnd", "ResponsesTranslation"]

NATIVE_PATH = RESPONSES.paths[0]
"""Where an upstream that speaks the Responses API itself (llama-server) serves it: its own path."""


class ResponsesTranslation(Translation):
    """A Responses request as the core serves it, and how its answer is written and kept."""

    def __init__(
        self,
        asked: dict[str, Any],
        chat: ChatTranslation | None,
        store: Store,
        items: list[Any],
        refusal: APIError | None = None,
    ) -> None:
        native = NativeCall(NATIVE_PATH.encode(), _native_body(asked, items), self._native_answer)
        super().__init__(
            None if chat is None else chat.chat,
            native=native,
            refusal=refusal,
            stream=asked.get("stream") is True,
            model=asked.get("model"),
        )
        self._asked = asked
        self._chat = chat
        self._store = store
        self._items = items
        """The whole input the Response answers (the stored conversation, then this request's)."""
        self._shortenings = 0

    states_sampling = True

    @property
    def items(self) -> list[Any]:
        """The whole input the Response answers: what a compaction of it keeps (compact.py)."""
        return self._items

    def output(self, model: str | None, sampling: Mapping[str, float] | None = None) -> Output:
        assert self._chat is not None, "a refused translation has no chat output"
        return ResponsesOutput(self._chat.sampled(sampling), model, self._store, self._items)

    def shortened(self, refused: APIError) -> Translation | None:
        """The conversation without its oldest exchanges, for ``truncation: "auto"`` (truncation.py); the
        Response answers, and a store keeps, the whole input still."""
        chat = self._chat
        if chat is None or refused.code != ContextOverflow.CODE or self._asked.get("truncation") != "auto":
            return None
        if self._shortenings >= MAX_SHORTENINGS:
            return None
        messages = shortened_messages(chat.chat["messages"], refused.message)
        if messages is None:
            return None
        shorter = ResponsesTranslation(
            self._asked, replace(chat, chat={**chat.chat, "messages": messages}), self._store, self._items
        )
        shorter._shortenings = self._shortenings + 1
        shorter.native = None  # (an upstream's own endpoint would get the whole input again)
        return shorter

    def _native_answer(self, model: str | None, sampling: Mapping[str, float] | None) -> NativeStream:
        return NativeAnswer(self._asked, model, self._store, self._items, sampling)


def _native_body(asked: dict[str, Any], items: list[Any]) -> dict[str, Any]:
    """The body for an upstream's own endpoint. The state is the core's there too: the upstream's ids
    never reach the client (each Response gets the core's own), so its store could not be named; a
    continuation is sent as the whole conversation."""
    if "previous_response_id" not in asked:
        return asked
    forwarded = {key: value for key, value in asked.items() if key != "previous_response_id"}
    return {**forwarded, "input": items}


COUNT_PATH = "/v1/responses/input_tokens"
"""The path that counts a request's input tokens (OpenAI's ``Getinputtokencounts``)."""
_NOT_COUNTED = ("stream", "store", "background", "max_output_tokens")


def _token_counts(tokens: int) -> dict[str, Any]:
    """OpenAI's ``TokenCountsResource``."""
    return {"object": "response.input_tokens", "input_tokens": tokens}


class ResponsesFrontEnd(FrontEnd):
    """``POST /v1/responses`` over the core, with ``store``'s Responses (``GET``/``DELETE
    /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``), the input token count (``POST
    /v1/responses/input_tokens``) and the WebSocket mode."""

    def __init__(self, store: Store, max_bytes: int | None = None) -> None:
        routes = (
            StateRoute("/v1/responses/{response_id}/input_items", ("GET",), self._stored),
            StateRoute("/v1/responses/{response_id}/cancel", ("POST",), self._stored),
            StateRoute("/v1/responses/{response_id}", ("GET", "DELETE"), self._stored),
        )
        counting = CountRoute(COUNT_PATH, self._count_request, _token_counts)
        super().__init__(RESPONSES, routes, counting, SocketRoute(NATIVE_PATH, self._socket))
        self.store = store
        self.max_bytes = max_bytes
        """The most bytes a continuation and its conversation may be together (``--max-body``), and
        a WebSocket message."""
        self.socket_lifetime = CONNECTION_LIFETIME
        """Seconds a WebSocket lasts (the spec's 60 minutes)."""
        self.socket_memory = SocketMemory()
        """What this server's sockets remember of their unstored responses, bounded together."""

    async def translate(self, raw: bytes, *, keep_refusal: bool = False) -> Translation:
        asked = await off_the_loop(lambda: self._parsed(raw, keep_refusal), heavy=is_large(raw))
        return await self._translation(asked, raw, keep_refusal)

    async def _count_request(self, raw: bytes) -> Translation:
        """An input_tokens body (``TokenCountsBody``: a Responses request without what only generating
        reads) translated as a Responses request that is neither streamed nor stored."""
        asked = await off_the_loop(lambda: self._counted(raw), heavy=is_large(raw))
        return await self._translation(asked, raw, keep_refusal=False)

    @staticmethod
    def _counted(raw: bytes) -> dict[str, Any]:
        asked = {key: value for key, value in parse_json_object(raw).items() if key not in _NOT_COUNTED}
        validate_request(SCHEMA, asked)
        return asked

    async def _translation(self, asked: dict[str, Any], raw: bytes, keep_refusal: bool) -> Translation:
        """``asked`` (read from ``raw``) with the conversation it continues, as the core's request."""
        # The conversation previous_response_id names, bounded with this body as a fresh request is.
        previous = await previous_items(self.store, asked, body_size=len(raw), max_bytes=self.max_bytes)
        items = [*previous, *input_items(asked)]
        # A continuation's conversation may be any size, however short its body: always in a thread.
        heavy = is_large(raw) or bool(previous)
        return await off_the_loop(lambda: self._translated(asked, previous, items, keep_refusal), heavy=heavy)

    @staticmethod
    def _parsed(raw: bytes, keep_refusal: bool) -> dict[str, Any]:
        asked = parse_json_object(raw)
        if not keep_refusal:
            validate_request(SCHEMA, asked)
        return asked

    def _translated(
        self, asked: dict[str, Any], previous: list[Any], items: list[Any], keep_refusal: bool
    ) -> Translation:
        try:
            if keep_refusal:
                validate_request(SCHEMA, asked)
            chat = translate_request(asked, previous)
            self._checked(chat)
        except APIError as refused:
            if not keep_refusal:
                raise
            return ResponsesTranslation(asked, None, self.store, items, refused)
        return ResponsesTranslation(asked, chat, self.store, items)

    @staticmethod
    def _checked(chat: ChatTranslation) -> None:
        """The chat request checked as a chat request is, its errors in the client's names."""
        try:
            validate_request("chat_completion_request", chat.chat)
            check_given_schemas(chat.chat)
        except APIError as refused:
            raise type(refused)(refused.status, chat.error(refused.body)) from None

    def error(self, body: dict[str, Any], status: int) -> dict[str, Any]:
        return responses_error(body)

    async def _stored(self, request: Request) -> Response:
        response_id = request.path_params["response_id"]
        if request.url.path.endswith("/input_items"):
            return await list_input_items(self.store, response_id, request.query_params)
        if request.url.path.endswith("/cancel"):
            return await cancel_response(self.store, response_id)
        if request.method == "DELETE":
            return await delete_response(self.store, response_id)
        return await retrieve_response(self.store, response_id, request.query_params)

    async def _socket(self, websocket: WebSocket, answering: Answering) -> None:
        """One WebSocket's turns: requests of a front-end like this one, on the socket's own store."""
        socket_store = SocketStore(self.store, self.socket_memory)
        front_end = ResponsesFrontEnd(socket_store, self.max_bytes)
        app = answering(front_end)
        try:
            await serve_socket(websocket, app, socket_store, self.max_bytes, self.socket_lifetime)
        finally:
            socket_store.forget()

    def redact_stored(self, redact: Callable[[str], str]) -> None:
        self.store.redact = redact

    async def aclose(self) -> None:
        await self.store.aclose()
