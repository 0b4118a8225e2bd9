"""The route of every protocol that generates, on the engine: one function, served for each front-end of
the backend's table (backend/routes.py).

The front-end turns the client's body into the core's request (a chat or completions body: the judge's
request schema first, so that the backend neither refuses what the judge calls valid nor serves what it
calls invalid), which is checked, tokenized and turned into jobs before any response byte (so a bad
parameter or an over-long prompt is a real 400, seed 003). The engine's events become chat or completion
chunks (backend/answers.py), which the front-end's output writes in the client's protocol: the same
output the proxy writes through (conformance/protocols/). A stream whose client goes away cancels its
jobs: the engine frees their slots before its next decode step. A non-streaming request watches for the
disconnect itself, which Starlette does not do before a response starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from backend.answers import AnswerBuilder
from backend.engine import Event, Job, QueueFull
from backend.handoff import LoopInbox
from backend.reasoning import ThinkingMarkers
from backend.requests import GenerationRequest, SamplingParams, parse_chat_request, parse_completion_request
from backend.service import Backend, Prompt
from conformance.api_errors import APIError
from conformance.openai_errors import error_body
from conformance.protocols.front_end import FrontEnd, Output, pieces_of
from conformance.protocols.sampling import SAMPLING_FIELDS
from conformance.request import Endpoint

__all__ = ["PARSERS", "Generation", "generate"]

SAMPLING_DEFAULTS = {name: float(getattr(SamplingParams(), name)) for name in SAMPLING_FIELDS}
"""The sampler's values where a request names none: what a Response states it was sampled with."""

PARSERS: dict[Endpoint, Callable[[Any], GenerationRequest]] = {
    "chat": parse_chat_request,
    "completions": parse_completion_request,
}
"""The engine's reading of each of the core's requests."""

_Worded = Callable[[dict[str, Any], int], dict[str, Any]]


@dataclass(slots=True)
class Generation:
    """What every generating route of the backend reads: the model and engine, and a thinking model's
    markers (read once from its template)."""

    backend: Backend
    thinking: ThinkingMarkers | None


async def generate(generation: Generation, front_end: FrontEnd, request: Request) -> Response:
    """``POST`` to one of ``front_end``'s paths (see the module's docstring)."""
    try:
        translation = await front_end.translate(await request.body())
    except APIError as refused:
        return JSONResponse(refused.body, status_code=refused.status)  # worded by the front-end
    parse = PARSERS[front_end.endpoint]
    while True:
        assert translation.body is not None  # (a refusal is kept only where asked to)
        try:
            started = await _start(
                generation, translation.body, parse, front_end.error, names_stop=translation.names_stop
            )
            break
        except APIError as refused:
            # A context overflow the protocol asks to be cut instead (Responses' ``truncation: "auto"``).
            shorter = translation.shortened(refused)
            if shorter is None:
                return JSONResponse(front_end.error(refused.body, refused.status), status_code=refused.status)
            translation = shorter
    if isinstance(started, Response):
        return started
    output = translation.output(generation.backend.model_id, SAMPLING_DEFAULTS)
    if translation.states_prompt_tokens:  # (tokenized by now: a Message's stream opens with the count)
        output.prompt_counted(started.builder.usage()["prompt_tokens"])
    if translation.stream:
        return _event_stream(_streamed(generation, started, output))
    whole = await _whole(generation, request, started, front_end.error)
    return whole if isinstance(whole, Response) else JSONResponse(await output.body(whole))


def _prepared(
    backend: Backend, body: Any, parse: Callable[[Any], GenerationRequest], emit: Callable[[Event], None]
) -> tuple[GenerationRequest, list[Prompt], list[Job]]:
    """A request read, its prompts and its jobs, made in one worker thread (``_start``)."""
    req = parse(body)
    prompts = backend.prompts(req)
    return req, prompts, backend.jobs(req, prompts, emit)


@dataclass(slots=True)
class _Started:
    """A request under way: its response builder, the engine's events for it, its jobs."""

    builder: AnswerBuilder
    queue: asyncio.Queue[Event]
    jobs: list[Job]


async def _start(
    generation: Generation,
    body: Any,
    parse: Callable[[Any], GenerationRequest],
    worded: _Worded,
    *,
    names_stop: bool = False,
) -> _Started | Response:
    """The request checked, tokenized and its jobs submitted; or the answer of a full queue
    (``worded``: in the names of the protocol the client sent, for a translated one; ``names_stop``: it
    names the stop sequence met, ``Translation.names_stop``). Raises the ``APIError`` of a request
    that cannot be served (a bad parameter, a prompt past the context)."""
    backend = generation.backend
    queue: asyncio.Queue[Event] = asyncio.Queue()
    emit = LoopInbox.of(asyncio.get_running_loop()).sender(queue)
    # Read, rendered, tokenized and its grammar made and parsed in a worker thread: llama.cpp's tokenizer
    # takes time past linear in a prompt's special tokens (10,000 one-word messages 5 s, 40,000 150 s), a
    # grammar of 100,000 alternatives 48 s to parse, and a schema of 100,000 properties 1.5 s to check
    # and convert, each of which held the event loop (/health with it).
    req, prompts, jobs = await asyncio.to_thread(_prepared, backend, body, parse, emit)
    try:
        backend.engine.submit(jobs)
    except QueueFull as exc:
        for job in jobs:
            job.sampler.close()
        busy = error_body(f"The server is busy: {exc}. Retry shortly.", 429)
        return JSONResponse(worded(busy, 429), status_code=429, headers={"Retry-After": "1"})
    builder = AnswerBuilder(
        req, prompts, backend.model_id, backend.vocab.piece, generation.thinking, names_stop=names_stop
    )
    return _Started(builder, queue, jobs)


async def _streamed(generation: Generation, started: _Started, output: Output) -> AsyncIterator[bytes]:
    """The stream in the client's protocol: the output's opening at once (a Response's first events),
    each batch of chunks as the engine makes it, then its end (or the error that broke it off: the
    engine's, or a Response's text that could not be kept, ``Output.failure``). A long event that
    cannot be finished (its text's file failing to read) raises here, and nothing follows its half:
    uvicorn closes the connection, and the client's SSE parser drops the event unread."""
    # (each part bytes, or the pieces of a long event: a Response's spooled text, front_end.Pieces)
    for piece in pieces_of(output.opening([])):
        if piece:
            yield piece
    async with contextlib.aclosing(_chunks(generation, started)) as stream:
        async for chunks in stream:
            if chunks and "error" in chunks[-1]:
                for piece in pieces_of(await output.tail(chunks[-1], None)):
                    yield piece
                return
            for piece in pieces_of(output.events(chunks)):
                yield piece
            if output.failure is not None:  # a text it could not keep (protocols/spooled_text.py)
                for piece in pieces_of(await output.tail(output.failure.body, None)):
                    yield piece
                return
    for piece in pieces_of(await output.tail(None, None)):
        yield piece


async def _chunks(generation: Generation, started: _Started) -> AsyncGenerator[list[dict[str, Any]], None]:
    """The chunks of a stream, a list per engine event; an error body last if a job failed. Its reader
    closes it (``aclosing``) so that a client's leaving frees the slots at once."""
    builder, queue, jobs = started.builder, started.queue, started.jobs
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
        generation.backend.engine.cancel([job for job in jobs if job.index in open_jobs])


async def _whole(
    generation: Generation, request: Request, started: _Started, worded: _Worded
) -> dict[str, Any] | Response:
    """The whole answer's body, or the error (499 when the client left: the slots are freed)."""
    builder, queue, jobs = started.builder, started.queue, started.jobs
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
                return JSONResponse(worded(error_body(event.error, 500), 500), status_code=500)
            builder.add(event)
            if event.finish_reason is not None:
                open_jobs.discard(event.index)
        return builder.body()
    finally:
        gone.cancel()
        generation.backend.engine.cancel([job for job in jobs if job.index in open_jobs])


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


def _event_stream(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        body, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
