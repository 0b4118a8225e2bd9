"""Replay a transcript body in its recorded reads, at the recorded times scaled by a pace factor."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import anyio

from conformance.transcript import Transcript

__all__ = ["paced_body", "recorded_reads"]


def recorded_reads(transcript: Transcript) -> Iterator[tuple[float, bytes]]:
    """(seconds since the request, bytes) per recorded read; bytes beyond the timing come last, at once.

    A transcript without timing (or with timing that does not cover the body) still replays every byte:
    the uncovered rest is sent right after the last timed read.
    """
    pending = bytearray()
    source = transcript.iter_body()
    exhausted = False
    last = 0.0
    for at, size in transcript.chunk_timing:
        while len(pending) < size and not exhausted:
            more = next(source, None)
            if more is None:
                exhausted = True
            else:
                pending += more
        piece = bytes(pending[:size])
        del pending[:size]
        last = max(last, at)
        if piece:
            yield last, piece
    for more in source:
        pending += more
    if pending:
        yield last, bytes(pending)


async def paced_body(transcript: Transcript, pace: float | None, started: float) -> AsyncIterator[bytes]:
    """The body as the server sent it; ``pace`` multiplies every delay (None: no waiting at all).

    ``started`` is the ``time.monotonic()`` of the request, so handler overhead does not add up.
    """
    for at, piece in recorded_reads(transcript):
        if pace is not None:
            delay = started + at * pace - time.monotonic()
            if delay > 0:
                await anyio.sleep(delay)
        yield piece
