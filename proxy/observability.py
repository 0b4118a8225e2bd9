"""Access log, ``x-request-id`` and Prometheus metrics: one ASGI middleware, no per-chunk cost."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from conformance import jsoncodec
from conformance.api_errors import APIError

from .normalizer import Repairs
from .normalizer.repairs import TOOL_TEXT_UNPARSED
from .normalizer.text_lost import TEXT_LOST_CODE
from .normalizer.usage import USAGE_ESTIMATED

__all__ = ["MULTIPROCESS_DIRECTORY", "Exchange", "Metrics", "ObservabilityMiddleware", "exchange_of"]

access_log = logging.getLogger("conformant.access")

# Set (by ``--workers``, or by the user) when several processes serve: prometheus_client then keeps every
# value in a file of this directory, read by whichever worker answers ``/metrics``.
MULTIPROCESS_DIRECTORY = "PROMETHEUS_MULTIPROC_DIR"

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


@dataclass(slots=True)
class Exchange:
    """What one request did, filled in by the handler, logged and counted once at the end."""

    request_id: str
    started: float
    endpoint: str = "other"
    status: int = 0
    upstream_status: int | None = None
    first_token: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    repairs: Repairs = field(default_factory=Repairs)
    disconnected: bool = False
    error: str | None = None
    error_code: str | None = None
    upstream: str | None = None
    """The upstream that answered, when the proxy routes to several (``--config``)."""
    queued_ms: float | None = None
    """Time the request waited for a slot of an upstream at its ``max_concurrency``."""
    socket: str | None = None
    """The request id of the WebSocket whose turn this request is (proxy/sockets.py)."""

    def take_error(self, error: APIError) -> None:
        """The error the client got (an HTTP error or the stream's error event), for the log line."""
        self.error = error.message
        code = error.body["error"].get("code")
        self.error_code = code if isinstance(code, str) else None

    def record(self, repairs: Mapping[str, int] | Iterable[str]) -> None:
        """The repairs a hop reports having made for this request (counts, or one per quirk id named):
        the one place a request's repairs are recorded, logged and counted at the end."""
        self.repairs.update(repairs)

    def mark_first_token(self) -> None:
        if self.first_token is None:
            self.first_token = time.perf_counter()

    def take_usage(self, usage: Any) -> None:
        """The counts of an answer's usage (an upstream's own, on a native route, may be any JSON)."""
        if isinstance(usage, dict):
            self.prompt_tokens = _count(usage.get("prompt_tokens"))
            self.completion_tokens = _count(usage.get("completion_tokens"))

    @property
    def usage_estimated(self) -> bool:
        """Whether the usage is the proxy's estimate, not the upstream's count nor one made with its
        tokenizer and template (a hop marks it among its repairs: proxy/normalizer/usage.py)."""
        return bool(self.repairs.get(USAGE_ESTIMATED))

    @property
    def tool_text_unparsed(self) -> bool:
        """Whether markup that opened tool calls in the text did not parse, and went out as text."""
        return bool(self.repairs.get(TOOL_TEXT_UNPARSED))


def exchange_of(scope: Scope) -> Exchange:
    exchange: Exchange = scope["state"]["conformant_exchange"]
    return exchange


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self.requests = Counter(
            "conformant_requests", "Requests served", ["endpoint", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "conformant_request_seconds",
            "Request duration",
            ["endpoint"],
            registry=self.registry,
            buckets=_LATENCY_BUCKETS,
        )
        self.ttft = Histogram(
            "conformant_time_to_first_token_seconds",
            "Time to the first chunk sent",
            ["endpoint"],
            registry=self.registry,
            buckets=_LATENCY_BUCKETS,
        )
        self.repairs = Counter(
            "conformant_repairs",
            "Responses that needed a repair, by quirk id",
            ["rule"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "conformant_in_flight_requests",
            "Requests in progress",
            registry=self.registry,
            multiprocess_mode="livesum",  # with --workers: the sum over the workers alive now
        )
        self.disconnects = Counter(
            "conformant_client_disconnects", "Requests the client abandoned", registry=self.registry
        )
        self.texts_lost = Counter(
            "conformant_texts_lost",
            "Answers failed because the upstream counted tokens but sent no text (Q14)",
            registry=self.registry,
        )
        self.usage_estimated = Counter(
            "conformant_usage_estimated",
            "Responses whose usage the proxy estimated: the upstream sent none, and its tokenizer or"
            " template could not count it (Q28)",
            ["endpoint"],
            registry=self.registry,
        )
        self.tool_text_unparsed = Counter(
            "conformant_tool_text_unparsed",
            "Responses whose text opened tool calls in a model's syntax that did not parse as calls of the"
            " offered functions, sent on as text (Q79)",
            ["endpoint"],
            registry=self.registry,
        )

    def exposed(self) -> CollectorRegistry:
        """What ``/metrics`` shows: this process's metrics, or with ``--workers`` every worker's summed."""
        directory = os.environ.get(MULTIPROCESS_DIRECTORY)
        if not directory:
            return self.registry
        _forget_killed_workers(Path(directory))
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return registry

    def retire(self) -> None:
        """At a worker's shutdown: its requests in flight no longer count."""
        if os.environ.get(MULTIPROCESS_DIRECTORY):
            mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, kept: prometheus_client checks and locks on each call (1.5 us,
        five a request; 0.3 us kept). The labels are endpoints, statuses and quirk ids: few."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def record(self, exchange: Exchange, duration: float) -> None:
        endpoint = exchange.endpoint
        self._child(self.requests, endpoint, str(exchange.status)).inc()
        self._child(self.latency, endpoint).observe(duration)
        if exchange.first_token is not None:
            self._child(self.ttft, endpoint).observe(exchange.first_token - exchange.started)
        for rule in exchange.repairs:
            self._child(self.repairs, rule).inc()
        if exchange.disconnected:
            self.disconnects.inc()
        if exchange.error_code == TEXT_LOST_CODE:
            self.texts_lost.inc()
        if exchange.usage_estimated:
            self.usage_estimated.labels(exchange.endpoint).inc()
        if exchange.tool_text_unparsed:
            self.tool_text_unparsed.labels(exchange.endpoint).inc()


def _forget_killed_workers(directory: Path) -> None:
    """Retire the in-flight count of each worker that died without retiring it itself (SIGKILL, out of
    memory): uvicorn's supervisor starts a new worker, and the dead one's requests are gone."""
    for gauge in directory.glob("gauge_livesum_*.db"):
        pid = gauge.stem.rpartition("_")[2]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            with contextlib.suppress(FileNotFoundError):  # another worker retired it first
                mark_process_dead(int(pid), str(directory))  # type: ignore[no-untyped-call]
        except PermissionError:  # alive, another user's: a directory the user shares between servers
            pass


class ObservabilityMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._socket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _header(scope, b"x-request-id") or "req_" + os.urandom(12).hex()
        exchange = Exchange(request_id=request_id, started=time.perf_counter())
        state = scope.setdefault("state", {})
        socket = state.get("conformant_exchange")  # a WebSocket turn's request carries its socket's
        exchange.socket = socket.request_id if isinstance(socket, Exchange) else None
        state["conformant_exchange"] = exchange
        raw_id = request_id.encode("latin-1", "replace")

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
                # Under both names the SDKs read: OpenAI's ``x-request-id``, Anthropic's ``request-id``.
                headers = [*message.get("headers", ()), (b"x-request-id", raw_id), (b"request-id", raw_id)]
                message["headers"] = headers
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self.metrics.in_flight.dec()
            duration = time.perf_counter() - exchange.started
            if exchange.status == 0:
                exchange.status = 499 if exchange.disconnected else 500
            self.metrics.record(exchange, duration)
            _log(scope, exchange, duration)

    async def _socket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket: one line when it ends, with the handshake's outcome (101 accepted, else the
        denial's status and error: a refused key or origin was logged nowhere) and its whole duration;
        each of its turns has a line of its own, naming the socket (``socket``). Not counted in the
        metrics, whose request durations a socket's life would swamp."""
        request_id = _header(scope, b"x-request-id") or "ws_" + os.urandom(12).hex()
        exchange = Exchange(request_id=request_id, started=time.perf_counter())
        scope.setdefault("state", {})["conformant_exchange"] = exchange

        async def send_noted(message: Message) -> None:
            if message["type"] == "websocket.accept":
                exchange.status = 101
            elif message["type"] == "websocket.http.response.start":
                exchange.status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noted)
        finally:
            _log(scope, exchange, time.perf_counter() - exchange.started)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            text = value.decode("latin-1")
            return text[:200] if text.isprintable() else None
    return None


def _log(scope: Scope, exchange: Exchange, duration: float) -> None:
    if not access_log.isEnabledFor(logging.INFO):
        return
    ttft = (
        None if exchange.first_token is None else round((exchange.first_token - exchange.started) * 1000, 2)
    )
    client = scope.get("client")
    line = {
        "request_id": exchange.request_id,
        "client": client[0] if client else None,  # behind a trusted proxy, the forwarded one
        "method": scope.get("method", "GET"),  # (a WebSocket's handshake is a GET)
        "path": scope["path"],
        "status": exchange.status,
        "upstream_status": exchange.upstream_status,
        "ttft_ms": ttft,
        "duration_ms": round(duration * 1000, 2),
        "prompt_tokens": exchange.prompt_tokens,
        "completion_tokens": exchange.completion_tokens,
        "usage_estimated": exchange.usage_estimated,
        "tool_text_unparsed": exchange.tool_text_unparsed,
        "repairs": exchange.repairs.summary(),
        "client_disconnected": exchange.disconnected,
        "error": exchange.error,
        "error_code": exchange.error_code,
    }
    if scope["type"] == "websocket":
        line["websocket"] = True
    if exchange.socket is not None:  # a WebSocket's turn
        line["socket"] = exchange.socket
    if exchange.upstream is not None:  # routed (--config): which upstream, and the wait for it
        line["upstream"] = exchange.upstream
        line["queued_ms"] = exchange.queued_ms
    access_log.info(jsoncodec.dumps(line).decode())


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
