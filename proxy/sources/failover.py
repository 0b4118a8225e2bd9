"""A request's source in the pool: a replica chosen for it, and another one if the first fails before
anything reached the client (a pool of one has no other: its failure is the client's answer).

The response writer holds the status until the source's first output (proxy/writer.py): until
``start()`` returns, the client has nothing, so a replica that refused the connection, cut it, or
answered 502 or 503 (llama-server while it loads) is passed over for another (``retryable``). Once
``start()`` has returned the stream is the client's: a replica that fails then ends it with an error
event, as a single upstream does, and is ejected.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from conformance.api_errors import APIError
from conformance.protocols.front_end import CHUNKS, Output

from ..errors import first_byte_timeout_error
from ..normalizer import Repairs
from ..observability import Exchange
from ..routing.pool import Router, retryable
from ..routing.replica import Replica
from .base import Attempts, Source
from .plan import RequestPlan

__all__ = ["FailoverSource"]


class FailoverSource(Attempts):
    """The request of ``plan`` on one of ``replicas`` (those of its model), another when one fails first."""

    def __init__(
        self,
        router: Router,
        replicas: list[Replica],
        key: bytes | None,
        plan: RequestPlan,
        exchange: Exchange,
        first_byte_timeout: float,
    ) -> None:
        """``key``: the prompt's prefix, for affinity (None: none); ``first_byte_timeout``: the most a
        request waits for a replica's slot."""
        self._router = router
        self._model = str(plan.model)
        self._replicas = replicas
        self._key = key
        self._plan = plan
        self._exchange = exchange
        self._first_byte_timeout = first_byte_timeout
        self._tried: set[Replica] = set()
        self._current: Source | None = None
        self._output: Output = CHUNKS
        self._replica: Replica | None = None
        self._started = 0.0
        self._spent = Repairs()
        self._secret: str | None = None

    @property
    def secret(self) -> str | None:  # type: ignore[override]
        return self._secret

    @property
    def failure(self) -> APIError | None:
        failure = None if self._current is None else self._current.failure
        return None if failure is None else failure.redacted(self._secret)

    @property
    def output(self) -> Output:  # type: ignore[override]
        """The leg's output, once ``start()`` chose the replica."""
        return self._output

    async def prepare(self) -> None:
        """The first replica and the request's leg on it, before that upstream is asked: the proxy's
        own work (a prompt counted against the context, the names the upstream serves), which bounds
        its own waits; a wait for a replica's slot is bounded by the first-byte timeout."""
        await self._build(await self._acquire(self._first_byte_timeout))

    async def start(self) -> list[dict[str, Any]]:
        if self._current is None:
            await self._build(await self._acquire())
        while True:
            built, replica = self._current, self._replica
            assert built is not None
            assert replica is not None
            try:
                return await built.start()
            except APIError as error:
                status = built.upstream_status
                self._spent.update(built.repairs)
                await built.aclose()
                self._finish(error, status)
                if not self._shortened(error):
                    self._tried.add(replica)
                    if not retryable(error, status) or not any(
                        r.available for r in self._replicas if r not in self._tried
                    ):
                        raise error.redacted(replica.config.upstream_api_key) from None
                    self._router.retried(replica)
            except BaseException as stopped:
                if isinstance(stopped, asyncio.CancelledError) and self._past_first_byte_deadline():
                    # The writer's first-byte timeout: the replica sent nothing in time, a stall the
                    # router counts (a hung one answers /health but never a completion, issue 32).
                    await built.aclose()
                    self._finish(first_byte_timeout_error(), 504)
                await self.aclose()
                raise
            await self._build(await self._acquire())

    def _past_first_byte_deadline(self) -> bool:
        """Whether the replica has had the whole first-byte timeout (a client that left earlier: not).
        Within 5%: uvloop's timers fire on whole milliseconds, up to one early."""
        return self._started > 0 and time.monotonic() - self._started >= 0.95 * self._first_byte_timeout

    async def _acquire(self, patience: float = math.inf) -> Replica:
        """A replica for the request, not one tried already; its slot is the request's until done (a
        wait for it bounded by ``patience``: the first attempt's; a retry's runs within the writer's
        first-byte timeout)."""
        router = self._router
        replica, waited = await router.acquire(self._model, self._replicas, self._key, self._tried, patience)
        if not self._router.catch_all:  # which of a file's replicas took it; one --upstream is no news
            exchange = self._exchange
            exchange.queued_ms = round((exchange.queued_ms or 0.0) + waited * 1000, 3)
            exchange.upstream = replica.label
        self._replica, self._started = replica, time.monotonic()
        self._secret = replica.config.upstream_api_key  # cut out of its errors (the file's keys)
        return replica

    async def _build(self, replica: Replica) -> None:
        """The request's leg on ``replica``: its source and output, or the proxy's refusal (raised: no
        upstream was asked)."""
        try:
            while True:
                try:
                    self._current, self._output = await self._plan.leg(replica)
                    return
                except APIError as refused:
                    if not self._shortened(refused):
                        raise
                    # (the proxy's own count said it: asked again, shorter, on the replica it holds)
        except BaseException:
            self._current = None
            self._finish(None, None)
            raise

    def _shortened(self, error: APIError) -> bool:
        """Whether the request goes again made shorter, where ``error`` is a context overflow and its
        protocol asks for that (``truncation: "auto"``): its plan is then the shorter one's."""
        shorter = self._plan.shortened(error)
        if shorter is None:
            return False
        self._plan = shorter
        return True

    async def next_batch(self) -> list[dict[str, Any]] | None:
        assert self._current is not None
        return await self._current.next_batch()

    def _finish(self, fault: APIError | None, status: int | None) -> None:
        replica, self._replica = self._replica, None
        if replica is not None:
            self._router.done(replica, self._started, fault, status)

    async def aclose(self) -> None:
        current = self._current
        try:
            if current is not None:
                await current.aclose()
        finally:
            if self._replica is not None:
                self._finish(None if current is None else current.failure, None)
