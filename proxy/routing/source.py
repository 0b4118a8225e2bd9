"""A request's source on a routed proxy: a replica chosen for it, and another one if the first fails
before anything reached the client.

The response writer holds the status until the source's first output (proxy/respond.py): until
``start()`` returns, the client has nothing, so a replica that refused the connection, cut it, or
answered 502 or 503 (llama-server while it loads) is passed over for another (``retryable``). Once
``start()`` has returned the stream is the client's: a replica that fails then ends it with an error
event, as a single upstream does, and is ejected.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ProxyError
from ..normalizer import Repairs
from ..observability import Exchange
from ..source import Source
from .pool import Router, retryable
from .replica import Replica

__all__ = ["RoutedSource"]

Build = Callable[[Replica], Awaitable[Source | ProxyError]]


class RoutedSource(Source):
    def __init__(
        self,
        router: Router,
        model: str,
        replicas: list[Replica],
        key: bytes | None,
        build: Build,
        exchange: Exchange,
    ) -> None:
        self._router = router
        self._model = model
        self._replicas = replicas
        self._key = key
        self._build = build
        self._exchange = exchange
        self._current: Source | None = None
        self._replica: Replica | None = None
        self._started = 0.0
        self._spent = Repairs()
        self._secret: str | None = None

    @property
    def body(self) -> dict[str, Any] | None:  # type: ignore[override]
        return None if self._current is None else self._current.body

    @property
    def upstream_status(self) -> int | None:  # type: ignore[override]
        return None if self._current is None else self._current.upstream_status

    @property
    def secret(self) -> str | None:  # type: ignore[override]
        return self._secret

    @property
    def failure(self) -> ProxyError | None:
        failure = None if self._current is None else self._current.failure
        return None if failure is None else failure.redacted(self._secret)

    @property
    def usage(self) -> dict[str, Any] | None:
        return None if self._current is None else self._current.usage

    @property
    def repairs(self) -> Repairs:
        total = Repairs(self._spent)
        if self._current is not None:
            total.update(self._current.repairs)
        return total

    async def start(self) -> list[dict[str, Any]]:
        tried: set[Replica] = set()
        router, exchange = self._router, self._exchange
        while True:
            replica, waited = await router.acquire(self._model, self._replicas, self._key, tried)
            exchange.queued_ms = round((exchange.queued_ms or 0.0) + waited * 1000, 3)
            exchange.upstream = replica.label
            self._replica, self._started = replica, time.monotonic()
            self._secret = replica.config.upstream_api_key  # cut out of its errors (the file's keys)
            built = await self._build(replica)
            if isinstance(built, ProxyError):  # refused by the proxy itself: no upstream was asked
                self._finish(None, None)
                raise built
            self._current = built
            try:
                return await built.start()
            except ProxyError as error:
                status = built.upstream_status
                self._spent.update(built.repairs)
                await built.aclose()
                self._finish(error, status)
                tried.add(replica)
                if not retryable(error, status) or not any(
                    r.available for r in self._replicas if r not in tried
                ):
                    raise error.redacted(replica.config.upstream_api_key) from None
                router.retried(replica)
            except BaseException:
                await self.aclose()
                raise

    async def next_batch(self) -> list[dict[str, Any]] | None:
        assert self._current is not None
        return await self._current.next_batch()

    def _finish(self, fault: ProxyError | None, status: int | None) -> None:
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
