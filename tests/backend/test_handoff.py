"""The engine's events reach the event loop in order, and a batch of them wakes the loop once."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from typing import Any

from backend.handoff import LoopInbox


def test_a_threads_events_arrive_in_order_with_one_wake_up_per_batch() -> None:
    async def main() -> tuple[list[Any], list[Any], int]:
        loop = asyncio.get_running_loop()
        wake_ups = 0
        original = loop.call_soon_threadsafe

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal wake_ups
            wake_ups += 1
            return original(*args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
        first: asyncio.Queue[Any] = asyncio.Queue()
        second: asyncio.Queue[Any] = asyncio.Queue()
        inbox = LoopInbox.of(loop)
        assert LoopInbox.of(loop) is inbox
        to_first, to_second = inbox.sender(first), inbox.sender(second)

        def engine_step(step: int) -> None:  # a decode step's rows, handed over together
            for row in range(16):
                (to_first if row % 2 else to_second)((step, row))

        for step in range(3):
            thread = threading.Thread(target=engine_step, args=(step,))
            thread.start()
            thread.join()  # the loop cannot run meanwhile: the whole step waits for one wake-up
            await asyncio.sleep(0)
        got_first = [first.get_nowait() for _ in range(first.qsize())]
        got_second = [second.get_nowait() for _ in range(second.qsize())]
        return got_first, got_second, wake_ups

    got_first, got_second, wake_ups = asyncio.run(main())
    assert got_first == [(step, row) for step in range(3) for row in range(1, 16, 2)]
    assert got_second == [(step, row) for step in range(3) for row in range(0, 16, 2)]
    assert wake_ups == 3


def test_a_closed_loop_keeps_nothing_and_holds_up_no_other() -> None:
    """Events for a loop that closed are dropped, not kept; a loop that is gone leaves the registry."""
    closed = asyncio.new_event_loop()
    send = LoopInbox.of(closed).sender(asyncio.Queue())
    closed.close()
    send("late")  # the engine's thread must not fail on it
    send("later")

    async def main() -> Any:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        LoopInbox.of(asyncio.get_running_loop()).sender(queue)("on time")
        return await asyncio.wait_for(queue.get(), 5)

    assert asyncio.run(main()) == "on time"
    gone = weakref.ref(closed)
    del send, closed
    gc.collect()
    assert gone() is None  # the registry did not keep it
