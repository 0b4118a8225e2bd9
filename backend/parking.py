"""Idle sequences' KV cells held in host memory while a unified cache serves others.

In one unified KV cache each decode step attends over every cell from the first to the highest in use,
other sequences' included (masked, not skipped). With idle slots' cached prefixes kept there for reuse,
one stream decoded at 0.73x llama-server's after a burst of 16 had filled the idle slots (bench/RESULTS.md,
issue 37, run O: 37 tokens/s on a fresh server, 24-30 after; llama-server, same library, steady at 33-36).
llama-server moves idle slots out to a RAM prompt cache when a task starts (tools/server/server-context.cpp,
``cache_idle_slots``, b11434); so does the engine (backend/engine.py): when a sequence is admitted, every
other idle slot's cells are copied out (``llama_state_seq_get_data``) and removed from the cache, and copied
back into the slot that a later prompt picks for the prefix it shares. At most ``PARKED_BYTES`` are held;
past that the states parked first are dropped (their slots then reuse nothing).
"""

from __future__ import annotations

import collections
import ctypes
from typing import Any

import llama_cpp as ll

__all__ = ["PARKED_BYTES", "Parking"]

PARKED_BYTES = 2 * 1024**3
"""Host memory for parked sequences: Gemma 3 270M's cells take about 18 KiB a token (f16), so a 12,000-token
agent prompt 216 MiB; llama-server's prompt cache defaults to 8 GiB."""


class Parking:
    """The parked sequences of one llama context, by sequence id (only the engine's thread calls it)."""

    def __init__(self, ctx: Any, budget: int = PARKED_BYTES) -> None:
        self._ctx = ctx
        self._budget = budget
        self._held: collections.OrderedDict[int, ctypes.Array[ctypes.c_uint8]] = collections.OrderedDict()
        self.bytes = 0

    def park(self, seq_id: int) -> list[int] | None:
        """Copy ``seq_id``'s cells out (the caller then removes them from the cache); the ids whose states
        were dropped to make room for it, or None where it could not be held (too large, or the copy
        failed): the caller then leaves the cells where they are."""
        size = int(ll.llama_state_seq_get_size(self._ctx, seq_id))
        if size <= 0 or size > self._budget:
            return None
        data = (ctypes.c_uint8 * size)()
        if int(ll.llama_state_seq_get_data(self._ctx, data, size, seq_id)) != size:
            return None
        dropped = []
        while self.bytes + size > self._budget and self._held:
            oldest, state = self._held.popitem(last=False)
            self.bytes -= len(state)
            dropped.append(oldest)
        self._held[seq_id] = data
        self.bytes += size
        return dropped

    def restore(self, seq_id: int) -> bool:
        """Copy ``seq_id``'s parked cells back into the cache (it holds none of its own now); whether
        they fit. The state is let go either way."""
        data = self._held.pop(seq_id)
        self.bytes -= len(data)
        return int(ll.llama_state_seq_set_data(self._ctx, data, len(data), seq_id)) == len(data)

    def drop(self, seq_id: int) -> None:
        if (data := self._held.pop(seq_id, None)) is not None:
            self.bytes -= len(data)
