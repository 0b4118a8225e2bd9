"""Which replica holds each recent prompt prefix: the memory behind prefix affinity.

Rendezvous hashing alone sends each prefix to a fixed replica, whatever the others hold. With few
prefixes that is lopsided: bench/prefix_affinity.py (run 34) put three of four documents on one of two
replicas, whose two slots then thrashed while the other replica idled, and affinity reused fewer
prompt tokens (25%) than no affinity (37%). So a prefix is placed the way consistent hashing with
bounded loads does it (Mirrokni, Thorup and Zadimoghaddam, 2016; HAProxy's ``hash-balance-factor``):
in its rendezvous order, on the first replica that holds no more than its share of the prefixes held
among the candidates, and it stays there while that replica is not much busier than the least busy.

The table is this worker's own and bounded (``CAPACITY`` prefixes, least recently used dropped first);
a replica's count is what it was sent, not what its cache still holds, which is all the proxy can know.
With ``--workers N`` each worker places prefixes by its own counts; since most prefixes land on their
first rendezvous choice, the workers mostly agree.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .replica import Replica

__all__ = ["CAPACITY", "PrefixTable"]

CAPACITY = 4096
"""Prefixes remembered per worker: 8-byte digests, about 0.5 MB with the dictionary's own overhead."""


class PrefixTable:
    """The replica each remembered prefix was last sent to, and how many prefixes each holds."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._owners: OrderedDict[int, Replica] = OrderedDict()
        self._held: dict[Replica, int] = {}

    def __len__(self) -> int:
        return len(self._owners)

    def owner(self, digest: int) -> Replica | None:
        return self._owners.get(digest)

    def held(self, replica: Replica) -> int:
        return self._held.get(replica, 0)

    def place(self, ordered: list[Replica]) -> Replica:
        """The replica for a prefix no candidate holds: the first of ``ordered`` (its rendezvous order)
        holding at most its share, the prefixes held among them with this one, split evenly (rounded
        up, so that one always qualifies)."""
        total = sum(self.held(r) for r in ordered) + 1
        share = -(-total // len(ordered))
        return next(r for r in ordered if self.held(r) < share)

    def assign(self, digest: int, replica: Replica) -> None:
        """``replica`` was sent the prefix: it is the one to send it to next."""
        previous = self._owners.pop(digest, None)
        if previous is not None:
            self._count(previous, -1)
        self._owners[digest] = replica
        self._count(replica, 1)
        while len(self._owners) > self.capacity:
            _, dropped = self._owners.popitem(last=False)
            self._count(dropped, -1)

    def forget(self, replica: Replica) -> None:
        """A replica dropped from the configuration: its prefixes are placed again."""
        for digest in [d for d, r in self._owners.items() if r is replica]:
            del self._owners[digest]
        self._held.pop(replica, None)

    def _count(self, replica: Replica, change: int) -> None:
        held = self._held.get(replica, 0) + change
        if held:
            self._held[replica] = held
        else:
            self._held.pop(replica, None)
