"""Events from the engine's thread to the event loop, handed over in batches.

``loop.call_soon_threadsafe`` for each event wrote to the loop's wake-up socket and woke the loop once
per row of every decode step (16 times a step at 16 streams), and each wake-up took the GIL from the
engine thread in the middle of its step, between two of its llama.cpp calls. The engine now hands over a
step's events together, once the step is done and just before its next ``llama_decode``, which runs
without the GIL (engine.py); an inbox takes them for its loop and wakes the loop once for all the events
that arrived before the loop ran, so the loop's work on them overlaps the next decode.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["LoopInbox"]


class LoopInbox:
    """What the engine's thread hands to one event loop: items for its queues, delivered in the loop."""

    _inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopInbox] = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # (the registry's values must not keep its keys alive)
        self._items: list[tuple[asyncio.Queue[Any], Any]] = []
        self._lock = threading.Lock()
        self._scheduled = False

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> LoopInbox:
        """The loop's one inbox (created on the loop's thread, at a request)."""
        inbox = cls._inboxes.get(loop)
        if inbox is None:
            inbox = cls._inboxes[loop] = cls(loop)
        return inbox

    def sender(self, queue: asyncio.Queue[Any]) -> Callable[[Any], None]:
        """A function any thread may call to put an item on ``queue`` (one of this loop's)."""

        def send(item: Any) -> None:
            with self._lock:
                self._items.append((queue, item))
                if self._scheduled:
                    return
                self._scheduled = True
            loop = self._loop()
            try:
                if loop is None:
                    raise RuntimeError("the event loop is gone")
                loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # closed: its requests are gone, and so is whatever was for them
                with self._lock:
                    self._items.clear()
                    self._scheduled = False

        return send

    def _deliver(self) -> None:
        with self._lock:
            items, self._items = self._items, []
            self._scheduled = False
        for queue, item in items:
            queue.put_nowait(item)
