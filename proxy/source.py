"""Upstream responses as sources of normalized output: one upstream request, or a fan-out of several.

A source's ``start()`` opens the upstream and returns once the first normalized chunks exist (or the
whole body, for a JSON answer), so the caller can still choose the HTTP status; ``next_batch()`` then
yields the rest. Failures before ``start()`` returns are raised; later ones land in ``failure``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any

from conformance.request import message_texts
from conformance.sse import SSELineTooLong, SSEParser

from . import jsoncodec
from .adapters import Adapter, UpstreamCall
from .adapters.base import without_streaming
from .admission import Reservation
from .emulation import synthesize_chunks
from .errors import ProxyError, UpstreamTimeout
from .normalizer import (
    Identity,
    Repairs,
    RequestInfo,
    StreamNormalizer,
    generated_text,
    merge_bodies,
    normalize_body,
    sum_usage,
)
from .upstream import MAX_JSON_BODY, Upstream, UpstreamStream

__all__ = ["ConcurrentFanOut", "SerialFanOut", "Source", "UpstreamSource", "prompt_text"]

_DRAIN_TIMEOUT = 0.05
_COUNT_TIMEOUT = 2.0  # seconds for the calls to the upstream's tokenizer of one answer
# A stream whose usage the proxy counts holds its text only up to this (a choice's characters and a
# string object's cost for each part); past it the text is counted and let go. Kept whole, a 200 MB
# stream took the proxy to a 409 MB peak (issue 18).
_COUNT_PIECE = 1024 * 1024


def prompt_text(body: dict[str, Any]) -> str:
    """The request's text for counting prompt tokens (chat: the message texts, without the template)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    return "\n".join(message_texts(body.get("messages")))


class Source:
    """What the response writer reads from."""

    body: dict[str, Any] | None = None
    upstream_status: int | None = None
    secret: str | None = None
    """The key of the upstream this source read from where it is not the proxy's own
    ``--upstream-api-key`` (a routed replica's, from the file), known once ``start()`` returned: cut
    out of the bodies sent too."""
    _failure: ProxyError | None = None
    _usage: dict[str, Any] | None = None

    @property
    def repairs(self) -> Repairs:
        """What this source repaired (its own, and its normalizer's): the response writer records it
        in the request's repairs once the response is done."""
        return Repairs()

    async def start(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def next_batch(self) -> list[dict[str, Any]] | None:
        raise NotImplementedError

    @property
    def failure(self) -> ProxyError | None:
        """What ended the source after ``start()`` returned, if anything did."""
        return self._failure

    @property
    def usage(self) -> dict[str, Any] | None:
        """The answer's usage once it is known."""
        return self._usage

    async def aclose(self) -> None:
        raise NotImplementedError


class UpstreamSource(Source):
    def __init__(
        self,
        upstream: Upstream,
        adapter: Adapter,
        request: RequestInfo,
        call: UpstreamCall,
        *,
        prompt: str,
        max_line_bytes: int,
        headers: list[tuple[bytes, bytes]] | None = None,
        identity: Identity | None = None,
        repairs: Repairs | None = None,
        index_base: int = 0,
        emit_usage: bool | None = None,
    ) -> None:
        self._upstream = upstream
        self._adapter = adapter
        self._request = request
        self._call = call
        self._prompt = prompt
        self._headers = headers
        self._repairs = repairs if repairs is not None else Repairs()
        self.identity = identity or Identity(request.endpoint, request.model)
        self.normalizer = StreamNormalizer(
            request,
            identity=self.identity,
            repairs=self._repairs,
            index_base=index_base,
            emit_usage=emit_usage,
        )
        self._parser = SSEParser(max_line_bytes=max_line_bytes)
        self._stream: UpstreamStream | None = None
        self._pending: bytes | None = None
        self._ended = False
        self._received = 0
        self._counted: int | None = 0  # completion tokens counted as the stream came; None: not countable
        self._failure: ProxyError | None = None  # the transport's, or the stream's framing
        self.reservation: Reservation | None = None
        """The places of the fan-out this request is part of, once it took them (``ConcurrentFanOut``)."""

    @property
    def repairs(self) -> Repairs:
        return self._repairs

    @property
    def failure(self) -> ProxyError | None:
        if self.body is not None:
            return None  # answered whole: a stream that failed before it (Q52) no longer counts
        return self._failure or self.normalizer.failure

    @property
    def usage(self) -> dict[str, Any] | None:
        return self.normalizer.usage if self.body is None else self.body.get("usage")

    def body_chunks(self) -> list[dict[str, Any]]:
        """The whole answer (``body``) as stream chunks, its choices indexed as its stream's would be."""
        assert self.body is not None
        chunks = synthesize_chunks(self.body, self._request)
        for chunk in chunks:
            for choice in chunk["choices"]:
                choice["index"] += self.normalizer.index_base
        return chunks

    async def start(self) -> list[dict[str, Any]]:
        stream = await self._open(self._call.body)
        content_type = stream.content_type
        if "event-stream" not in content_type:
            first = await stream.read()
            if first is not None and ("json" in content_type or first.lstrip()[:1] in (b"{", b"[")):
                await self._read_body(first + await stream.read_all(MAX_JSON_BODY))
                return []
            self._pending = first
        batch = await self._first_batch()
        failure = self.failure
        if failure is None:
            return batch
        if await self._retried_without_stream(failure):
            return []
        raise failure

    async def _open(self, body: dict[str, Any]) -> UpstreamStream:
        """The upstream's answer to ``body``, its head read; an error (or a redirect the proxy does not
        follow) raised as the client's error."""
        stream = self._stream = await self._upstream.open(
            self._call.path, body, headers=self._headers, reservation=self.reservation
        )
        self.upstream_status = stream.status
        if stream.status >= 300:
            raise await stream.error()
        return stream

    async def _first_batch(self) -> list[dict[str, Any]]:
        """The stream's first chunks to send ([] when it ended or failed first)."""
        while (batch := await self.next_batch()) is not None and self.failure is None:
            if batch:
                return batch
        return []

    async def _retried_without_stream(self, failure: ProxyError) -> bool:
        """An upstream stream that ended before its first byte, asked once more without streaming: True
        when that answered (its body is served instead), False when the failure stands.

        llama-cpp-python sends its SSE headers before running the model, so a failure there (context
        overflow) can only end the stream empty (Q52); its non-streamed answer carries the real error
        (400 ``context_length_exceeded``), which is raised. Not an upstream still silent at a timeout:
        asking again would run its generation twice.
        """
        if (
            self._received
            or self._call.body.get("stream") is not True
            or isinstance(failure, UpstreamTimeout)
        ):
            return False
        self._repairs.add("Q52")
        self._failure = None
        stream = await self._open(without_streaming(self._call.body))
        await self._read_body(await stream.read_all(MAX_JSON_BODY))
        return True

    async def _read_body(self, raw: bytes) -> None:
        try:
            obj = jsoncodec.loads(raw)
        except ValueError:
            try:  # invalid UTF-8 in a string becomes U+FFFD, as in a stream
                obj = jsoncodec.loads(raw.decode("utf-8", "replace"))
            except ValueError:
                raise ProxyError.make("the upstream server sent a body that is not valid JSON", 502) from None
        if self._call.translate is not None:
            obj = self._call.translate(obj)
        body = normalize_body(obj, self._request, repairs=self._repairs, identity=self.identity)
        self._learn()
        if body["usage"] is None:
            texts = [generated_text(choice) for choice in body["choices"]]
            texts = texts if self._request.generates else []  # (an echo, not generated)
            # No tokenizer and no usage: words are the closest count a JSON body offers.
            body["usage"] = await self._count_usage(texts, sum(len(t.split()) for t in texts))
        self.body = body

    async def next_batch(self) -> list[dict[str, Any]] | None:
        """The next normalized chunks ([] when a read gave nothing to send), None at the end."""
        if self._ended or self._stream is None:
            return None
        try:
            raw = self._pending if self._pending is not None else await self._stream.read()
            self._pending = None
            if raw is None:
                return await self._finish(self._parser.close())
            self._received += len(raw)
            return await self._normalized(raw)
        except SSELineTooLong:
            self._failure = ProxyError.make("the upstream server sent an SSE line over the size limit", 502)
        except ValueError:
            self._failure = ProxyError.make("the upstream server sent an event that is not valid JSON", 502)
        except ProxyError as exc:  # the transport's (the normalizer reports its own in ``failure``)
            self._failure = exc
        await self._end()
        return None

    async def _normalized(self, raw: bytes) -> list[dict[str, Any]]:
        """The chunks the normalizer makes of the events in ``raw``; the source ends where it fails,
        or where the upstream is done."""
        normalizer = self.normalizer
        out: list[dict[str, Any]] = []
        translate = self._call.translate
        for block in self._parser.feed(raw):
            if translate is not None and block.data is not None and block.data.strip()[:1] == "{":
                out += normalizer.feed_payload(translate(jsoncodec.loads(block.data)))
            else:
                out += normalizer.feed(block)
            if normalizer.failure is not None:
                await self._end()
                return out
        if normalizer.needs_usage:
            await self._count_as_it_comes(normalizer.take_texts(_COUNT_PIECE))
        if normalizer.upstream_done or normalizer.all_stopped:
            if normalizer.all_stopped and self._request.generates:
                self._repairs.add("Q76")
            return out + (await self._finish(None) or [])
        return out

    async def _end(self) -> None:
        await self.aclose()
        self._ended = True

    async def _finish(self, tail: Any) -> list[dict[str, Any]] | None:
        """End of the upstream: cancel what is left of it, then close the normalizer."""
        self._ended = True
        normalizer = self.normalizer
        if normalizer.upstream_done and self._stream is not None and not await self._drain(self._stream):
            # [DONE], then the connection cut before the body's end: llama-cpp-python interrupts a
            # stream so when another request waits for its one model (and says [DONE] first). What
            # it sent is then no whole answer.
            normalizer.connection_broke()
        await self.aclose()
        out = normalizer.feed(tail) if tail is not None else []
        usage = None
        if normalizer.needs_usage and normalizer.failure is None:
            texts = normalizer.completion_texts()
            usage = await self._count_usage(texts, normalizer.completion_tokens(), self._counted)
        out += normalizer.close(usage)
        self._learn()
        if normalizer.interrupted and normalizer.failure is not None:
            # A choice was left without its final chunk (the close failed it).
            self._upstream.traits.broke_off_stream()
        return out

    def _learn(self) -> None:
        """What the answer taught of the upstream: reasoning sent as ``reasoning`` (Q39) is read so too."""
        if self._repairs["Q39"]:
            self._upstream.traits.sent_reasoning_as("reasoning")

    @staticmethod
    async def _drain(stream: UpstreamStream) -> bool:
        """Read the few bytes after [DONE] (the chunked terminator) so the connection can be reused;
        False when the connection broke before the body's end instead (a slow end is no break)."""
        try:
            for _ in range(4):
                if await stream.read(_DRAIN_TIMEOUT) is None:
                    break
        except ProxyError as failed:
            return isinstance(failed, UpstreamTimeout)
        return True

    def _counter(self) -> Callable[[str], Awaitable[int | None]]:
        """A token counter of texts with the upstream's tokenizer (None when it has none or is slow),
        all its calls together within a quarter of the idle and first-byte timeouts at most: the client
        waits for them after its last token (or before its first, on an answer in one read)."""
        config = self._upstream.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(_COUNT_TIMEOUT, config.idle_timeout / 4, config.first_byte_timeout / 4)

        async def count(text: str) -> int | None:
            left = deadline - loop.time()
            return await self._adapter.count_tokens(self._upstream, text, left) if left > 0 else None

        return count

    async def _count_as_it_comes(self, texts: list[str]) -> None:
        """Count ``texts`` (taken from a long stream's kept text) into ``_counted``; once a count fails
        the stream's usage is estimated, and what is taken is let go uncounted."""
        if not texts or self._counted is None:
            return
        count = self._counter()
        for text in texts:
            counted = await count(text)
            if counted is None:
                self._counted = None
                return
            self._counted += counted

    async def _count_usage(
        self, texts: list[str], fallback_completion: int, counted: int | None = 0
    ) -> dict[str, Any]:
        """Usage the upstream did not report: counted with its tokenizer when it has one, and answers in
        time (``counted``: tokens already counted as the stream came, None when that failed); else
        estimated (the prompt's words, ``fallback_completion``)."""
        self._repairs.add("Q28")
        count = self._counter()
        prompt = await count(self._prompt) if self._prompt else 0
        if prompt is None:
            prompt = len(self._prompt.split())  # no tokenizer: words, the same estimate as the completion's
        completion = counted
        for text in texts:
            if completion is None:
                break
            tokens = await count(text) if text else 0
            completion = None if tokens is None else completion + tokens
        if completion is None:
            completion = fallback_completion
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    async def aclose(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.aclose()


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

    async def _failed(self, failure: ProxyError) -> None:
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
        except* ProxyError as errors:
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
        except ProxyError:
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
                    raise ProxyError.first_byte_timeout() from None
            except ProxyError as failed:
                await self._failed(failed)
        return self._last_batch()
