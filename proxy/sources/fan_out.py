"""``n > 1`` and prompt arrays served as single upstream requests (Q71, Q73): sent at once, their chunks
sent on as they come, or one after another without streaming, for an upstream that serves one request at
a time (``UpstreamTraits.serial``). Choices are indexed as one answer's and usage is summed once, at the
end."""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any

from conformance.api_errors import APIError
from conformance.request_info import RequestInfo

from ..errors import first_byte_timeout_error
from ..normalizer import Repairs, merge_bodies, sum_usage
from ..upstream import Upstream
from .base import Source
from .upstream import UpstreamSource

__all__ = ["ConcurrentFanOut", "SerialFanOut"]


class _FanOut(Source):
    """``n > 1`` and prompt arrays served as single requests, choices indexed, usage summed (Q71, Q73)."""

    def __init__(self, sources: list[UpstreamSource], request: RequestInfo) -> None:
        self._sources = sources
        self._request = request
        self._closed = False

    @property
    def repairs(self) -> Repairs:
        """Each request's repairs, and the fan-out itself (Q71 for n, Q73 for a prompt array)."""
        total = Repairs({"Q71" if self._request.n > 1 else "Q73": 1})
        for source in self._sources:
            total.update(source.repairs)
        return total

    async def _failed(self, failure: APIError) -> None:
        self._failure = failure
        await self.aclose()

    def _last_batch(self) -> list[dict[str, Any]] | None:
        """Once every request has answered: the usage of all of them, as the last chunk when asked for."""
        if self._closed or self._failure is not None:
            return None
        self._closed = True
        self._usage = sum_usage((s.usage for s in self._sources), self._request.n)
        if not self._request.include_usage or self._usage is None:
            return None
        return [self._sources[0].normalizer.usage_chunk(self._usage)]

    @staticmethod
    def _strip_usage(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [chunk for chunk in batch if chunk["choices"]]

    async def aclose(self) -> None:
        for source in self._sources:
            await source.aclose()


class ConcurrentFanOut(_FanOut):
    """The requests sent at once, their chunks sent on as they come."""

    def __init__(self, sources: list[UpstreamSource], request: RequestInfo, upstream: Upstream) -> None:
        """``upstream``: the one every request of ``sources`` goes to."""
        super().__init__(sources, request)
        self._upstream = upstream
        # Each request's batches as they come; None once it ended; where it failed to start, its error (an
        # APIError; any other, a fault of the proxy's own, is raised too: never waited on for an end).
        self._queue: asyncio.Queue[tuple[int, list[dict[str, Any]] | Exception | None]] = asyncio.Queue()
        self._starting: list[asyncio.Task[list[dict[str, Any]]]] = []  # each request's ``start()``
        self._tasks: list[asyncio.Task[None]] = []  # each request's chunks read on into the queue
        self._live = 0
        self._shown = 0  # the choices below this index have come (or ended), each in its turn
        self._held: dict[int, list[dict[str, Any]]] = {}  # chunks of choices above one still to come

    async def start(self) -> list[dict[str, Any]]:
        # The places of all the requests, taken together: each of them needs one before any is sent, and
        # fan-outs that each held some of theirs would wait on each other (proxy/admission.py).
        reservation = await self._upstream.reserve(len(self._sources))
        for source in self._sources:
            source.reservation = reservation
        starting = self._starting = [asyncio.create_task(source.start()) for source in self._sources]
        # Those left go back once every request has its own (or failed first).
        asyncio.gather(*starting, return_exceptions=True).add_done_callback(lambda _: reservation.close())
        try:
            if not self._request.stream and await self._answered_whole(starting):
                return []
            self._live = len(self._sources)
            self._tasks = [
                asyncio.create_task(self._pump(i, source, started))
                for i, (source, started) in enumerate(zip(self._sources, starting, strict=True))
            ]
            return await self._first_chunks()
        except BaseException:
            await self.aclose()
            raise

    async def _answered_whole(self, starting: list[asyncio.Task[list[dict[str, Any]]]]) -> bool:
        """Unstreamed: every request's answer waited for, and True once their bodies are merged into one
        (False: an upstream streamed what was asked unstreamed, and its chunks are read as a stream's)."""
        await asyncio.wait(starting)
        for task in starting:
            if (failure := task.exception()) is not None:
                raise failure
        self.upstream_status = max(s.upstream_status or 0 for s in self._sources)
        bodies = [s.body for s in self._sources]
        if not all(body is not None for body in bodies):
            return False
        self.body = merge_bodies([b for b in bodies if b is not None], self._request.n)
        self._usage = self.body.get("usage")
        return True

    async def _first_chunks(self) -> list[dict[str, Any]]:
        """The first chunks to send, as soon as there are some: against an upstream that serves one
        request at a time (llama-server with one slot) the others wait for the first to end, and waiting
        for every request's first chunks held the whole first sample back (3.6 s of 120 tokens). A
        request that fails before any chunk was sent fails the response with its status."""
        return await self._next_of_any() or []

    async def _next_of_any(self) -> list[dict[str, Any]] | None:
        """The next chunks to send of any request (None once every one ended); a request's failure
        raised."""
        while self._live:
            position, batch = await self._queue.get()
            source = self._sources[position]
            self.upstream_status = max(self.upstream_status or 0, source.upstream_status or 0)
            if isinstance(batch, Exception):
                raise batch
            if batch is None:  # it ended: the choices above it need not wait for it any longer
                self._live -= 1
                if source.failure is not None:
                    raise source.failure
                chunks = []
            elif not (chunks := self._strip_usage(batch)):
                continue
            if sendable := self._in_order(position, chunks):
                return sendable
        return None

    def _in_order(self, position: int, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What may be sent now of request ``position``'s ``chunks`` (its choice's index), with whatever
        was held for it: a choice first seen before a lower index would be taken for that one by a
        client that appends choices as they come (openai-python's stream accumulator does), so a choice
        waits until each lower one has come or ended; one that ended comes with ``[]``."""
        if position < self._shown:
            return chunks
        self._held.setdefault(position, []).extend(chunks)
        sendable: list[dict[str, Any]] = []
        while self._shown in self._held:
            sendable += self._held.pop(self._shown)
            self._shown += 1
        return sendable

    async def _pump(
        self, position: int, source: UpstreamSource, started: asyncio.Task[list[dict[str, Any]]]
    ) -> None:
        try:
            first = await started
        except Exception as failure:  # raised where the chunks are read (see the queue)
            await self._queue.put((position, failure))
            return
        # One answered whole (an empty stream asked again without streaming, Q52) goes out as chunks.
        first = first if source.body is None else source.body_chunks()
        if first:
            await self._queue.put((position, first))
        while source.body is None and (batch := await source.next_batch()) is not None:
            if batch:
                await self._queue.put((position, batch))
            if source.failure is not None:
                break
        await self._queue.put((position, None))

    async def next_batch(self) -> list[dict[str, Any]] | None:
        if self._failure is None:
            try:
                if (batch := await self._next_of_any()) is not None:
                    return batch
            except APIError as failure:
                await self._failed(failure)
        return self._last_batch()

    async def aclose(self) -> None:
        tasks: list[asyncio.Task[Any]] = [*self._starting, *self._tasks]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._starting, self._tasks = [], []
        await super().aclose()


class SerialFanOut(_FanOut):
    """The requests sent one after another, each answered whole and sent on as it comes: for an upstream
    that serves one at a time, whose streams would break each other off (``UpstreamTraits.serial``)."""

    def __init__(
        self,
        sources: list[UpstreamSource],
        request: RequestInfo,
        *,
        first_byte_timeout: float = math.inf,
    ) -> None:
        """Each request after the first (which the caller bounds) is given ``first_byte_timeout``
        seconds."""
        super().__init__(sources, request)
        self._first_byte_timeout = first_byte_timeout
        self._next = 0  # the next request to send

    async def start(self) -> list[dict[str, Any]]:
        try:
            first = await self._whole()
        except APIError:
            await self.aclose()
            raise
        self.upstream_status = self._sources[0].upstream_status
        return first

    async def _whole(self) -> list[dict[str, Any]]:
        """The next request's answer, whole, as chunks."""
        source = self._sources[self._next]
        self._next += 1
        chunks = await source.start()
        if source.body is not None:
            chunks = source.body_chunks()
        else:  # answered with a stream after all (a stream-only upstream)
            while (batch := await source.next_batch()) is not None:
                chunks += batch
            if source.failure is not None:
                raise source.failure
        return self._strip_usage(chunks)

    async def next_batch(self) -> list[dict[str, Any]] | None:
        if self._next < len(self._sources) and self._failure is None:
            try:
                try:
                    async with asyncio.timeout(self._first_byte_timeout):
                        return await self._whole()
                except TimeoutError:
                    raise first_byte_timeout_error() from None
            except APIError as failed:
                await self._failed(failed)
        return self._last_batch()
