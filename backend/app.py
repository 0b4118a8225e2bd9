"""The OpenAI-facing Starlette app: /v1/completions, /v1/chat/completions, /v1/responses (with the
stored responses' GET and DELETE), /v1/models, /health.

Every request is checked, tokenized and turned into jobs before any response byte (so a bad parameter
or an over-long prompt is a real 400, seed 003). A stream whose client goes away cancels its jobs: the
engine frees their slots before its next decode step. A non-streaming request watches for the
disconnect itself, which Starlette does not do before a response starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, NamedTuple

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from backend.engine import Event, Job, QueueFull
from backend.handoff import LoopInbox
from backend.reasoning import markers_in_template
from backend.requests import GenerationRequest, RequestError, parse_chat_request, parse_completion_request
from backend.responses import ResponseBuilder
from backend.service import Backend
from conformance.openai_errors import error_body
from conformance.request import Endpoint
from conformance.responses_state import (
    ResponseStore,
    default_store,
    delete_response,
    input_items,
    list_input_items,
    previous_items,
    remember,
    remember_terminal,
    retrieve_response,
)
from conformance.responses_translation import (
    ChatTranslation,
    TranslationError,
    responses_error,
    translate_request,
)
from conformance.sse import DONE_EVENT, encode_data
from proxy.errors import InvalidRequest
from proxy.request_validation import parse_request

__all__ = ["create_app"]

log = logging.getLogger("conformant.backend")


def _error(
    message: str,
    status: int,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(
        error_body(message, status, param=param, code=code), status_code=status, headers=headers
    )


async def _request_body(request: Request, endpoint: Endpoint) -> dict[str, Any] | Response:
    """The request's body as the proxy reads it (proxy/request_validation.py: a JSON object, checked
    against the judge's request schema), or the 400 to answer: one reading of a request for the backend
    and the proxy, so that the backend neither refuses what the judge calls valid nor serves what it
    calls invalid."""
    try:
        return parse_request(endpoint, await request.body())
    except InvalidRequest as exc:
        return JSONResponse(exc.body, status_code=exc.status)


def create_app(
    backend: Backend, *, on_shutdown: Callable[[], None] | None = None, store: ResponseStore | None = None
) -> Starlette:
    """The backend's app; ``store``: where stored Responses are kept (default: the default file, opened
    when first used)."""
    store = store or default_store()
    thinking = markers_in_template(backend.template.source)  # a thinking model's markers, if any

    async def completions(request: Request) -> Response:
        return await _generate(request, "completions", parse_completion_request)

    async def chat(request: Request) -> Response:
        return await _generate(request, "chat", parse_chat_request)

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [_model_card()]})

    async def model(request: Request) -> Response:
        if request.path_params["model"] != backend.model_id:
            return _error(
                f"The model '{request.path_params['model']}' does not exist",
                404,
                param="model",
                code="model_not_found",
            )
        return JSONResponse(_model_card())

    def _model_card() -> dict[str, Any]:
        return {
            "id": backend.model_id,
            "object": "model",
            "created": backend.created,
            "owned_by": "conformant",
        }

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok", **backend.engine.health()})

    async def _generate(
        request: Request, endpoint: Endpoint, parse: Callable[[Any], GenerationRequest]
    ) -> Response:
        body = await _request_body(request, endpoint)
        if isinstance(body, Response):
            return body
        started = _start(body, parse)
        if isinstance(started, Response):
            return started
        if started.builder.req.stream:
            return _event_stream(_chat_stream(started))
        whole = await _whole(request, started)
        return whole if isinstance(whole, Response) else JSONResponse(whole)

    def _start(
        body: Any,
        parse: Callable[[Any], GenerationRequest],
        worded: Callable[[dict[str, Any]], dict[str, Any]] = lambda error: error,
    ) -> _Generation | Response:
        """The request checked, tokenized and its jobs submitted; or the error to answer (``worded``:
        in the names of the request the client sent, for a translated one)."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        emit = LoopInbox.of(asyncio.get_running_loop()).sender(queue)
        try:
            req = parse(body)
            prompts = backend.prompts(req)
            jobs = backend.jobs(req, prompts, emit)
        except RequestError as exc:
            error = worded(error_body(exc.message, exc.status, param=exc.param, code=exc.code))
            return JSONResponse(error, status_code=exc.status)
        try:
            backend.engine.submit(jobs)
        except QueueFull as exc:
            for job in jobs:
                job.sampler.close()
            return _error(f"The server is busy: {exc}. Retry shortly.", 429, headers={"Retry-After": "1"})
        builder = ResponseBuilder(req, prompts, backend.model_id, backend.vocab.piece, thinking)
        return _Generation(builder, queue, jobs)

    async def _chat_stream(started: _Generation) -> AsyncIterator[bytes]:
        async with contextlib.aclosing(_chunks(started)) as stream:
            async for chunks in stream:
                yield b"".join(_sse(chunk) for chunk in chunks)
                if chunks and "error" in chunks[-1]:
                    return
        yield DONE_EVENT

    async def _chunks(started: _Generation) -> AsyncGenerator[list[dict[str, Any]], None]:
        """The chat chunks of a stream, a list per engine event; an error body last if a job failed. Its
        reader closes it (``aclosing``) so that a client's leaving frees the slots at once."""
        builder, queue, jobs = started
        open_jobs = {job.index for job in jobs}
        order = _FirstAppearance(len(jobs))
        try:
            while open_jobs:
                event = await queue.get()
                if event.error is not None:
                    open_jobs.discard(event.index)
                    yield [error_body(event.error, 500)]
                    return
                if event.finish_reason is not None:
                    open_jobs.discard(event.index)
                out = [chunk for ready in order.push(event) for chunk in builder.chunks(ready)]
                if out:
                    yield out
            if builder.req.include_usage:
                yield [builder.usage_chunk()]
        finally:
            # Reached on normal end too, when every job is done and cancel() does nothing; on a client
            # disconnect Starlette cancels this generator and the slots come free.
            backend.engine.cancel([job for job in jobs if job.index in open_jobs])

    async def _whole(request: Request, started: _Generation) -> dict[str, Any] | Response:
        """The whole answer's body, or the error (499 when the client left: the slots are freed)."""
        builder, queue, jobs = started
        open_jobs = {job.index for job in jobs}
        gone = asyncio.create_task(_disconnected(request))
        try:
            while open_jobs:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, gone}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    return Response(status_code=499)  # nobody is listening; the slots are freed below
                event = getter.result()
                if event.error is not None:
                    return _error(event.error, 500)
                builder.add(event)
                if event.finish_reason is not None:
                    open_jobs.discard(event.index)
            return builder.body()
        finally:
            gone.cancel()
            backend.engine.cancel([job for job in jobs if job.index in open_jobs])

    async def responses(request: Request) -> Response:
        """``POST /v1/responses``: translated to a chat request (conformance/responses_translation/, the
        proxy's translation), generated as one, its chunks or body translated back; stored as the
        request asks (conformance/responses_state/)."""
        body = await _request_body(request, "responses")
        if isinstance(body, Response):
            return body
        previous = await previous_items(store, body)
        if isinstance(previous, Response):
            return previous
        try:
            translation = translate_request(body, previous)
        except TranslationError as exc:
            return _error(exc.message, exc.status, param=exc.param, code=exc.code)
        started = _start(translation.chat, parse_chat_request, responses_error)
        if isinstance(started, Response):
            return started
        items = [*previous, *input_items(body)]
        if translation.stream:
            return _event_stream(_response_stream(started, translation, items))
        whole = await _whole(request, started)
        if isinstance(whole, Response):
            return whole
        answer = translation.response(whole)
        return JSONResponse(await remember(store, answer, items))

    async def _response_stream(
        started: _Generation, translation: ChatTranslation, items: list[Any]
    ) -> AsyncIterator[bytes]:
        events = translation.events(backend.model_id)
        yield _response_events(events.start())
        async with contextlib.aclosing(_chunks(started)) as stream:
            async for chunks in stream:
                if chunks and "error" in chunks[-1]:
                    ending = await remember_terminal(store, events.fail(chunks[-1]), items)
                    yield _response_events(ending)
                    return
                out = [event for chunk in chunks for event in events.feed(chunk)]
                if out:
                    yield _response_events(out)
        yield _response_events(await remember_terminal(store, events.finish(), items))

    async def stored(request: Request) -> Response:
        """``GET``/``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``."""
        response_id = request.path_params["response_id"]
        if request.url.path.endswith("/input_items"):
            return await list_input_items(store, response_id, request.query_params)
        if request.method == "DELETE":
            return await delete_response(store, response_id)
        return await retrieve_response(store, response_id, request.query_params)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        message = (
            "method not allowed" if status == 405 else f"no route for {request.method} {request.url.path}"
        )
        return _error(message if status in (404, 405) else "internal server error", status)

    async def server_error(_: Request, exc: Exception) -> Response:
        log.exception("unhandled error", exc_info=exc)
        return _error("internal server error", 500)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await store.aclose()
        if on_shutdown is not None:
            on_shutdown()

    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/responses/{response_id}/input_items", stored, methods=["GET"]),
        Route("/v1/responses/{response_id}", stored, methods=["GET", "DELETE"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        HTTPException: not_found,
        Exception: server_error,
    }
    return Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)


class _Generation(NamedTuple):
    """A request under way: its response builder, the engine's events for it, its jobs."""

    builder: ResponseBuilder
    queue: asyncio.Queue[Event]
    jobs: list[Job]


class _FirstAppearance:
    """Holds a choice's events until every lower index has shown up, so choices first appear in order
    (0, 1, 2...) as OpenAI streams them, whichever slot happens to produce first."""

    def __init__(self, n: int) -> None:
        self.next = 0
        self.held: dict[int, list[Event]] = {i: [] for i in range(n)}

    def push(self, event: Event) -> list[Event]:
        if event.index > self.next:
            self.held[event.index].append(event)
            return []
        out = [event]
        if event.index == self.next:
            self.next += 1
            while self.held.get(self.next):
                out += self.held.pop(self.next)
                self.next += 1
        return out


def _sse(payload: Any) -> bytes:
    return encode_data(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))


def _response_events(events: list[dict[str, Any]]) -> bytes:
    """Responses stream events with OpenAI's ``event:`` line before each ``data:``."""
    return b"".join(b"event: " + event["type"].encode() + b"\n" + _sse(event) for event in events)


def _event_stream(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        body, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
