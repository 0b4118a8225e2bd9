"""The continuous-batching engine: one llama context, ``parallel`` sequence slots, one worker thread.

A step either decodes one token for every running sequence or prefills waiting prompts (up to a batch
of prompt tokens), never both: a joint step costs about as much as the two apart, so a new request
would wait for the running streams' rows before its first token. While prompts wait, prefill and
decode steps alternate, so a new request's first token comes after at most one decode step and a long
prompt, prefilled in chunks, never stalls running streams. Sequences join and leave between steps.
A slot keeps its KV cache after its sequence ends, and the next sequence whose prompt shares the
longest prefix with it reuses that prefix. With a KV stream per slot, running sequences are kept on
consecutive sequence ids (see ``_pack``): llama.cpp runs its whole graph once per run of consecutive ids.

Cells. By default the slots share one KV cache (llama-server's ``--kv-unified``): any sequence may hold
up to the whole context, and the others share what it leaves. A prompt that could never fit (as long as
the context, or with its ``max_tokens`` longer) is refused before the engine sees it
(``context_length_exceeded``). A waiting sequence is admitted, in arrival order, once its prompt fits
beside what the running ones hold, with ``_HEADROOM`` cells to spare for each; idle slots' cached
prefixes are evicted for it (``llama_memory_seq_rm``), least recently used first. Running sequences
then grow a cell a token; when the next step's cells are not free, idle caches go first, then the
youngest running sequence pauses: its cells are freed, it keeps its slot, its text so far and its next
sampled token, and once there is room again (before any new admission) it computes its tokens again
and goes on. The oldest always goes on, so every sequence ends; a sequence ends with ``length`` only
at the context's own end or its ``max_tokens``, never for what the others hold, and nothing is cut.
(llama-server admits whatever arrives and, when a decode finds no free cell, fails every running
request with "Context size has been exceeded."; tools/server/server-context.cpp, b11434.)

Only the worker thread touches the context. The HTTP side submits :class:`Job` objects and gets
:class:`Event` objects back through a callback (``loop.call_soon_threadsafe`` into an asyncio queue).
"""

from __future__ import annotations

import builtins
import codecs
import collections
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llama_cpp as ll
import numpy as np

from backend.parking import Parking
from backend.sampling import Sampler
from backend.vocab import Vocab
from conformance.stop_sequences import earliest_stop

__all__ = ["Engine", "EngineStats", "Event", "Job", "QueueFull", "TokenLogprob"]

log = logging.getLogger("conformant.backend")


class QueueFull(Exception):
    """More sequences waiting than ``queue_size`` allows: the app answers 429."""


@dataclass(slots=True)
class TokenLogprob:
    token: str
    bytes: bytes
    logprob: float
    top: list[tuple[str, builtins.bytes, float]]


@dataclass(slots=True)
class Event:
    """What a sequence produced: text (with its tokens' logprobs when asked), then one finish."""

    index: int
    text: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprob] | None = None
    """Echo with logprobs: one entry per prompt token after the first (which has no logprob)."""
    finish_reason: str | None = None
    stop_sequence: str | None = None
    """The stop string that ended the text (``finish_reason`` ``stop``), for a protocol that names it."""
    completion_tokens: int = 0
    error: str | None = None


@dataclass(eq=False)
class Job:
    """One sequence to generate (a request with ``n`` choices over ``p`` prompts submits ``n*p`` jobs)."""

    index: int
    prompt: list[int]
    sampler: Sampler
    emit: Callable[[Event], None]
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    logprobs: int | None = None
    prompt_logprobs: bool = False
    cache_prompt: bool = True
    ignore_eos: bool = False
    cancelled: bool = False
    cancel_step: int = -1


@dataclass
class EngineStats:
    steps: int = 0
    cancel_latency_steps: list[int] = field(default_factory=list)
    """Per cancelled running sequence: decode steps between ``cancel()`` and its slot being free."""
    reused_prompt_tokens: int = 0
    packing_moves: int = 0
    """Running sequences moved down to a lower sequence id, to close a gap (``Engine._pack``)."""
    waits_for_cells: int = 0
    """Times the next waiting sequence stayed waiting for room in a unified cache (``Engine._admit``)."""
    evictions: int = 0
    """Idle slots' cached prefixes dropped for room in a unified cache."""
    pauses: int = 0
    """Running sequences paused for room in a unified cache (``Engine._make_room``)."""
    parked: int = 0
    """Idle slots' cells moved out of a unified cache into host memory (backend/parking.py)."""


class _Text:
    """Token bytes -> text: whole UTF-8 characters only, stop strings cut, their prefixes held back."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.pending = ""
        self.tokens: list[tuple[TokenLogprob | None, int]] = []  # (logprob, start offset in pending)

    def add(self, piece: bytes, info: TokenLogprob | None) -> tuple[str, list[TokenLogprob], str | None]:
        """The text to send now, its tokens' logprobs, and the stop string met (None: none yet; of two
        at one place, the first given)."""
        self.tokens.append((info, len(self.pending)))
        self.pending += self.decoder.decode(piece)
        if not self.stops:
            return (*self._emit(len(self.pending)), None)
        found = earliest_stop(self.pending, self.stops)
        if found is not None:
            return (*self._emit(found[0], drop_rest=True), found[1])
        return (*self._emit(len(self.pending) - self._held()), None)

    def flush(self) -> tuple[str, list[TokenLogprob]]:
        self.pending += self.decoder.decode(b"", final=True)
        return self._emit(len(self.pending))

    def _held(self) -> int:
        """Length of the longest tail of pending text that could still grow into a stop string."""
        best = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(self.pending)), best, -1):
                if self.pending.endswith(stop[:k]):
                    best = k
                    break
        return best

    def _emit(self, cut: int, *, drop_rest: bool = False) -> tuple[str, list[TokenLogprob]]:
        text = self.pending[:cut]
        whole = cut >= len(self.pending)
        out = [info for info, start in self.tokens if info is not None and (whole or start < cut)]
        if drop_rest or whole:
            self.tokens = []
        else:
            self.tokens = [(info, start - cut) for info, start in self.tokens if start >= cut]
        self.pending = "" if drop_rest else self.pending[cut:]
        return text, out


# Batch invariance (``--batch-invariant``). llama.cpp's CPU kernels for repacked weights multiply
# activation rows four at a time (gemm) and take the rest one by one (gemv); the two reduce in different
# orders, so a row's numbers depend on where it sits in its batch, and greedy outputs drift with
# whatever else runs. In this mode every row is computed as it would be alone: a decode call holds at
# most three rows (all gemv, like a lone sequence's decode), each prompt is prefilled in calls of its
# own starting on a multiple of four (the gemm/gemv split of a fresh prefill), and a cached prefix is
# reused only up to a multiple of four that a prefill computed (generated tokens were computed by gemv).
_GEMM_ROWS = 4
_VECTOR_ROWS = _GEMM_ROWS - 1

# Packing, with a KV stream per slot (--no-kv-unified, --batch-invariant) only: one unified cache is one
# stream, which llama.cpp cuts by size alone (split_simple), whatever the ids. With a stream per slot it
# splits a batch into one ubatch per run of consecutive, increasing sequence ids (split_equal, sequential)
# and runs the whole graph once per ubatch. Measured with llama_decode alone (Gemma 3 270M, 2 threads, 16
# slots): 4 rows on ids 0-3 took 62 ms a step, on 0, 2, 4, 6 109 ms and on 3, 2, 1, 0 119 ms; 8 rows on 0-3
# and 8-11 135 ms against 99 ms on 0-7 (bench/decode_rows.py). So a new sequence takes a free slot next to
# the running ones unless another free slot's cache saves it at least _MOVE_GAIN prompt tokens, and where
# the running ids still make more than one run, the fewest of them are moved into one window:
# llama_memory_seq_cp across streams copies a whole stream's buffers (6-8 ms for 1,024 cells, 15 ms for
# 4,096 on Gemma 3 270M; it grows with the slot's context and the model's KV size, not the sequence's
# length), once, where a gap costs a graph run at every step. A move overwrites the cache of the free slot
# it lands on (a cross-stream copy resets it), so the window chosen is the one whose free slots' caches are
# the least recently used.
_MOVE_GAIN = 32

_HEADROOM = 64
"""Cells a sequence is admitted with to spare, per running sequence (see "Cells" in the module's
docstring): room for their next tokens, so that an admission is not undone by a pause a few steps on."""

_Row = tuple["_Slot", int, str]
"""(slot, token, kind): "gen" and "last" rows are sampled, "prompt" rows give echo logprobs, "cache"
rows only fill the KV cache."""


class _Slot:
    def __init__(self, seq_id: int) -> None:
        self.seq_id = seq_id
        self.cached: list[int] = []
        """Tokens in this sequence's KV cache, in position order."""
        self.reusable = 0
        """How many of ``cached`` a later prompt may reuse: those a prefill computed on the 4-row grid."""
        self.job: Job | None = None
        self.prefilled = 0
        self.next_token: int | None = None
        self.generated = 0
        self.text = _Text([])
        self.prompt_logprobs: list[TokenLogprob] = []
        self.last_used = 0
        self.feed: list[int] = []
        """What the sequence must have in its cache before it decodes: its prompt, or after a pause the
        tokens it had then (its next token already sampled)."""
        self.paused = False
        """Holds its job but no cells: paused for room in a unified cache (``Engine._make_room``)."""
        self.admitted = 0
        """Order of admission: the youngest running sequence is the one paused."""
        self.parked = False
        """Its ``cached`` cells are held in host memory, not in the cache (backend/parking.py)."""
        self.unparkable = False
        """Its ``cached`` cells could not be parked (too large for the host memory allowed): not tried
        again while the engine idles, until it holds others."""

    def cells(self) -> int:
        """Cells of the cache this slot's sequence holds."""
        return 0 if self.parked else len(self.cached)

    def to_prefill(self) -> int:
        """Tokens of ``feed`` still to compute: cells promised to this sequence, not yet taken."""
        return len(self.feed) - self.prefilled if self.job is not None and not self.paused else 0

    def take_over(self, other: _Slot) -> None:
        """Go on with ``other``'s sequence, whose KV cells were copied here; ``other`` keeps its cache."""
        self.cached = list(other.cached)
        self.reusable = other.reusable
        self.job, other.job = other.job, None
        self.prefilled = other.prefilled
        self.next_token, other.next_token = other.next_token, None
        self.generated = other.generated
        self.text = other.text
        self.prompt_logprobs, other.prompt_logprobs = other.prompt_logprobs, []
        self.last_used = other.last_used
        self.feed, self.paused, self.admitted = other.feed, other.paused, other.admitted
        self.unparkable = False


class Engine:
    """Owns the llama context and the worker thread; ``submit``, ``cancel`` and ``health`` are thread-safe."""

    def __init__(
        self, model: Any, ctx_params: Any, *, queue_size: int = 64, batch_invariant: bool = False
    ) -> None:
        self.model = model
        self.vocab = Vocab(model)
        self.ctx = ll.llama_init_from_model(model, ctx_params)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create the context (see its log above)")
        self.mem = ll.llama_get_memory(self.ctx)
        self.n_parallel = int(ll.llama_n_seq_max(self.ctx))
        self.n_batch = int(ll.llama_n_batch(self.ctx))
        self.n_ctx_seq = int(ll.llama_n_ctx_seq(self.ctx))
        """The most tokens one sequence may hold: the whole cache when unified, else a slot's stream."""
        self.n_cells = int(ll.llama_n_ctx(self.ctx))
        self.unified = bool(ctx_params.kv_unified)
        self.queue_size = queue_size
        self.batch_invariant = batch_invariant
        # Without batch invariance every running sequence decodes in one call (llama.cpp's 4-row gemm).
        self._rows_per_call = _VECTOR_ROWS if batch_invariant else self.n_batch
        self._grid = _GEMM_ROWS if batch_invariant else 1
        self.stats = EngineStats()
        self._batch = ll.llama_batch_init(self.n_batch, 0, 1)
        self._slots = [_Slot(i) for i in range(self.n_parallel)]
        recurrent = bool(ll.llama_model_is_recurrent(model))
        # Recurrent and hybrid memories keep a state per sequence that a copy shares rather than moves;
        # a unified cache is one stream, which llama.cpp never splits by sequence id (see "Packing").
        self._packs = not (self.unified or recurrent or ll.llama_model_is_hybrid(model))
        self._shared = self.unified and not recurrent
        """Whether the sequences take their cells from one cache (see "Cells"); a recurrent model's
        state is one per sequence whatever its length."""
        self._parking = Parking(self.ctx) if self._shared else None
        self._admissions = 0
        self._waiting: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._stop = False
        self._prefill_turn = False
        """Whether the last step prefilled: while prompts wait, prefill and decode steps alternate."""
        self._outbox: list[tuple[Job, Event]] = []
        """The events of a decode call's rows, handed over together once it is done (backend/handoff.py
        says why)."""
        self._thread = threading.Thread(target=self._run, name="llama-engine", daemon=True)
        self._thread.start()

    # ---- HTTP side -------------------------------------------------------------------------------

    def submit(self, jobs: list[Job]) -> None:
        with self._cond:
            if self._stop:
                raise RuntimeError("engine is shut down")
            if len(self._waiting) + len(jobs) > self.queue_size + self._free_slots():
                raise QueueFull(f"{len(self._waiting)} sequences are already waiting for a slot")
            self._waiting.extend(jobs)
            self._cond.notify()

    def cancel(self, jobs: list[Job]) -> None:
        """Safe from any thread: the worker frees their slots before its next decode step."""
        for job in jobs:
            if not job.cancelled:
                job.cancel_step = self.stats.steps
                job.cancelled = True

    def _free_slots(self) -> int:
        return sum(1 for s in self._slots if s.job is None)

    def health(self) -> dict[str, int]:
        busy = sum(1 for s in self._slots if s.job is not None)
        return {
            "slots_idle": self.n_parallel - busy,
            "slots_processing": busy,
            "queued": len(self._waiting),
            "decode_steps": self.stats.steps,
            # Prompt tokens taken from a slot's cache instead of processed again (prefix reuse): what
            # a router's prefix affinity saves (bench/prefix_affinity.py reads it).
            "reused_prompt_tokens": self.stats.reused_prompt_tokens,
        }

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=30)
        for job in list(self._waiting) + [s.job for s in self._slots if s.job is not None]:
            job.sampler.close()
            job.emit(Event(job.index, error="the server is shutting down"))
        self._waiting.clear()
        ll.llama_batch_free(self._batch)
        ll.llama_free(self.ctx)

    # ---- worker ----------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and self._idle() and self._next_to_park() is None:
                    self._cond.wait()
                if self._stop:
                    return
                self._admit()
            if self._idle():
                # Nothing to run: one idle slot parked now, not on the next admission's path; a request
                # that comes meanwhile waits for that one copy at most.
                slot = self._next_to_park()
                if slot is not None:
                    self._park(slot)
                continue
            self._release_cancelled()
            self._pack()
            self._make_room()
            if any(s.job is not None for s in self._slots):
                try:
                    self._step()
                except Exception as exc:  # never let the worker die: fail the running sequences instead
                    log.exception("decode step failed")
                    for slot in self._slots:
                        if slot.job is not None:
                            self._finish(slot, error=f"generation failed: {exc}")
                self._hand_over()  # what a failed step made

    def _emit(self, job: Job, event: Event) -> None:
        self._outbox.append((job, event))

    def _hand_over(self) -> None:
        """The events made since the last hand-over to their requests, in the order they were made."""
        outbox, self._outbox = self._outbox, []
        for job, event in outbox:
            job.emit(event)

    def _admit(self) -> None:
        """Move waiting jobs into free slots (``_slot_for`` says which), in their order, each once its
        prompt fits the cache (paused sequences first, oldest first); ``_pack`` then closes any gap."""
        if self._shared and not self._resume():
            return
        while self._waiting:
            job = self._waiting[0]
            if job.cancelled:
                self._waiting.popleft()
                job.sampler.close()
                continue
            free = [s for s in self._slots if s.job is None]
            if not free:
                return
            slot = self._slot_for(job, free)
            if self._shared and not self._room(len(job.prompt), slot):
                self.stats.waits_for_cells += 1
                return
            self._waiting.popleft()
            self._assign(slot, job)

    # ---- cells (a unified cache) -------------------------------------------------------------------

    def _cells_free(self, besides: _Slot | None = None) -> int:
        """Cells that no slot holds (its cached tokens, ``besides``' aside) nor has been promised (the
        prompt tokens its sequence has still to compute)."""
        used = sum(s.cells() + s.to_prefill() for s in self._slots if s is not besides)
        return self.n_cells - used

    def _room(self, tokens: int, slot: _Slot) -> bool:
        """Whether ``slot`` may take ``tokens`` cells (its own cache is trimmed to what they reuse), with
        ``_HEADROOM`` to spare for each running sequence's next tokens, or what the cache has where it
        has less (a sequence alone always fits: a prompt is shorter than the context). Other idle
        slots' cached prefixes are evicted for it, least recently used first; none where that would not
        be enough."""
        running = sum(1 for s in self._slots if s.job is not None and not s.paused and s is not slot)
        need = min(tokens + _HEADROOM * (running + 1), self.n_cells)
        free = self._cells_free(besides=slot)
        idle = sorted(
            (s for s in self._slots if s.job is None and s.cells() and s is not slot),
            key=lambda s: s.last_used,
        )
        if free + sum(len(s.cached) for s in idle) < need:
            return False
        for other in idle:
            if free >= need:
                break
            free += len(other.cached)
            self._evict(other)
        return True

    def _resume(self) -> bool:
        """Give paused sequences their cells back, oldest first, while they fit; whether all did."""
        for slot in sorted((s for s in self._slots if s.paused), key=lambda s: s.admitted):
            if not self._room(len(slot.feed), slot):
                return False
            slot.paused = False
        return True

    def _make_room(self) -> None:
        """Before a step, a cell for each sequence about to decode: idle slots' cached prefixes go first
        (least recently used first), then the youngest running sequence pauses until there is room
        again. The oldest always goes on: alone, a sequence fits the cache to its end."""
        if not self._shared:
            return
        while True:
            running = [s for s in self._slots if s.job is not None and not s.paused]
            decoding = sum(1 for s in running if s.next_token is not None and not s.to_prefill())
            if self._cells_free() >= decoding:
                return
            idle = [s for s in self._slots if s.job is None and s.cells()]
            if idle:
                self._evict(min(idle, key=lambda s: s.last_used))
            elif len(running) > 1:
                self._pause(max(running, key=lambda s: s.admitted))
            else:
                return  # (never: a lone sequence ends at the context's end, "length")

    def _evict(self, slot: _Slot) -> None:
        self._forget(slot)
        self.stats.evictions += 1

    def _forget(self, slot: _Slot) -> None:
        """``slot`` holds nothing more, in the cache or parked."""
        if slot.parked and self._parking is not None:
            self._parking.drop(slot.seq_id)
        else:
            ll.llama_memory_seq_rm(self.mem, slot.seq_id, -1, -1)
        slot.cached = []
        slot.reusable = 0
        slot.parked = False

    def _idle(self) -> bool:
        """Whether no sequence runs and none waits (read without the lock by the worker: a job that
        arrives meanwhile is admitted on its next turn)."""
        return not self._waiting and all(s.job is None for s in self._slots)

    def _next_to_park(self) -> _Slot | None:
        """While the engine is idle, the idle slot to park next (the least recently used), keeping the
        one used last in the cache: the next request (an agent's next turn) most likely continues it, and
        parked it would be copied back. After a burst the rest are parked here, in time nobody waits for:
        admitting the next request parked them all, 69-220 ms before its first token (bench/RESULTS.md,
        issue 37, 2026-12-01)."""
        if self._parking is None:
            return None
        held = [s for s in self._slots if s.job is None and s.cells() and not s.unparkable]
        return min(held, key=lambda s: s.last_used) if len(held) >= 2 else None

    def _park_idle(self, besides: _Slot) -> None:
        """Every idle slot's cells but ``besides``' out of the cache into host memory (backend/parking.py):
        the running sequences then attend over their own cells alone."""
        if self._parking is None:
            return
        for slot in self._slots:
            if slot.job is not None or slot is besides or slot.parked or not slot.cached:
                continue
            self._park(slot)

    def _park(self, slot: _Slot) -> None:
        """``slot``'s cells out of the cache into host memory, where they can be held."""
        assert self._parking is not None
        dropped = self._parking.park(slot.seq_id, slot.cached)
        if dropped is None:
            slot.unparkable = True  # (kept in the cache: evicted there if room is wanted)
            return
        ll.llama_memory_seq_rm(self.mem, slot.seq_id, -1, -1)
        slot.parked = True
        self.stats.parked += 1
        for seq_id in dropped:
            gone = self._slots[seq_id]
            gone.cached, gone.reusable, gone.parked = [], 0, False

    def _unpark(self, slot: _Slot) -> bool:
        """``slot``'s parked cells back in the cache; whether they fit (else it holds none)."""
        assert self._parking is not None
        slot.parked = False
        if self._parking.restore(slot.seq_id):
            return True
        ll.llama_memory_seq_rm(self.mem, slot.seq_id, -1, -1)
        slot.cached, slot.reusable = [], 0
        return False

    def _pause(self, slot: _Slot) -> None:
        """Free ``slot``'s cells; it keeps its job and state, and computes its tokens again on resuming:
        a sequence still reading its prompt reads it anew, a decoding one its tokens so far, then goes
        on with the next token it had sampled (its sampler untouched, so a grammar goes on too)."""
        job = slot.job
        assert job is not None
        if slot.next_token is None:
            slot.feed, slot.prompt_logprobs = job.prompt, []
        elif slot.prefilled >= len(slot.feed):  # (else paused again while resuming: the same tokens)
            slot.feed = slot.cached
        ll.llama_memory_seq_rm(self.mem, slot.seq_id, -1, -1)
        slot.cached = []
        slot.prefilled = 0
        slot.reusable = 0
        slot.paused = True
        self.stats.pauses += 1

    def _slot_for(self, job: Job, free: list[_Slot]) -> _Slot:
        """The free slot whose cache shares the longest prefix with the prompt (the least recently used
        among equals), unless it would split the running ids into two runs: then the best slot next to
        them, where it saves less than ``_MOVE_GAIN`` tokens."""

        def key(slot: _Slot) -> tuple[int, int]:
            shared = _common_prefix(self._reusable(slot), job.prompt) if job.cache_prompt else 0
            return shared, -slot.last_used

        best = max(free, key=key)
        busy = {s.seq_id for s in self._slots if s.job is not None}
        if not self._packs or not busy:
            return best
        beside = [s for s in free if s.seq_id - 1 in busy or s.seq_id + 1 in busy]
        if not beside or best in beside:
            return best
        near = max(beside, key=key)
        return best if key(best)[0] - key(near)[0] >= _MOVE_GAIN else near

    def _pack(self) -> None:
        """Where the running ids make more than one run, move the fewest sequences into one window of
        consecutive ids: among the windows that hold the most of them already, the one whose free slots'
        caches (overwritten by the moves) were used least recently."""
        if not self._packs:
            return
        busy = [s for s in self._slots if s.job is not None]
        if not busy or busy[-1].seq_id - busy[0].seq_id + 1 == len(busy):
            return  # one run (or none): one ubatch already

        def cost(start: int) -> tuple[int, int]:
            window = self._slots[start : start + len(busy)]
            overwritten = [s.last_used for s in window if s.job is None and s.cached]
            return -sum(s.job is not None for s in window), max(overwritten, default=-1)

        start = min(range(len(self._slots) - len(busy) + 1), key=cost)
        window = self._slots[start : start + len(busy)]
        gaps = [s for s in window if s.job is None]
        outside = [s for s in busy if s not in window]
        for gap, slot in zip(gaps, outside, strict=True):
            ll.llama_memory_seq_cp(self.mem, slot.seq_id, gap.seq_id, -1, -1)
            gap.take_over(slot)
            self.stats.packing_moves += 1

    def _assign(self, slot: _Slot, job: Job) -> None:
        self._park_idle(besides=slot)
        slot.unparkable = False
        keep = 0
        if job.cache_prompt and not job.prompt_logprobs:
            # At least one prompt token must be decoded again: its logits give the first sampled token.
            keep = min(_common_prefix(self._reusable(slot), job.prompt), len(job.prompt) - 1)
            keep -= keep % self._grid
        if slot.parked and not (keep and self._unpark(slot)):  # (nothing to reuse: not copied back)
            self._forget(slot)
            keep = 0
        if not ll.llama_memory_seq_rm(self.mem, slot.seq_id, keep, -1):
            ll.llama_memory_seq_rm(self.mem, slot.seq_id, -1, -1)
            keep = 0
        self.stats.reused_prompt_tokens += keep
        slot.cached = job.prompt[:keep]
        slot.feed = job.prompt
        slot.prefilled = keep
        slot.reusable = keep
        slot.job = job
        slot.paused = False
        self._admissions += 1
        slot.admitted = self._admissions
        slot.next_token = None
        slot.generated = 0
        slot.text = _Text(job.stop)
        slot.prompt_logprobs = []
        slot.last_used = self.stats.steps

    def _reusable(self, slot: _Slot) -> list[int]:
        """The cached tokens a new prompt may skip: all of them, or under batch invariance only those a
        prefill computed on the 4-row grid."""
        return slot.cached[: slot.reusable] if self.batch_invariant else slot.cached

    def _release_cancelled(self) -> None:
        for slot in self._slots:
            job = slot.job
            if job is not None and job.cancelled:
                self.stats.cancel_latency_steps.append(self.stats.steps - job.cancel_step)
                self._release(slot)

    def _release(self, slot: _Slot) -> None:
        if slot.job is not None:
            slot.job.sampler.close()
        slot.job = None
        slot.next_token = None
        slot.paused = False
        slot.last_used = self.stats.steps

    def _step(self) -> None:
        running = [s for s in self._slots if s.job is not None and not s.paused]
        prefilling = [s for s in running if s.prefilled < len(s.feed)]
        decoding = [s for s in running if s.next_token is not None and s not in prefilling]
        self._prefill_turn = bool(prefilling) and (not decoding or not self._prefill_turn)
        if not decoding and not prefilling:
            return
        self.stats.steps += 1
        if self._prefill_turn:
            self._prefill(prefilling)
        else:
            self._generate(decoding)

    def _generate(self, decoding: list[_Slot]) -> None:
        """One token of each decoding slot, ``_rows_per_call`` rows a call."""
        for start in range(0, len(decoding), self._rows_per_call):
            rows: list[_Row] = []
            for slot in decoding[start : start + self._rows_per_call]:
                assert slot.next_token is not None
                rows.append((slot, slot.next_token, "gen"))
                slot.next_token = None
            self._decode(rows)

    def _prefill(self, prefilling: list[_Slot]) -> None:
        """The next chunk of each prompt still to prefill, least recently used slot first, within one
        batch of ``n_batch`` tokens."""
        budget = self.n_batch
        for slot in sorted(prefilling, key=lambda s: s.last_used):
            job = slot.job
            assert job is not None
            remaining = len(slot.feed) - slot.prefilled
            chunk = min(remaining, budget)
            if chunk < remaining:  # only a prompt's last chunk may end off the 4-row grid
                aligned = chunk - chunk % self._grid
                if aligned == 0 and budget < self.n_batch:
                    break  # the rest waits for the next prefill turn
                chunk = aligned or chunk
            budget -= chunk
            rows: list[_Row] = []
            reading = slot.next_token is None  # its prompt (else tokens it had before a pause)
            for i in range(slot.prefilled, slot.prefilled + chunk):
                last = reading and i == len(slot.feed) - 1
                kind = "last" if last else "prompt" if reading and job.prompt_logprobs else "cache"
                rows.append((slot, slot.feed[i], kind))
            slot.prefilled += chunk
            if slot.prefilled == len(slot.feed):
                slot.reusable = slot.prefilled - slot.prefilled % self._grid
            self._decode(rows)

    def _decode(self, rows: list[_Row]) -> None:
        """One llama_decode call over ``rows``, then what each row's logits are for."""
        batch = self._batch
        for n, (slot, token, kind) in enumerate(rows):
            batch.token[n] = token
            batch.pos[n] = len(slot.cached)
            batch.n_seq_id[n] = 1
            batch.seq_id[n][0] = slot.seq_id
            batch.logits[n] = kind != "cache"
            slot.cached.append(token)
        batch.n_tokens = len(rows)
        rc = ll.llama_decode(self.ctx, batch)
        if rc != 0:
            for slot in {id(slot): slot for slot, _, _ in rows}.values():
                ll.llama_memory_seq_rm(self.mem, slot.seq_id, -1, -1)
                slot.cached = []
                slot.reusable = 0
                self._finish(slot, error=f"llama_decode failed with status {rc}")
            return
        for n, (slot, _, kind) in enumerate(rows):
            job = slot.job
            if job is None or kind == "cache":
                continue
            if kind == "prompt":
                following = job.prompt[int(batch.pos[n]) + 1]
                slot.prompt_logprobs.append(self._logprob(n, following, job.logprobs or 0))
                continue
            if kind == "last" and job.prompt_logprobs:
                self._emit(job, Event(job.index, prompt_logprobs=slot.prompt_logprobs))
                slot.prompt_logprobs = []
            if job.max_tokens == 0:  # the prompt only (echo scoring): nothing is sampled
                self._finish(slot, "length")
                continue
            self._sample(slot, n)
        self._hand_over()  # before the next llama_decode, which the loop's work on them then overlaps

    def _sample(self, slot: _Slot, row: int) -> None:
        job = slot.job
        assert job is not None
        token = job.sampler.sample(self.ctx, row)
        info = self._logprob(row, token, job.logprobs) if job.logprobs is not None else None
        if self.vocab.is_eog(token) and not job.ignore_eos:
            # The end-of-turn token is not counted, as llama-cpp-python does not: usage then counts what
            # the client received, and a model that ends its turn on the last token the limit allows is
            # not read as an answer cut and called complete (finish-stop-at-limit).
            self._finish(slot, "stop")
            return
        slot.generated += 1
        text, infos, stopped = slot.text.add(self.vocab.piece(token), info)
        if text or infos:  # (the count so far: a thinking model's reasoning tokens are counted by it)
            self._emit(job, Event(job.index, text=text, logprobs=infos, completion_tokens=slot.generated))
        if stopped is not None:
            self._finish(slot, "stop", flush=False, stop_sequence=stopped)
        elif (job.max_tokens is not None and slot.generated >= job.max_tokens) or len(
            slot.cached
        ) + 1 >= self.n_ctx_seq:
            self._finish(slot, "length")
        else:
            slot.next_token = token

    def _finish(
        self,
        slot: _Slot,
        reason: str | None = None,
        *,
        flush: bool = True,
        error: str | None = None,
        stop_sequence: str | None = None,
    ) -> None:
        job = slot.job
        if job is None:
            return
        if flush and error is None:
            text, infos = slot.text.flush()
            if text or infos:
                self._emit(job, Event(job.index, text=text, logprobs=infos, completion_tokens=slot.generated))
        self._emit(
            job,
            Event(
                job.index,
                finish_reason=reason,
                stop_sequence=stop_sequence,
                completion_tokens=slot.generated,
                error=error,
            ),
        )
        self._release(slot)

    def _logprob(self, row: int, token: int, top: int) -> TokenLogprob:
        logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, row), shape=(self.vocab.n_tokens,))
        peak = float(logits.max())
        norm = peak + float(np.log(np.exp(logits - peak).sum()))
        alternatives: list[tuple[str, bytes, float]] = []
        if top > 0:
            best = np.argpartition(-logits, top)[:top]
            for t in sorted(best.tolist(), key=lambda t: -float(logits[t])):
                piece = self.vocab.piece(t)
                alternatives.append((piece.decode("utf-8", "replace"), piece, float(logits[t]) - norm))
        piece = self.vocab.piece(token)
        return TokenLogprob(
            piece.decode("utf-8", "replace"), piece, float(logits[token]) - norm, alternatives
        )


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
