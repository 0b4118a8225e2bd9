"""Idle sequences' KV cells held in host memory while a unified cache serves others.

In one unified KV cache each decode step attends over every cell from the first to the highest in use,
other sequences' included (masked, not skipped). With idle slots' cached prefixes kept there for reuse,
one stream decoded at 0.73x llama-server's after a burst of 16 had filled the idle slots (bench/RESULTS.md,
issue 37, run O: 37 tokens/s on a fresh server, 24-30 after; llama-server, same library, steady at 33-36).
llama-server moves idle slots out to a RAM prompt cache when a task starts (tools/server/server-context.cpp,
``cache_idle_slots``, b11434); so does the engine (backend/engine.py): when a sequence is admitted, every
other idle slot's cells are copied out (``llama_state_seq_get_data``) and removed from the cache, and copied
back into the slot that a later prompt picks for the prefix it shares. While it has nothing to run, the
engine parks idle slots itself, one at a time, all but the one used last, so that the next admission
finds little or nothing to copy. At most ``PARKED_BYTES`` are held;
past that the states least recently parked or restored are dropped (slots parked with them then reuse
nothing).

States are kept by the tokens they hold, and one copied back stays, as llama-server's prompt cache keeps
an entry it loads: a slot parked holding tokens a kept state holds (a request asked again, greedy, with
the same answer, in whichever slot) is not copied again. The copy is what costs: a burst's sequences
hold interleaved cells, and with flash attention off the V cache is transposed, so one slot of 70 tokens
took about 9 ms and parking 15 after a 16-stream burst 177-220 ms, the first request after it running at
48 tokens/s against 56; with the states kept, 69-90 ms and 51-58 tokens/s (bench/RESULTS.md, 2026-12-01).
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
    """The states of idle sequences of one llama context, kept by the tokens they hold, and which
    sequence is parked with which (only the engine's thread calls it)."""

    def __init__(self, ctx: Any, budget: int = PARKED_BYTES) -> None:
        self._ctx = ctx
        self._budget = budget
        self._states: collections.OrderedDict[tuple[int, ...], ctypes.Array[ctypes.c_uint8]] = (
            collections.OrderedDict()
        )
        """Least recently parked or restored first."""
        self._parked: dict[int, tuple[int, ...]] = {}
        self.bytes = 0
        self.copies = 0
        """States copied out of the cache (a park whose tokens a kept state holds copies none)."""

    def park(self, seq_id: int, tokens: list[int]) -> list[int] | None:
        """``seq_id``'s cells, holding ``tokens``, out (the caller then removes them from the cache):
        copied, unless a state kept holds those tokens (any sequence's); the sequences whose states were
        dropped to make room for it, or None where it could not be held (too large, or the copy failed):
        the caller then leaves the cells where they are."""
        key = tuple(tokens)
        if key in self._states:
            self._states.move_to_end(key)
            self._parked[seq_id] = key
            return []
        size = int(ll.llama_state_seq_get_size(self._ctx, seq_id))
        if size <= 0 or size > self._budget:
            return None
        data = (ctypes.c_uint8 * size)()
        if int(ll.llama_state_seq_get_data(self._ctx, data, size, seq_id)) != size:
            return None
        self.copies += 1
        gone: set[tuple[int, ...]] = set()
        while self.bytes + size > self._budget and self._states:
            oldest, state = self._states.popitem(last=False)
            self.bytes -= len(state)
            gone.add(oldest)
        self._states[key] = data
        self.bytes += size
        self._parked[seq_id] = key
        dropped = [seq for seq, held in self._parked.items() if held in gone]
        for seq in dropped:
            del self._parked[seq]
        return dropped

    def restore(self, seq_id: int) -> bool:
        """Copy ``seq_id``'s parked state back into the cache (it holds no cells of its own now); whether
        it fitted. The state stays kept (see the module's docstring)."""
        key = self._parked.pop(seq_id)
        data = self._states[key]
        self._states.move_to_end(key)
        return int(ll.llama_state_seq_set_data(self._ctx, data, len(data), seq_id)) == len(data)

    def drop(self, seq_id: int) -> None:
        """``seq_id`` is parked no more (its state stays kept for whichever sequence holds its tokens)."""
        self._parked.pop(seq_id, None)
