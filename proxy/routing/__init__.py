"""The proxy's upstreams as one pool: the file of ``conformant serve --config FILE`` (config_file.py; one
``--upstream`` is a pool of one), one upstream's state (replica.py), and the choice of replica and its
health (pool.py). A request's retry on another replica before its first byte is its source's
(proxy/sources/failover.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import Any

from conformance.request import prompt_text

from .config_file import ConfigFileError, RoutingFile, load_routing_file, one_upstream, routing_of
from .pool import Router, unrouted

__all__ = [
    "ConfigFileError",
    "Router",
    "RoutingFile",
    "load_routing_file",
    "one_upstream",
    "prefix_key",
    "reload_on_sighup",
    "routing_of",
    "unrouted",
]

log = logging.getLogger("conformant.routing")


def prefix_key(body: dict[str, Any], chars: int) -> bytes | None:
    """What names the prompt's prefix for affinity: its first ``chars`` characters (chat: the messages'
    texts, system prompt first), None for a body with no text or with affinity off (``chars`` 0)."""
    if chars <= 0:  # affinity off: least outstanding alone
        return None
    text = prompt_text(body)
    return text[:chars].encode() if text else None


def reload_on_sighup(router: Router, path: str | None) -> Callable[[], None]:
    """Re-read ``path`` on SIGHUP and serve it (a bad file is logged, and the routes that serve stay);
    returns what stops listening. Only the main thread can take signals: elsewhere (a server run in
    a thread) nothing is done."""
    if path is None:
        return lambda: None
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    async def reload() -> None:
        try:
            routing = load_routing_file(path)
        except ConfigFileError as exc:
            log.error("conformant serve: SIGHUP: the file was not reloaded: %s", exc)
            return
        await router.reload(routing)
        log.warning("conformant serve: SIGHUP: %s reloaded (%d upstreams)", path, len(routing.upstreams))

    def hup() -> None:
        task = loop.create_task(reload())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    try:
        loop.add_signal_handler(signal.SIGHUP, hup)
    except (ValueError, RuntimeError, NotImplementedError):
        return lambda: None

    def stop() -> None:
        with contextlib.suppress(ValueError, RuntimeError):
            loop.remove_signal_handler(signal.SIGHUP)

    return stop
