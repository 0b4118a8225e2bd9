"""One upstream request as a source of normalized output: its stream or JSON body normalized, the usage
counted when the upstream gives none (Q28), an empty stream asked again whole (Q52)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from conformance import jsoncodec
from conformance.api_errors import APIError
from conformance.protocols.front_end import CHUNKS
from conformance.request_info import RequestInfo
from conformance.sse import SSELineTooLong, SSEParser

from ..adapters import Adapter, UpstreamCall
from ..adapters.base import requested_limit, without_streaming
from ..adapters.template_overhead import estimated_prompt
from ..admission import Reservation
from ..errors import UpstreamTimeout, naming_its_input
from ..normalizer import (
    Identity,
    Repairs,
    StreamNormalizer,
    generated_text,
    normalize_body,
    within_limit,
)
from ..normalizer.plain_chunks import Encode, PlainChunks
from ..normalizer.usage import (
    USAGE_ESTIMATED,
    estimated_tokens,
    generated_tokens,
    shown_choices,
    upstream_text,
)
from ..reshape import synthesize_chunks
from ..upstream import MAX_JSON_BODY, Upstream, UpstreamStream
from .base import Source

__all__ = ["UpstreamSource"]


def _logprobs_refused() -> APIError:
    """The 400 for chat logprobs an upstream does not give (``chat_logprobs_unfilled``)."""
    return APIError.make(
        "logprobs cannot be given by this upstream server: its chat answers leave them out",
        400,
        code="unsupported_parameter",
        param="logprobs",
    )


_DRAIN_TIMEOUT = 0.05
_COUNT_TIMEOUT = 2.0  # seconds for the calls to the upstream's tokenizer of one answer
# A stream whose usage the proxy counts holds its text only up to this (a choice's characters and a
# string object's cost for each part); past it the text is counted and let go. Kept whole, a 200 MB
# stream took the proxy to a 409 MB peak (issue 18).
_COUNT_PIECE = 1024 * 1024


class UpstreamSource(Source):
    def __init__(
        self,
        upstream: Upstream,
        adapter: Adapter,
        request: RequestInfo,
        call: UpstreamCall,
        *,
        max_line_bytes: int,
        headers: list[tuple[bytes, bytes]] | None = None,
        identity: Identity | None = None,
        repairs: Repairs | None = None,
        index_base: int = 0,
        emit_usage: bool | None = None,
        lines: bool = False,
    ) -> None:
        self._upstream = upstream
        self._adapter = adapter
        limit = requested_limit(call.body) if request.generates and request.max_tokens is None else None
        if limit is not None and limit > 0:
            # The operator's --default-max-tokens cuts what the upstream generates as a client's own
            # limit does: the answer is judged by it (a call cut at it finishes length, Q84; its usage
            # is within it, Q85), whoever gave it (issue 37).
            request = replace(request, max_tokens=limit)
        self._request = request
        self._call = call
        self._headers = headers
        self._repairs = repairs if repairs is not None else Repairs()
        self.identity = identity or Identity(request.endpoint, request.model)
        self._unshown_tokens = upstream.traits.counts_unshown_tokens and bool(request.tools)
        self.normalizer = StreamNormalizer(
            request,
            identity=self.identity,
            repairs=self._repairs,
            index_base=index_base,
            emit_usage=emit_usage,
            unshown_tokens=self._unshown_tokens,
        )
        self._parser = SSEParser(max_line_bytes=max_line_bytes)
        self._plain: PlainChunks | None = None  # once data lines are asked for (next_lines, or ``_lines``)
        self._held = b""  # whole data events read and parsed, not yet normalized (``_events_batch``)
        self._lines = lines  # the client reads data lines (``next_lines``) only: ``SourceBuilder.lines``
        self._ready: bytes | None = None  # the data lines of a read judged while starting, not yet sent
        self._starting = False
        self._stream: UpstreamStream | None = None
        self._pending: bytes | None = None
        self._ended = False
        self._received = 0
        self._raw_events = 0  # events with output before ``translate`` read them (a token each)
        self._counted: int | None = 0  # completion tokens counted as the stream came; None: not countable
        self._failure: APIError | None = None  # the transport's, or the stream's framing
        self.reservation: Reservation | None = None
        """The places of the fan-out this request is part of, once it took them (``ConcurrentFanOut``)."""

    @property
    def repairs(self) -> Repairs:
        return self._repairs

    @property
    def failure(self) -> APIError | None:
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
        if self._upstream.traits.chat_logprobs_unfilled and self._asks_chat_logprobs():
            raise _logprobs_refused()
        stream = await self._open(self._call.body)
        content_type = stream.content_type
        if "event-stream" not in content_type:
            first = await stream.read()
            if first is not None and ("json" in content_type or first.lstrip()[:1] in (b"{", b"[")):
                await self._read_body(first + await stream.read_all(MAX_JSON_BODY))
                return []
            self._pending = first
        self._starting = True
        try:
            batch = await self._first_batch()
        finally:
            self._starting = False
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
        if stream.status < 300:
            return stream
        refused = naming_its_input(await stream.error(), self._request.endpoint)
        instead = self._adapter.instead_of_refused(self._call, refused)
        if instead is None:
            raise refused
        if isinstance(instead, APIError):
            raise instead
        # Refused before any answer, for a reason the adapter serves another way (a server that takes
        # no tools: the calls asked as JSON output): asked once more that way, on a connection of its
        # own (the refusal's is given back first, not left for the collector).
        await stream.aclose()
        self._repairs.add("Q87")
        self._call = instead
        return await self._open(instead.body)

    async def _first_batch(self) -> list[dict[str, Any]]:
        """The stream's first chunks to send ([] when it ended or failed first)."""
        while (batch := await self.next_batch()) is not None and self.failure is None:
            if batch:
                return batch
        return []

    async def _retried_without_stream(self, failure: APIError) -> bool:
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
                raise APIError.make("the upstream server sent a body that is not valid JSON", 502) from None
        generated = upstream_text(obj)  # what the upstream generated, before the proxy reads it
        generated_count = generated_tokens(obj)
        shown: tuple[bool, ...] = ()
        if self._call.translate is not None:
            shown = shown_choices(obj)
            obj = self._call.translate(obj)
        body = normalize_body(
            obj,
            self._request,
            repairs=self._repairs,
            identity=self.identity,
            unshown_tokens=self._unshown_tokens,
            shown=shown,
        )
        self._learn()
        if self._asks_chat_logprobs() and _logprobs_unfilled(body):
            # Answered without the logprobs asked for: a wrong result that looks right (Q69). Nothing
            # was sent yet: the client gets the refusal instead, and so does every later request.
            self._upstream.traits.chat_logprobs_unfilled = True
            self._repairs.add("Q69")
            raise _logprobs_refused()
        if body["usage"] is None:
            texts = [generated_text(choice) for choice in body["choices"]]
            if self._call.translate is not None:  # (JSON output read as a call: the JSON was generated)
                texts = [generated]
            texts = texts if self._request.generates else []  # (an echo, not generated)
            # No tokenizer and no usage: the texts' pieces are the closest count a JSON body offers.
            fallback = sum(estimated_tokens(t) for t in texts)
            one = self._request.generates and self._request.choices == 1
            told = generated_count if one else None
            body["usage"] = await self._count_usage(texts, fallback, generated=told)
        self.body = body

    async def next_batch(self) -> list[dict[str, Any]] | None:
        """The next normalized chunks ([] when a read gave nothing to send), None at the end."""
        if self._ended or self._stream is None:
            return None
        try:
            return await self._batch()
        except (SSELineTooLong, ValueError, APIError) as exc:
            await self._failed(exc)
            return None

    async def next_lines(self, encode: Encode) -> bytes | None:
        """The next chunks as data lines: a chat stream's chunks that need no repair relayed by their
        bytes (``PlainChunks``), the others normalized and ``encode``d as ``next_batch`` would give them.
        One coroutine deep to the upstream's read: each level more cost every read (issue 35)."""
        if self._ready is not None:
            ready, self._ready = self._ready, None
            return ready
        plain = self._plain
        if plain is None:
            if not self._relays:
                return await super().next_lines(encode)
            plain = self._plain = PlainChunks(self.normalizer, self._parser, encode)
        if self._ended or self._stream is None:
            return None
        try:
            held, self._held = self._held, b""
            if held:
                return await self._lines_of(plain, held)
            raw = await self._read()
            events = None if raw is None else self._parser.data_events(raw)
            if events is None:  # the stream's end, or a read of other events or a cut one
                plain.forget()  # (the normalizer sees it: what the relay learned may no longer hold)
                if raw is None:
                    return plain.encode(await self._finish(self._parser.close()))
                return plain.encode(await self._blocks_batch(raw))
            return await self._lines_of(plain, events)
        except (SSELineTooLong, ValueError, APIError) as exc:
            await self._failed(exc)
            return None

    def whole_lines(self) -> bytes | None:
        if self._ready is None or not self._ended:
            return None
        ready, self._ready = self._ready, None
        return ready

    @property
    def _relays(self) -> bool:
        """Whether chunks that need no repair may be relayed by their bytes: a chat stream read as it
        came (``PlainChunks`` relays where the stream has one choice, and normalizes the rest)."""
        return self._request.endpoint == "chat" and self._call.translate is None

    async def _lines_of(self, plain: PlainChunks, events: bytes) -> bytes:
        """The data lines of whole data ``events`` (``SSEParser.data_events``), the plain chunks relayed;
        the stream's last chunks after them where the upstream is done."""
        lines = plain.lines(events)
        if self.normalizer.failure is not None:
            await self._end()
            return lines
        if not self._after_read_due:  # (most reads)
            return lines
        tail = await self._after_read()
        return lines + plain.encode(tail) if tail else lines

    async def _failed(self, exc: Exception) -> None:
        """The source ended by a failure of the stream's framing or the transport's (the normalizer
        reports its own in ``failure``)."""
        if isinstance(exc, SSELineTooLong):
            self._failure = APIError.make("the upstream server sent an SSE line over the size limit", 502)
        elif isinstance(exc, APIError):
            self._failure = exc
        else:
            self._failure = APIError.make("the upstream server sent an event that is not valid JSON", 502)
        await self._end()

    async def _read(self) -> bytes | None:
        assert self._stream is not None
        raw = self._pending if self._pending is not None else await self._stream.read()
        self._pending = None
        if raw is not None:
            self._received += len(raw)
        return raw

    async def _batch(self) -> list[dict[str, Any]]:
        if self._held:
            events, self._held = self._held, b""
            return await self._events_batch(events)
        return await self._batch_of(await self._read())

    async def _batch_of(self, raw: bytes | None) -> list[dict[str, Any]]:
        if raw is None:
            return await self._finish(self._parser.close())
        return await self._normalized(raw)

    async def _normalized(self, raw: bytes) -> list[dict[str, Any]]:
        """The chunks the normalizer makes of the events in ``raw``; the source ends where it fails,
        or where the upstream is done."""
        if self._call.translate is None and (events := self._parser.data_events(raw)) is not None:
            return await self._events_batch(events)
        return await self._blocks_batch(raw)

    async def _blocks_batch(self, raw: bytes) -> list[dict[str, Any]]:
        """``_normalized`` of a read the SSE parser makes blocks of."""
        normalizer = self.normalizer
        translate = self._call.translate
        out: list[dict[str, Any]] = []
        for block in self._parser.feed(raw):
            if translate is not None and block.data is not None and block.data.strip()[:1] == "{":
                payload = jsoncodec.loads(block.data)
                self._raw_events += bool(upstream_text(payload))
                out += normalizer.feed_payload(translate(payload), shown_choices(payload))
            else:
                out += normalizer.feed(block)
            if normalizer.failure is not None:
                await self._end()
                return out
        return out + await self._after_read()

    async def _events_batch(self, events: bytes) -> list[dict[str, Any]]:
        """``_normalized`` of whole data events (``SSEParser.data_events``). While the source starts, the
        events after the first chunk are held for the next batch where the rest of the read neither
        holds [DONE] nor an error object (``_may_end``): the client's first token does not wait for
        the others (and they may then be relayed, ``next_lines``), and an answer read whole, or one
        whose upstream reported an error in the read that began it, is still judged whole before its
        status is chosen. Any other failure in the held rest (an event that is not JSON, a choice
        index past those asked for) then ends the stream with its error event after the first chunk,
        as it would had it come in the next read.

        An answer read whole is judged through the relay of plain chunks where the client reads data
        lines (``_lines``) and the stream may be relayed (``_relays``), its lines kept for the first
        ``next_lines``: its status waits for no more than relaying its chunks. Normalized one by one,
        a short answer's 16 chunks were most of the proxy's CPU before its first byte
        (bench/RESULTS.md, issue 35's fourth profile)."""
        normalizer = self.normalizer
        out: list[dict[str, Any]] = []
        start, end = 0, len(events)
        while start < end:
            stop = events.index(b"\n\n", start)
            out += normalizer.feed(self._parser.block_of(events[start + 6 : stop]))
            start = stop + 2
            if normalizer.failure is not None:
                await self._end()
                return out
            if out and self._starting and start < end:
                if not _may_end(events, start):
                    self._held = events[start:]
                elif self._lines and self._relays:
                    self._plain = self._plain or PlainChunks(normalizer, self._parser, CHUNKS.events)
                    self._ready = await self._lines_of(self._plain, events[start:])
                else:
                    continue
                return out
        return out + await self._after_read()

    @property
    def _after_read_due(self) -> bool:
        """Whether ``_after_read`` has anything to do: text held for counting, or the upstream done."""
        normalizer = self.normalizer
        return normalizer.needs_usage or normalizer.upstream_done or normalizer.all_stopped

    async def _after_read(self) -> list[dict[str, Any]]:
        """After a read's events: the text held for counting counted once it is long, and the stream's
        last chunks where the upstream is done."""
        normalizer = self.normalizer
        if normalizer.needs_usage:
            await self._count_as_it_comes(normalizer.take_texts(_COUNT_PIECE))
        if normalizer.upstream_done or normalizer.all_stopped:
            if normalizer.all_stopped and self._request.generates:
                self._repairs.add("Q76")
            return await self._finish(None)
        return []

    async def _end(self) -> None:
        await self.aclose()
        self._ended = True

    async def _finish(self, tail: Any) -> list[dict[str, Any]]:
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
            usage = await self._count_usage(
                texts,
                normalizer.completion_tokens(),
                self._counted,
                max(normalizer.completion_events(), self._raw_events),
                generated=normalizer.generated if self._request.choices == 1 else None,
            )
        out += normalizer.close(usage)
        self._learn()
        if normalizer.interrupted and normalizer.failure is not None:
            # A choice was left without its final chunk (the close failed it).
            self._upstream.traits.broke_off_stream()
        return out

    def _asks_chat_logprobs(self) -> bool:
        return self._request.endpoint == "chat" and self._request.logprobs

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
        except APIError as failed:
            return isinstance(failed, UpstreamTimeout)
        return True

    def _counter(self) -> tuple[Callable[[str], Awaitable[int | None]], Callable[[], float]]:
        """A token counter of texts with the upstream's tokenizer (None when it has none or is slow),
        and the seconds left to it: all its calls, the prompt's included, together within a quarter of
        the idle and first-byte timeouts at most: the client waits for them after its last token (or
        before its first, on an answer in one read)."""
        config = self._upstream.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(_COUNT_TIMEOUT, config.idle_timeout / 4, config.first_byte_timeout / 4)

        def left() -> float:
            return deadline - loop.time()

        async def count(text: str) -> int | None:
            return await self._adapter.count_tokens(self._upstream, text, left()) if left() > 0 else None

        return count, left

    async def _count_as_it_comes(self, texts: list[str]) -> None:
        """Count ``texts`` (taken from a long stream's kept text) into ``_counted``; once a count fails
        the stream's usage is estimated, and what is taken is let go uncounted."""
        if not texts or self._counted is None:
            return
        count, _ = self._counter()
        for text in texts:
            counted = await count(text)
            if counted is None:
                self._counted = None
                return
            self._counted += counted

    async def _count_usage(
        self,
        texts: list[str],
        fallback_completion: int,
        counted: int | None = 0,
        events: int = 0,
        *,
        generated: int | None = None,
    ) -> dict[str, Any]:
        """Usage the upstream did not report: counted with its tokenizer when it has one, and answers in
        time (``counted``: tokens already counted as the stream came, None when that failed), the
        prompt as its template writes it (the adapter's ``prompt_tokens``); else estimated (the
        prompt's pieces, ``fallback_completion``), and marked so (USAGE_ESTIMATED).

        A stream's completion is no fewer than its output ``events``: output generated under a grammar
        tokenizes again shorter than it was generated (llama-cpp-python counted 24 tokens for a JSON
        answer its tokenizer makes 17 of, issue 37), and llama.cpp's servers stream a token an event.
        ``generated``: the upstream's own count of the tokens it generated (``generated_tokens``), taken
        as it is; the texts are then not counted."""
        self._repairs.add("Q28")
        count, left = self._counter()
        # The prompt the upstream was sent (the proxy's tool emulation adds the tools' description to it):
        # what the upstream counts.
        prompt = await self._adapter.prompt_tokens(self._upstream, self._call.body, left())
        estimated = prompt is None or prompt.estimated
        completion = generated if generated is not None else await _tokens_of(texts, count, counted)
        if completion is None:
            completion, estimated = fallback_completion, True
        if generated is None:
            completion = max(completion, events)
        if estimated:
            self._repairs.add(USAGE_ESTIMATED)
        prompt_tokens = estimated_prompt(self._call.body) if prompt is None else prompt.tokens
        total = prompt_tokens + completion
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": total}
        # Text tokenized again can take more tokens than were generated (66 for a call cut at 64 by
        # llama-cpp-python): the limit the upstream generated under bounds the count.
        return within_limit(usage, self._request) or usage

    async def aclose(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.aclose()


async def _tokens_of(
    texts: list[str], count: Callable[[str], Awaitable[int | None]], counted: int | None
) -> int | None:
    """``counted`` and the tokens of ``texts`` as ``count`` counts them; None once a count fails."""
    for text in texts:
        if counted is None:
            break
        tokens = await count(text) if text else 0
        counted = None if tokens is None else counted + tokens
    return counted


def _may_end(events: bytes, start: int) -> bool:
    """Whether the data events from ``start`` on may end the stream or report the upstream's error:
    they hold [DONE] or an ``"error"`` key (no other failure is looked for: ``_events_batch``)."""
    return events.find(b"[DONE]", start) >= 0 or events.find(b'"error"', start) >= 0


def _logprobs_unfilled(body: dict[str, Any]) -> bool:
    """Whether a chat answer's choices that carry text all lack logprobs (and one carries text)."""
    texts = [c for c in body.get("choices") or () if isinstance(c, dict) and generated_text(c)]
    return bool(texts) and all(c.get("logprobs") is None for c in texts)
