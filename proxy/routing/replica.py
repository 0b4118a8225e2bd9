"""One upstream of the proxy's pool: its client, adapter and names, and what the router knows of it now.

Its state is this worker's own (proxy/routing/README in docs/proxy.md, "Several proxies"): requests in
flight and waiting, whether its ``/health`` says it is ready, and until when it is left out after a
fault (passive ejection).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..adapters import Adapter
from ..adapters.detection import detect_adapter
from ..config import ProxyConfig
from ..served_names import ServedNames
from ..upstream import Upstream
from .config_file import UpstreamEntry

__all__ = ["NO_ROUTE", "Replica"]

_PROBE_TIMEOUT = 5.0
_DETECT_RETRY = 2.0
"""Seconds before an upstream that gave no answer to judge its family by is asked again."""
NO_ROUTE = frozenset({404, 405, 501})
"""What a server answers on a path it has no route for."""


@dataclass(eq=False, slots=True)
class Replica:
    entry: UpstreamEntry
    config: ProxyConfig
    """The proxy's settings with this upstream's URL, kind and key."""
    upstream: Upstream
    adapter: Adapter
    names: ServedNames
    label: str
    """Its name in metrics and the access log: its URL (never its key)."""
    in_flight: int = 0
    waiting: deque[asyncio.Future[None]] = field(default_factory=deque)
    ready: bool = True
    """What its last health check said (llama.cpp's /health answers 503 while it loads its model)."""
    ejected_until: float = 0.0
    stalls: int = 0
    """Requests in a row that it answered nothing in time (first-byte or idle timeouts), none since."""
    discovered: tuple[str, ...] = ()
    """The models its listing named, when the file names none."""
    retired: bool = False
    """Dropped by a reload: closed once its last request is done."""
    detected: bool = False
    """Whether its adapter was chosen by probing it (:meth:`detect`)."""
    detecting: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while its family is probed: one probe, however many requests find it unknown."""
    next_detection: float = 0.0
    """When :meth:`detect` may ask again, after an upstream that gave no answer to judge by."""
    seed: int = 0
    """Its rendezvous-hash seed, from its label: the same in every worker and every proxy."""
    gauges: tuple[Any, Any, Any] | None = None
    """Its labelled metrics (RouterMetrics.of), looked up once: ``labels()`` costs on every call."""
    probing: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while its own endpoint of a protocol is probed (``auto``): one probe, however many ask."""

    def __post_init__(self) -> None:
        self.seed = int.from_bytes(hashlib.blake2b(self.label.encode(), digest_size=8).digest(), "big")

    async def detect(self) -> None:
        """Choose its adapter by probing it (proxy/adapters/detection.py), unless done already or asked
        less than ``_DETECT_RETRY`` seconds ago without an answer to judge by (a server still loading its
        model, or not yet listening): then it is served as it was, and asked again later."""
        if self.detected or time.monotonic() < self.next_detection:
            return
        async with self.detecting:
            if self.detected or time.monotonic() < self.next_detection:
                return  # (another request probed it while this one waited)
            adapter = await detect_adapter(self.config, self.upstream)
            if adapter is None:
                self.next_detection = time.monotonic() + _DETECT_RETRY
                return
            self.adapter = adapter
            self.detected = True

    @property
    def available(self) -> bool:
        return self.ready and not self.retired and time.monotonic() >= self.ejected_until

    @property
    def models(self) -> tuple[str, ...]:
        return self.entry.models if self.entry.models is not None else self.discovered

    @property
    def has_room(self) -> bool:
        limit = self.entry.max_concurrency
        return limit is None or self.in_flight < limit

    @property
    def load(self) -> float:
        """Requests in flight and waiting, per unit of weight: the least loaded replica gets the next."""
        return (self.in_flight + len(self.waiting)) / self.entry.weight

    async def speaks(self, protocol: str, path: str) -> bool:
        """Whether ``protocol``'s requests go to this upstream's own ``path`` (normalized there), not
        translated to chat: as its table in the file says (``responses = "native"``), else as the
        command line does (``--responses``); for ``auto``, once a probe (an empty request: a server with
        the route refuses it, one without has no route) found it there, remembered in its traits."""
        mode = self.entry.native.get(protocol) or self.config.native_mode(protocol)
        if mode != "auto":
            return mode == "native"
        known = self.upstream.traits.native_paths
        if path not in known:
            async with self.probing:
                if path not in known:
                    status, _ = await self.upstream.answer("POST", path, {}, _PROBE_TIMEOUT)
                    if status is not None:  # no answer at all says nothing: asked again next time
                        known[path] = status not in NO_ROUTE
        return known.get(path, False)

    def eject(self, cooldown: float) -> None:
        self.ejected_until = time.monotonic() + cooldown

    def release(self) -> None:
        """One request done: the next waiting one (if any) takes its slot."""
        self.in_flight -= 1
        while self.waiting and self.has_room:
            waiter = self.waiting.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
