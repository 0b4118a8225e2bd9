"""The proxy's upstreams: which serve each model, which replica takes each request, and when a replica
is ready, busy or left out. ``--config`` gives the upstreams of a file; ``--upstream`` a pool of one
(``RoutingFile.catch_all``: every model goes to it, nothing checks it or leaves it out), so that every
request takes one path whatever the configuration.

Choosing a replica (``Router.acquire``), for the replicas of the asked model that are ready and not
ejected:

- least outstanding requests (in flight and waiting, per unit of ``weight``), as Envoy's and
  nginx's ``least_conn`` do: a replica slowed by long prompts gets fewer new ones;
- with prefix affinity: the replica that holds the prompt's first ``prefix_chars`` characters (a new
  prefix: placed by rendezvous hashing with bounded loads, proxy/routing/prefixes.py) takes the request
  while it has at most ``affinity_slack`` more outstanding than the least busy one. llama.cpp
  (``--cache-reuse``, its slots' prompt cache), vLLM and SGLang (prefix caching) skip the prompt
  processing of a prefix they hold; sent elsewhere, a shared system prompt is processed again on each
  replica. Rendezvous order needs no shared state, so workers and proxies behind a load
  balancer mostly pick the same replica for a prefix (bench/prefix_affinity.py measures it);
- ``max_concurrency`` per replica, with a queue of at most ``max_queue`` requests; a request that finds
  every queue full gets a 429 with ``Retry-After`` (openai-python retries it).

Health: ``GET /health`` of each replica every ``health_interval`` seconds and at start-up, before
the first request: llama-server answers 503 while it loads its model, and a replica is sent nothing until
it answers 200 (a 404: the server has no such endpoint, and counts as ready). Passive ejection: a
connect error or a 5xx leaves the replica out for ``eject_cooldown`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import math
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from conformance.api_errors import APIError
from conformance.model_names import clean_model_name

from ..adapters import OpenAIAdapter
from ..config import ProxyConfig
from ..errors import UpstreamBroke, UpstreamRefused, UpstreamTimeout, upstream_timeout
from ..observability import Exchange
from ..served_names import ServedNames, served_name
from ..upstream import Upstream
from .config_file import RoutingFile, UpstreamEntry
from .prefixes import PrefixTable
from .replica import Replica

__all__ = ["Router", "RouterMetrics", "retryable", "upstream_fault"]

log = logging.getLogger("conformant.routing")

_HEALTH_TIMEOUT = 5.0
_LATENCY_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class RouterMetrics:
    """``/metrics`` per upstream, labelled by its URL."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["upstream"]
        self.in_flight = Gauge(
            "conformant_upstream_in_flight",
            "Requests sent to the upstream and not done",
            labels,
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.queued = Gauge(
            "conformant_upstream_queued",
            "Requests waiting for a slot of the upstream (max_concurrency)",
            labels,
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.healthy = Gauge(
            "conformant_upstream_healthy",
            "1 when the upstream's health check passes and it is not ejected",
            labels,
            registry=registry,
            multiprocess_mode="livemin",
        )
        self.latency = Histogram(
            "conformant_upstream_request_seconds",
            "Time from sending a request to the upstream to its end",
            labels,
            registry=registry,
            buckets=_LATENCY_BUCKETS,
        )
        self.errors = Counter(
            "conformant_upstream_errors",
            "Upstream requests that failed (connect error or 5xx)",
            labels,
            registry=registry,
        )
        self.ejections = Counter(
            "conformant_upstream_ejections",
            "Times the upstream was left out after a fault",
            labels,
            registry=registry,
        )
        self.retries = Counter(
            "conformant_upstream_retries",
            "Requests sent to another replica after this one failed before the first byte",
            labels,
            registry=registry,
        )

    def publish(self, replica: Replica) -> None:
        children = self.of(replica)
        children[0].set(replica.in_flight)
        children[1].set(len(replica.waiting))

    def of(self, replica: Replica) -> tuple[Any, Any, Any]:
        """The replica's in-flight and queued gauges and its latency histogram."""
        children = replica.gauges
        if children is None:
            label = replica.label
            children = (self.in_flight.labels(label), self.queued.labels(label), self.latency.labels(label))
            replica.gauges = children
        return children


_MASK = (1 << 64) - 1


def _rendezvous(digest: int, replica: Replica) -> int:
    """The replica's score for a prefix (highest wins): splitmix64's finalizer over the prefix's digest
    and the replica's seed, so that the prompt is hashed once, not once per replica."""
    z = (digest ^ replica.seed) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


class Router:
    """The upstreams of ``--config``, the models each serves, and the choice of replica per request."""

    def __init__(self, config: ProxyConfig, routing: RoutingFile, registry: CollectorRegistry) -> None:
        self.config = config
        self.metrics = RouterMetrics(registry)
        self.routing = routing
        self.catch_all = routing.catch_all
        """Whether this is ``--upstream``'s pool of one (see the module's docstring): for its life, a
        reload being a file's."""
        self.replicas: dict[tuple[str, str | None], Replica] = {}
        self.routes: dict[str, tuple[str, list[Replica]]] = {}
        self._every: list[Replica] = []
        """Every replica: the pool of one's route for any model."""
        self._checker: asyncio.Task[None] | None = None
        self._started = False
        self._closing: set[asyncio.Task[None]] = set()
        self.prefixes = PrefixTable()
        self._take(routing)

    # Building and reloading

    def _replica(self, entry: UpstreamEntry) -> Replica:
        config = dataclasses.replace(
            self.config, upstream=entry.url, upstream_api_key=entry.api_key, upstream_kind=entry.kind
        )
        upstream = Upstream(config)
        adapter = OpenAIAdapter(config.default_max_tokens, upstream.traits)
        label = str(upstream.client.base_url).rstrip("/")
        # A file's aliases name its models for the router; one upstream's alias is its names' own.
        alias = config.model_alias if self.catch_all else None
        return Replica(entry, config, upstream, adapter, ServedNames(upstream, alias), label)

    def _take(self, routing: RoutingFile) -> list[Replica]:
        """Serve ``routing`` from now on; the replicas it adds (the caller detects their adapters).
        A replica it keeps keeps its state and connections; one it drops is closed when done."""
        kept: dict[tuple[str, str | None], Replica] = {}
        added = []
        for entry in routing.upstreams:
            replica = self.replicas.get(entry.identity) or kept.get(entry.identity)
            if replica is None:
                replica = self._replica(entry)
                added.append(replica)
            else:
                replica.entry = entry
            kept[entry.identity] = replica
        for identity, replica in self.replicas.items():
            if identity not in kept:
                replica.retired = True
                self.prefixes.forget(replica)
                if replica.in_flight == 0:
                    self._close_later(replica)
        self.replicas = kept
        self.routing = routing
        self._route()
        return added

    def _route(self) -> None:
        self._every = list(self.replicas.values())
        routes: dict[str, tuple[str, list[Replica]]] = {}
        for replica in self.replicas.values():
            for model in replica.models:
                routes.setdefault(model, (model, []))[1].append(replica)
        for model, route in list(routes.items()):
            routes.setdefault(clean_model_name(model), route)  # as the listing shows it (Q09)
        for alias, model in self.routing.aliases.items():
            if model in routes:
                routes[alias] = routes[model]
        self.routes = routes

    async def start(self) -> None:
        """At start-up: each replica's API family, and its first health check (before any request);
        the pool of one is not checked, its family is probed at once."""
        self._started = True
        if self.catch_all:
            for replica in self.replicas.values():
                await replica.detect()  # (unanswered, as by a server still loading: asked per request)
            return
        await self._prepare(list(self.replicas.values()))
        self._checker = asyncio.create_task(self._check_forever())

    async def _prepare(self, replicas: list[Replica]) -> None:
        await asyncio.gather(*(self.check(r) for r in replicas))
        self._route()

    async def reload(self, routing: RoutingFile) -> None:
        """``SIGHUP``: serve the re-read file; open streams go on on the replicas they hold."""
        await self._prepare(self._take(routing))

    async def aclose(self) -> None:
        if self._checker is not None:
            self._checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checker
        await asyncio.gather(*(r.upstream.aclose() for r in self.replicas.values()))

    # Health

    async def _check_forever(self) -> None:
        while True:
            await asyncio.sleep(self.routing.options.health_interval)
            await asyncio.gather(*(self.check(r) for r in list(self.replicas.values())))
            if any(r.entry.models is None for r in self.replicas.values()):
                self._route()

    async def check(self, replica: Replica) -> None:
        """One active health check: 200 (or 404, no such endpoint) is ready; 503 (loading), another
        error or no answer is not. A replica whose models the file leaves out has them read too."""
        # Not bounded by the interval: a replica busy streaming may answer a frequent check late.
        timeout = _HEALTH_TIMEOUT
        status, _ = await replica.upstream.answer("GET", "/health", timeout=timeout)
        was = replica.ready
        replica.ready = status is not None and (status < 300 or status == 404)
        if replica.ready and self._started:
            # Its API family, probed once it answers (a replica loading at start-up, when it is ready).
            await replica.detect()
        if replica.ready and replica.entry.models is None:
            entries = await replica.names.listing(timeout)
            names = (served_name(e) for e in entries or ())
            # As listed: a name with a local path is routed by it too, as a file's ``models`` is (Q09),
            # and by its file name (``_route``); cleaned here, the listed name itself was a 404.
            replica.discovered = tuple(dict.fromkeys(n for n in names if n))
        if replica.ready != was:
            log.warning("upstream %s is %s", replica.label, "ready" if replica.ready else "not ready")
        self.metrics.healthy.labels(replica.label).set(1 if replica.available else 0)

    # Choosing

    def route(self, model: Any) -> tuple[Any, list[Replica]] | None:
        """The name the upstreams serve ``model`` by, and its replicas; None for a model none serves
        (the pool of one serves every model, by the name asked: its replica's names map it)."""
        if self.catch_all:
            return model, self._every
        return self.routes.get(model) if isinstance(model, str) else None

    def listing(self) -> list[str]:
        """The names clients may ask for: each model without its local path (Q09), and the aliases."""
        return list(dict.fromkeys(clean_model_name(name) for name in self.routes))

    async def models(self, exchange: Exchange) -> list[Any]:
        """The ``/v1/models`` entries of the models this pool serves: the names of the file's routes
        (no upstream asked), or the pool of one's own listing (its alias, or what its upstream lists:
        its status in ``exchange``). Raises the ``APIError`` to answer when that upstream cannot list
        them."""
        if not self.catch_all:
            return [{"id": name} for name in self.listing()]
        (replica,) = self.replicas.values()
        return await replica.names.models(exchange)

    def pick(self, candidates: list[Replica], key: bytes | None) -> Replica:
        least = min(candidates, key=_load)
        if key is None or len(candidates) == 1:
            return least
        digest = _digest(key)
        preferred = self.prefixes.owner(digest)
        if preferred is None or preferred not in candidates:
            ordered = sorted(candidates, key=lambda r: _rendezvous(digest, r), reverse=True)
            preferred = self.prefixes.place(ordered)
        chosen = least
        if preferred.load - least.load <= self.routing.options.affinity_slack and (
            preferred.has_room or not least.has_room
        ):
            chosen = preferred
        self.prefixes.assign(digest, chosen)  # where its prompt is cached from now on
        return chosen

    async def acquire(
        self,
        model: str,
        replicas: Iterable[Replica],
        key: bytes | None,
        tried: set[Replica],
        patience: float = math.inf,
    ) -> tuple[Replica, float]:
        """A replica for one request and the seconds it waited for a slot; the replica's slot is the
        caller's until ``done``. Raises a 503 when no replica is ready, a 429 when every queue is full,
        a 504 when the slot took more than ``patience`` seconds to come (the first-byte timeout: the
        request waited for it as for an upstream's answer)."""
        if self.catch_all:  # the pool of one: its replica takes every request, with nothing to count
            only = self._every[0]
            if not only.detected:  # (an upstream that was loading when the proxy started)
                await only.detect()
            return only, 0.0
        candidates = [r for r in replicas if r not in tried and r.available]
        if not candidates:
            raise _unavailable(model)
        chosen = candidates[0] if len(candidates) == 1 else self.pick(candidates, key)
        if not chosen.has_room:
            roomy = [r for r in candidates if r.has_room]
            if roomy:
                chosen = min(roomy, key=_load)
            else:
                chosen = min(candidates, key=lambda r: len(r.waiting) / r.entry.weight)
            if key is not None:  # the prompt is cached where it goes, not where pick meant it to
                self.prefixes.assign(_digest(key), chosen)
        if chosen.has_room:
            chosen.in_flight += 1
            self.metrics.publish(chosen)
            return chosen, 0.0
        if len(chosen.waiting) >= chosen.entry.max_queue:
            raise _queue_full(model)
        return chosen, await self._wait(chosen, patience)

    async def _wait(self, chosen: Replica, patience: float) -> float:
        """Wait in ``chosen``'s queue for one of its slots, at most ``patience`` seconds; the seconds
        waited."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        chosen.waiting.append(waiter)
        self.metrics.publish(chosen)
        began = time.monotonic()
        try:
            async with asyncio.timeout(patience if math.isfinite(patience) else None):
                await waiter
        except BaseException as stopped:
            if waiter.done() and not waiter.cancelled():
                self.done(chosen, None, None)  # given a slot as it was cancelled: passed on
            else:
                with contextlib.suppress(ValueError):
                    chosen.waiting.remove(waiter)
                self.metrics.publish(chosen)
            if isinstance(stopped, TimeoutError):
                raise upstream_timeout("no upstream serving the model had a free slot in time") from None
            raise
        return time.monotonic() - began

    def done(
        self, replica: Replica, started: float | None, fault: APIError | None, status: int | None = None
    ) -> None:
        """A request on ``replica`` ended (``fault``: the upstream's failure, if it failed)."""
        if self.catch_all:
            return
        replica.release()
        metrics = self.metrics
        metrics.publish(replica)
        if started is not None:
            metrics.of(replica)[2].observe(time.monotonic() - started)
        replica.stalls = replica.stalls + 1 if isinstance(fault, UpstreamTimeout) else 0
        if fault is not None and (upstream_fault(fault, status) or replica.stalls >= STALLS_TO_EJECT):
            metrics.errors.labels(replica.label).inc()
            if replica.available:
                metrics.ejections.labels(replica.label).inc()
            replica.eject(self.routing.options.eject_cooldown)
            if status == 503:
                replica.ready = False  # loading, or overloaded: until its health check says otherwise
            metrics.healthy.labels(replica.label).set(0)
        if replica.retired and replica.in_flight == 0:
            self._close_later(replica)

    def _close_later(self, replica: Replica) -> None:
        task = asyncio.create_task(replica.upstream.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def retried(self, replica: Replica) -> None:
        self.metrics.retries.labels(replica.label).inc()


def _load(replica: Replica) -> float:
    return replica.load


def _digest(key: bytes) -> int:
    """A prompt prefix's 64-bit digest: what the prefix table and rendezvous hashing read."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


STALLS_TO_EJECT = 3
"""Timeouts in a row that leave a replica out: one is no fault of its own (a long prompt), three with no
answer between are a replica that answers /health but never a completion, which its health check kept
in rotation for good (issue 32: 5 of 20 requests got a 504). After the cooldown it gets a request
again, and one more timeout leaves it out again until it answers one."""


def upstream_fault(error: APIError, status: int | None) -> bool:
    """Whether ``error`` says the replica failed (no connection, a connection cut, a 5xx), not the
    request (a 4xx) or its length (a timeout: a long prompt is no fault of the replica's)."""
    if isinstance(error, UpstreamRefused | UpstreamBroke):
        return True
    if error.status < 500:
        # The proxy read the answer as the request's fault, whatever status said it: a context overflow
        # (llama.cpp #14566), a parameter refused with a 500 (Q72's echo). Counted as the replica's, one
        # client's request left a model's only replica out, and every other client got a 503.
        return False
    return status is not None and status >= 500 and status != 504


def retryable(error: APIError, status: int | None) -> bool:
    """Whether another replica may take a request that failed with ``error`` before its first byte:
    connection refused or cut, or a 502 or 503 (a replica loading or overloaded)."""
    return isinstance(error, UpstreamRefused | UpstreamBroke) or status in (502, 503)


def unrouted(model: Any) -> APIError:
    """The error for a request whose model no upstream of the file serves: a 404 for a name, the
    missing parameter's 400 for none (a request without ``model`` was told "The model 'None' does not
    exist"; the pool of one lets it pass, as local clients leave it out)."""
    if model is None:
        return APIError.make(
            "Missing required parameter: 'model'.", 400, code="missing_required_parameter", param="model"
        )
    return APIError.make(f"The model '{model}' does not exist", 404, code="model_not_found", param="model")


def _unavailable(model: str) -> APIError:
    error = APIError.make(
        f"no upstream serving the model '{model}' is ready; try again shortly",
        503,
        code="upstream_unavailable",
    )
    error.headers = [(b"retry-after", b"1")]
    return error


def _queue_full(model: str) -> APIError:
    error = APIError.make(
        f"every upstream serving the model '{model}' is at its limit and its queue is full; try again "
        "shortly",
        429,
        code="upstream_queue_full",
    )
    error.headers = [(b"retry-after", b"1")]
    return error
