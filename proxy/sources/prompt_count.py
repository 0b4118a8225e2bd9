"""A stream whose protocol opens with the prompt's token count: the count asked while the upstream works.

A Message's ``message_start`` carries ``usage.input_tokens`` (Anthropic's own streams, llama-server's
``/v1/messages``); the core's chunks bring the count only at their end, and a stream that opened with 0
left Claude Code's context meter at 0 for the whole turn (Q88). The prompt is counted as the upstream
reads it (``prompt_tokens``, as ``POST /v1/messages/count_tokens`` counts it: proxy/counting.py),
asked at the same time as the answer, so that the wait for a long prompt's first token covers it; the
output is told the count before its opening. A count that has not come once the first chunks are there
is waited for at most ``GRACE`` seconds, and never past the writer's first-byte deadline
(``FIRST_CHUNKS_DUE``: an upstream that answered in time is not a 504 for the count's sake), then given
up: the stream opens with 0, and ``message_delta`` carries the answer's own count as it always does. So
an upstream whose tokenizer never answers costs each of its Messages streams that half second (measured
against a raw upstream: 0.56-0.60 s a stream, 0.034 s without the count); one without a counting route
of its own is asked it once (``counting_paths``). An upstream that serves one request at a time
(llama-cpp-python), or one not known yet not to, is asked the count first (waited for at most
``FIRST_GRACE``), then the answer: asked beside it, the count's request broke its stream off (CI's run
of the Messages clients against it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, NamedTuple

from conformance.api_errors import APIError
from conformance.protocols.front_end import Output

from ..errors import error_from_payload, is_error_payload
from ..normalizer import Repairs
from ..routing.replica import NO_ROUTE, Replica
from .base import FIRST_CHUNKS_DUE, Attempts, Source

__all__ = ["GRACE", "PromptCount", "PromptCounted", "prompt_tokens"]

GRACE = 0.5
"""Seconds the first chunks wait for a count still under way (a tokenizer answers a 40,000-token prompt
in far less; an upstream that is slow to count should not hold up a fast first token)."""

FIRST_GRACE = 0.1
"""Seconds the answer waits for a count asked before it (``PromptCounted(first=True)``): every one of them
is the answer's, so fewer than after the first chunks."""

_EARLY = 0.01
"""Seconds before the writer's first-byte deadline that the wait ends (uvloop's timers fire on whole
milliseconds, up to one early)."""


class PromptCounted(Attempts):
    """``source``'s stream, its output told the prompt's tokens (``counting``) before it opens."""

    def __init__(
        self, source: Source, counting: Awaitable[int | None], output: Output, *, first: bool = False
    ) -> None:
        self._current = source
        self._spent = Repairs()
        self._counting = counting
        self._output = output
        self._first = first
        """Count before the answer is asked, not beside it: an upstream that serves one request at a
        time (llama-cpp-python, ``UpstreamTraits.serial``) breaks its stream off for the count's."""
        self._task: asyncio.Future[int | None] | None = None

    @property
    def failure(self) -> APIError | None:
        return self._current.failure if self._current is not None else None

    async def start(self) -> list[dict[str, Any]]:
        assert self._current is not None
        self._task = task = asyncio.ensure_future(self._counting)
        if self._first:
            await self._counted(task, FIRST_GRACE)
            return await self._current.start()
        chunks = await self._current.start()
        await self._counted(task, GRACE)
        return chunks

    async def _counted(self, task: asyncio.Future[int | None], grace: float) -> None:
        """The count told to the output, waited for within ``grace`` and the writer's deadline."""
        due = FIRST_CHUNKS_DUE.get()
        if due is not None:
            grace = min(grace, due - asyncio.get_running_loop().time() - _EARLY)
        if not task.done() and grace > 0:
            await asyncio.wait((task,), timeout=grace)
        if not task.done():
            task.cancel()  # (given up: the upstream's tokenizer is not kept busy for nothing)
        elif not task.cancelled() and task.exception() is None and (tokens := task.result()) is not None:
            self._output.prompt_counted(tokens)

    async def next_batch(self) -> list[dict[str, Any]] | None:
        assert self._current is not None
        return await self._current.next_batch()

    async def aclose(self) -> None:
        task = self._task
        if task is None:
            if asyncio.iscoroutine(self._counting):
                self._counting.close()  # never started: not left to warn that it was never awaited
        else:
            task.cancel()  # (the answer failed, or the client left, before the count came)
            task.add_done_callback(_taken)
        assert self._current is not None
        await self._current.aclose()


class PromptCount(NamedTuple):
    """A prompt's tokens as an upstream counted them, and what else its answers said."""

    tokens: int | None
    answered: bool
    """Whether the upstream answered at all: one that did not may only be down or restarting."""
    refused: APIError | None = None
    """The upstream's own counting route's refusal of the request itself (an image its model cannot
    read): the client's answer, as generating would be, where no tokenizer counted it."""


_REFUSED = frozenset({400, 413, 422})
"""What a counting route answers a request it cannot serve as asked (not a route it lacks, nor the
proxy's own key or rate)."""


async def prompt_tokens(
    replica: Replica,
    body: dict[str, Any],
    own_route: tuple[str, Any] | None,
    timeout: float,  # noqa: ASYNC109
) -> PromptCount:
    """The tokens of core request ``body``'s prompt as ``replica`` reads it: its adapter's count (the
    upstream's template and tokenizer), else, and before the adapter's estimate, the count of the
    upstream's own counting route (``own_route``: its path and the client's body, as the bundled
    backend and llama-server count a Message)."""
    await replica.detect()  # (a server that was loading when the proxy started: its tokenizer is its own)
    counted = await replica.adapter.prompt_tokens(replica.upstream, body, timeout)
    tokens = None if counted is None else counted.tokens
    if (counted is not None and not counted.estimated) or own_route is None:
        return PromptCount(tokens, True)
    path, asked = own_route
    known = replica.upstream.traits.counting_paths
    if known.get(path) is False:
        return PromptCount(tokens, True)
    status, answer = await replica.upstream.answer("POST", path, asked, timeout=timeout, refusals=True)
    own = answer.get("input_tokens") if isinstance(answer, dict) else None
    if isinstance(own, int) and not isinstance(own, bool) and own >= 0:
        known[path] = True
        return PromptCount(own, True)
    if status in NO_ROUTE:
        known[path] = False
    elif status in _REFUSED and is_error_payload(answer):
        refused = error_from_payload(answer, status).redacted(replica.config.upstream_api_key)
        return PromptCount(None, True, refused)
    return PromptCount(tokens, status is not None)


def _taken(task: asyncio.Future[int | None]) -> None:
    """A count that failed is nobody's error: its exception taken, not logged as never retrieved."""
    if not task.cancelled():
        task.exception()
