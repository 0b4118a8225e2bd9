"""Upstream requests in flight, admitted first come first served, a fan-out's all at once.

The upstream pool holds at most ``--max-upstream-connections`` connections; a request past that waits
its turn. A fanned-out request (``n`` > 1, a prompt array) needs all of its upstream requests at once:
it sends them together. Taken one at a time, four streams of ``n`` 3 through 4 connections could each
hold one connection and wait for the rest (a fan-out then answered once each had its first chunk), until the
first-byte timeout gave all four a 504 (it did under load, in 3 of 20 runs, and once in CI). Here a
fan-out takes its places together or not at all, in its turn; a request needs one place from before
it asks for a connection until its response is read or abandoned.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib

__all__ = ["Admission", "Reservation"]


class Admission:
    """At most ``capacity`` places taken at once; requests for places are served in the order they
    came, a request for several only when all of them are free (none jumps the queue meanwhile)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free = capacity
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @property
    def taken(self) -> int:
        """Places held now."""
        return self.capacity - self._free

    async def take(self, count: int = 1) -> None:
        """Wait for ``count`` places, behind every request that came before."""
        if count > self.capacity:
            raise ValueError(f"{count} places asked of an admission of {self.capacity}")
        if not self._waiting and self._free >= count:
            self._free -= count
            return
        entry = (count, asyncio.get_running_loop().create_future())
        self._waiting.append(entry)
        try:
            await entry[1]
        except asyncio.CancelledError:
            if entry[1].done() and not entry[1].cancelled():
                self.give(count)  # admitted as it was cancelled: the places go on to the next
            else:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(entry)
                self._admit()  # those behind it may fit now
            raise

    def give(self, count: int = 1) -> None:
        """Give back ``count`` places taken."""
        self._free += count
        self._admit()

    def _admit(self) -> None:
        while self._waiting and self._waiting[0][0] <= self._free:
            count, waiter = self._waiting.popleft()
            if waiter.done():  # cancelled, its task not yet resumed to take itself out
                continue
            self._free -= count
            waiter.set_result(None)

    async def reserve(self, count: int) -> Reservation:
        """``count`` places taken together, for requests to come (``Reservation.use``)."""
        await self.take(count)
        return Reservation(self, count)


class Reservation:
    """Places a fan-out took together: each of its requests uses one instead of waiting in turn.

    Until it is closed, a place given back comes back here: a request of the fan-out asked again
    (a stream that ended empty, asked again whole: Q52) must not wait behind the fan-outs that came
    after its own, which wait for the places its siblings hold.
    """

    def __init__(self, admission: Admission, count: int) -> None:
        self._admission = admission
        self._left = count
        self._closed = False

    def use(self) -> bool:
        """One place for a request, from those left (False when none is left)."""
        if self._left <= 0:
            return False
        self._left -= 1
        return True

    def give(self, count: int = 1) -> None:
        """Give back ``count`` places used: to this reservation while it is open, else to the
        admission."""
        if self._closed:
            self._admission.give(count)
        else:
            self._left += count

    def close(self) -> None:
        """The places no request uses now (one whose start failed first) go back; those in use go
        back to the admission when their requests end."""
        self._closed = True
        left, self._left = self._left, 0
        if left:
            self._admission.give(left)
