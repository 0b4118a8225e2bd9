"""What the response writer reads a request's normalized output from: a source.

A source's ``start()`` opens the upstream and returns once the first normalized chunks exist (or the
whole body, for a JSON answer), so the caller can still choose the HTTP status; ``next_batch()`` then
yields the rest. Failures before ``start()`` returns are raised; later ones land in ``failure``. Its
``output`` is how those chunks reach the client: the core's own ``data:`` lines, or a protocol's events
(conformance/protocols/), chosen with the upstream that answers.

The sources, each in its own module: one upstream request (upstream.py), a fan-out of several
(fan_out.py), a token-id prompt that falls back to its text (token_prompt.py), what a request becomes on
one replica (builder.py), an upstream's own endpoint of a protocol (native.py), a request tried on
another replica when the first fails before its first byte (failover.py), and a stream whose protocol
opens with the prompt's tokens, counted while the upstream works (prompt_count.py).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from conformance.api_errors import APIError
from conformance.protocols.front_end import CHUNKS, Output

from ..normalizer import Repairs
from ..normalizer.plain_chunks import Encode

__all__ = ["FIRST_CHUNKS_DUE", "Attempts", "Source"]

FIRST_CHUNKS_DUE: ContextVar[float | None] = ContextVar("first_chunks_due", default=None)
"""The event loop's time by which the response writer wants the first chunks (its first-byte timeout,
over every replica tried), set while ``start()`` runs: a source that would wait on after its upstream's
first chunks came (prompt_count.py) keeps within it, so that an upstream that answered in time is never
a 504."""


class Source:
    """What the response writer reads from."""

    output: Output = CHUNKS
    """How its chunks reach the client: the core's own wire unless the protocol's leg says otherwise."""
    body: dict[str, Any] | None = None
    upstream_status: int | None = None
    secret: str | None = None
    """The key of the upstream this source read from where it is not the proxy's own
    ``--upstream-api-key`` (a routed replica's, from the file), known once ``start()`` returned: cut
    out of the bodies sent too."""
    _failure: APIError | None = None
    _usage: dict[str, Any] | None = None

    @property
    def repairs(self) -> Repairs:
        """What this source repaired (its own, and its normalizer's): the response writer records it
        in the request's repairs once the response is done."""
        return Repairs()

    @property
    def active(self) -> Source:
        """The source that yields the rest once ``start()`` returned: this one, or the one a wrapper
        (a failover, a fallback) started; the response writer reads the stream's batches from it, so
        that a wrapper costs nothing per chunk. Its failure and usage are read from the wrapper."""
        return self

    async def prepare(self) -> None:
        """What the proxy does before the upstream is asked (the first-byte timeout does not run yet):
        nothing, but for a source that first chooses where to send the request (failover.py)."""

    async def start(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def next_batch(self) -> list[dict[str, Any]] | None:
        raise NotImplementedError

    async def next_lines(self, encode: Encode) -> bytes | None:
        """``next_batch`` as the core's data lines (``encode``: ``DataLines.events``), for the core's own
        wire, where each chunk goes out alone as one; None at the end. A source that reads an
        upstream's stream relays the chunks that need no repair by their bytes (upstream.py)."""
        batch = await self.next_batch()
        if batch is None:
            return None
        return encode(batch) if batch else b""

    def whole_lines(self) -> bytes | None:
        """The rest of the stream as the core's data lines where the source has ended while it started
        (an answer read whole and judged so, upstream.py): the writer sends them with the opening and
        the end in one write. None for any other stream."""
        return None

    @property
    def failure(self) -> APIError | None:
        """What ended the source after ``start()`` returned, if anything did."""
        return self._failure

    @property
    def usage(self) -> dict[str, Any] | None:
        """The answer's usage once it is known."""
        return self._usage

    async def aclose(self) -> None:
        raise NotImplementedError


class Attempts(Source):
    """A source that answers through the attempt it runs now (``_current``): a replica's leg
    (failover.py), one way of asking for a forced call (forced_call.py). Its body, status, usage and
    the rest of its stream are that attempt's; its repairs are that attempt's with those of the
    attempts that did not answer (``_spent``). The subclass sets both in its ``__init__``."""

    _current: Source | None
    _spent: Repairs

    @property
    def body(self) -> dict[str, Any] | None:  # type: ignore[override]
        return None if self._current is None else self._current.body

    @property
    def upstream_status(self) -> int | None:  # type: ignore[override]
        return None if self._current is None else self._current.upstream_status

    @property
    def usage(self) -> dict[str, Any] | None:
        return None if self._current is None else self._current.usage

    @property
    def repairs(self) -> Repairs:
        current = Repairs() if self._current is None else self._current.repairs
        if not self._spent:  # the first attempt answered: the usual request, without a copy
            return current
        total = Repairs(self._spent)
        total.update(current)
        return total

    @property
    def active(self) -> Source:
        return self if self._current is None else self._current.active
