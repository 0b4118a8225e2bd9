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
        self._queue: asyncio.Queue[tuple[int, list[dict[str, Any]] | None]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._live = 0

    async def start(self) -> list[dict[str, Any]]:
        # The places of all the requests, taken together: each waits for the others' first chunks,
        # and fan-outs that each held some of theirs would wait on each other (proxy/admission.py).
        reservation = await self._upstream.reserve(len(self._sources))
        for source in self._sources:
            source.reservation = reservation
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(source.start()) for source in self._sources]
        except* APIError as errors:
            await self.aclose()
            raise errors.exceptions[0] from None
        finally:
            reservation.close()
        self.upstream_status = max(s.upstream_status or 0 for s in self._sources)
        bodies = [s.body for s in self._sources]
        if all(body is not None for body in bodies):
            self.body = merge_bodies([b for b in bodies if b is not None], self._request.n)
            self._usage = self.body.get("usage")
            return []
        return self._streamed([task.result() for task in tasks])

    def _streamed(self, firsts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """Every request's rest read as it comes; the first chunks of all of them, to send now."""
        self._live = len(self._sources)
        self._tasks = [asyncio.create_task(self._pump(i, s)) for i, s in enumerate(self._sources)]
        # A request whose whole stream came in its first read has its usage chunk here already. One
        # answered whole (an empty stream retried without stream, Q52) goes out as chunks among them.
        initial = [
            chunk
            for first, source in zip(firsts, self._sources, strict=True)
            for chunk in (first if source.body is None else source.body_chunks())
        ]
        return self._strip_usage(initial)

    async def _pump(self, position: int, source: UpstreamSource) -> None:
        while (batch := await source.next_batch()) is not None:
            if batch:
                await self._queue.put((position, batch))
            if source.failure is not None:
                break
        await self._queue.put((position, None))

    async def next_batch(self) -> list[dict[str, Any]] | None:
        while self._live and self._failure is None:
            position, batch = await self._queue.get()
            if batch is not None:
                return self._strip_usage(batch)
            self._live -= 1
            failure = self._sources[position].failure
            if failure is not None:
                await self._failed(failure)
        return self._last_batch()

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
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
