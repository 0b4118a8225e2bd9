"""One KV cache for all slots (issue 37): a prompt longer than a slot's share is served while short streams
decode; a sequence that does not fit beside the running ones waits, one that the others' growth leaves
without cells pauses and goes on, and neither is cut; a prompt past the whole context is refused.

On a synthetic model (backend/synthetic.py), which decodes in milliseconds: what is tested is where the
cells go, not what the model writes.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import llama_cpp as ll
import pytest

from backend.app import create_app
from backend.context import ContextOptions
from backend.engine import Event, Job
from backend.requests import SamplingParams
from backend.sampling import Sampler
from backend.service import Backend
from backend.synthetic import SyntheticSpec, write_synthetic
from conformance.protocols.responses.store import ResponseStore
from tests.support.servers import run_asgi

CONTEXT = 4096
SLOTS = 4


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic(tmp_path_factory.mktemp("models") / "dense.gguf", SyntheticSpec(n_ctx_train=8192))


def _open(path: Path, ctx_size: int) -> Backend:
    return Backend.open(str(path), context=ContextOptions(ctx_size=ctx_size, parallel=SLOTS, threads=2))


@pytest.fixture(scope="module")
def served(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Backend]]:
    backend = _open(model_path, CONTEXT)
    store = ResponseStore(tmp_path_factory.mktemp("responses") / "r.sqlite3", max_bytes=1 << 20, max_age=60.0)
    with run_asgi(create_app(backend, store=store)) as url:
        yield url, backend
    backend.close()


@pytest.fixture
def small(model_path: Path) -> Iterator[Backend]:
    """512 cells for 4 slots: two sequences of a few hundred tokens fill it."""
    backend = _open(model_path, 512)
    yield backend
    backend.close()


def _prompt(backend: Backend, tokens: int, word: str = " lighthouse") -> list[int]:
    """``tokens`` tokens: ``word`` again and again (another word: no prefix to reuse, not even a BOS)."""
    return (backend.vocab.tokenize(word, add_special=False) * tokens)[:tokens]


def _read_to_first_event(
    stack: contextlib.ExitStack, http: httpx.Client, url: str, body: Any
) -> Iterator[str]:
    lines = stack.enter_context(http.stream("POST", url + "/v1/completions", json=body)).iter_lines()
    assert next(line for line in lines if line.startswith("data:"))
    return lines


def _usage(lines: Iterator[str]) -> Any:
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")][-1]["usage"]


def test_a_prompt_longer_than_a_slots_share_is_served_while_short_streams_decode(
    served: tuple[str, Backend],
) -> None:
    url, backend = served
    assert (backend.engine.n_cells, backend.engine.n_ctx_seq, backend.engine.unified) == (
        CONTEXT,
        CONTEXT,
        True,
    )
    long = _prompt(backend, 1500)  # a stream per slot would hold 1,024 tokens
    short = {"prompt": "Count:", "max_tokens": 200, "ignore_eos": True, "stream": True}
    short |= {"stream_options": {"include_usage": True}}
    pauses = backend.engine.stats.pauses
    with httpx.Client(timeout=120) as http, contextlib.ExitStack() as stack:
        streams = [_read_to_first_event(stack, http, url, short) for _ in range(3)]
        answer = http.post(url + "/v1/completions", json={"prompt": long, "max_tokens": 4})
        running = backend.engine.health()["slots_processing"]
        usages = [_usage(lines) for lines in streams]
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 1500, "completion_tokens": 4, "total_tokens": 1504}
    assert running == 3  # the short streams, 200 tokens each, still decoding when it was done
    assert [u["completion_tokens"] for u in usages] == [200, 200, 200]
    assert backend.engine.stats.pauses == pauses  # (they all fit together: no one waited)


@pytest.mark.parametrize(
    ("prompt", "max_tokens"),
    [(CONTEXT, 4), (CONTEXT + 100, None), (3000, 2000)],
    ids=["equal", "over", "room"],
)
def test_a_prompt_that_can_never_fit_the_context_is_refused(
    served: tuple[str, Backend], prompt: int, max_tokens: int | None
) -> None:
    url, backend = served
    body: dict[str, Any] = {"prompt": _prompt(backend, prompt)}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    refused = httpx.post(url + "/v1/completions", json=body, timeout=60)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert f"maximum context length is {CONTEXT} tokens" in error["message"]


class _Record:
    """Each job's events in the order the engine made them, over all jobs."""

    def __init__(self, n: int) -> None:
        self.order: list[tuple[int, Event]] = []
        self.done = threading.Semaphore(0)
        self.n = n

    def emit(self, event: Event) -> None:  # (on the engine's thread)
        self.order.append((event.index, event))
        if event.finish_reason is not None or event.error is not None:
            self.done.release()

    def wait(self) -> dict[int, Event]:
        for _ in range(self.n):
            assert self.done.acquire(timeout=300)
        finishes = {i: e for i, e in self.order if e.finish_reason is not None or e.error is not None}
        assert all(e.error is None for e in finishes.values()), finishes
        return finishes

    def first_text(self, index: int) -> int:
        return next(n for n, (i, e) in enumerate(self.order) if i == index and e.text)

    def finish(self, index: int) -> int:
        return next(n for n, (i, e) in enumerate(self.order) if i == index and e.finish_reason is not None)


def _submit(backend: Backend, prompts: list[list[int]], max_tokens: list[int]) -> tuple[_Record, list[Job]]:
    record = _Record(len(prompts))
    jobs = [
        Job(
            index=i,
            prompt=prompt,
            sampler=Sampler(backend.vocab.ptr, SamplingParams(temperature=0), eog_tokens=[]),
            emit=record.emit,
            max_tokens=limit,
            ignore_eos=True,
        )
        for i, (prompt, limit) in enumerate(zip(prompts, max_tokens, strict=True))
    ]
    backend.engine.submit(jobs)
    return record, jobs


def _wait_for_parked(engine: Any, count: int) -> None:
    """Until the idle engine has parked ``count`` slots in all and has none more to park."""
    deadline = time.monotonic() + 10
    while engine.stats.parked < count or engine._next_to_park() is not None:
        assert time.monotonic() < deadline, (engine.stats.parked, count)
        time.sleep(0.005)
    time.sleep(0.05)  # (the last park's own bookkeeping)
    assert engine.stats.parked == count


def _assert_cache_matches_the_slots(backend: Backend) -> None:
    """Every slot's KV cells are the tokens it says it holds, at positions 0..n-1: nothing lost or left."""
    engine = backend.engine
    for slot in engine._slots:
        assert ll.llama_memory_seq_pos_max(engine.mem, slot.seq_id) == slot.cells() - 1, slot.seq_id


def test_a_prompt_that_does_not_fit_beside_the_running_ones_waits_for_their_cells(small: Backend) -> None:
    engine = small.engine
    prompts = [_prompt(small, 300), _prompt(small, 300, " harbour")]
    record, _ = _submit(small, prompts, [50, 8])
    finishes = record.wait()
    assert [finishes[i].completion_tokens for i in (0, 1)] == [50, 8]
    assert {e.finish_reason for e in finishes.values()} == {"length"}
    # The second began once the first was done and its cache evicted; nothing paused.
    assert record.finish(0) < record.first_text(1)
    assert engine.stats.waits_for_cells >= 1
    assert engine.stats.evictions >= 1
    assert engine.stats.pauses == 0
    _assert_cache_matches_the_slots(small)


def test_sequences_that_outgrow_the_cache_pause_the_youngest_and_both_finish_whole(small: Backend) -> None:
    engine = small.engine
    prompts = [_prompt(small, 50), _prompt(small, 60, " harbour")]
    record, _ = _submit(small, prompts, [300, 300])  # 710 tokens in 512 cells
    finishes = record.wait()
    assert [finishes[i].completion_tokens for i in (0, 1)] == [300, 300]
    assert {e.finish_reason for e in finishes.values()} == {"length"}
    assert engine.stats.pauses >= 1
    assert record.finish(0) < record.finish(1)  # the oldest went on; the paused one finished after it
    assert all("".join(e.text for i, e in record.order if i == index) for index in (0, 1))
    _assert_cache_matches_the_slots(small)


def test_a_cancelled_paused_sequence_frees_its_slot(small: Backend) -> None:
    engine = small.engine
    record, jobs = _submit(small, [_prompt(small, 50), _prompt(small, 60, " harbour")], [420, 420])
    deadline = time.monotonic() + 120
    while not engine.stats.pauses:  # the second pauses once both outgrow the 512 cells
        assert time.monotonic() < deadline
        time.sleep(0.01)
    engine.cancel([jobs[1]])
    assert record.done.acquire(timeout=300)  # the first's finish; the cancelled one sends no more
    assert [i for i, e in record.order if e.finish_reason is not None] == [0]
    health = engine.health()
    assert (health["slots_processing"], health["queued"]) == (0, 0)
    _assert_cache_matches_the_slots(small)


def _text(record: _Record, index: int) -> str:
    return "".join(e.text for i, e in record.order if i == index)


def test_idle_slots_leave_the_cache_for_host_memory_and_come_back_for_their_prefix(small: Backend) -> None:
    """Every decode step attends over all cells up to the highest in use: idle slots' caches kept in a
    unified cache made one stream 0.73x llama-server's after a burst of 16 (bench/RESULTS.md, issue 37,
    run O). Admitting a sequence now parks every other idle slot's cells in host memory
    (backend/parking.py); a later prompt that shares a slot's prefix gets the cells back, and the same
    greedy text as from a fresh cache."""
    engine = small.engine
    prompts = [_prompt(small, 40), _prompt(small, 40, " harbour"), _prompt(small, 40, " meadow")]
    first, _ = _submit(small, prompts, [12, 12, 12])
    first.wait()
    texts = [_text(first, i) for i in range(3)]
    assert all(texts)
    idle = [s for s in engine._slots if s.cached]
    assert len(idle) == 3
    _wait_for_parked(engine, 2)  # (while idle: all but the slot used last)
    other, _ = _submit(small, [_prompt(small, 30, " orchard")], [4])
    other.wait()
    assert engine.stats.parked >= 3  # (each admission parks the others: the three before it)
    parked = [s for s in engine._slots if s.parked]
    assert {s.seq_id for s in parked} >= {s.seq_id for s in idle}
    assert all(s.cached for s in parked)  # (what they hold is known; their cells are elsewhere)
    _assert_cache_matches_the_slots(small)
    reused = engine.stats.reused_prompt_tokens
    again, _ = _submit(small, [prompts[1]], [12])
    again.wait()
    assert engine.stats.reused_prompt_tokens - reused == len(prompts[1]) - 1
    assert _text(again, 0) == texts[1]
    _assert_cache_matches_the_slots(small)


def test_a_slot_parked_again_with_the_same_tokens_is_not_copied_again(small: Backend) -> None:
    """A state copied back is kept (as llama-server's prompt cache keeps what it loads): the same request
    asked again, greedy, leaves its slot holding the same tokens, and parking it then copies nothing (a
    burst's interleaved cells took about 9 ms a slot to copy, bench/RESULTS.md 2026-12-01); the text
    after a restore from the kept copy is still the slot's own."""
    engine = small.engine
    assert engine._parking is not None
    prompts = [_prompt(small, 40), _prompt(small, 40, " harbour")]
    first, _ = _submit(small, prompts, [12, 12])
    first.wait()
    texts = [_text(first, i) for i in range(2)]
    for _ in range(2):
        other, _ = _submit(small, [_prompt(small, 30, " orchard")], [4])  # parks both
        other.wait()
        again, _ = _submit(small, [prompts[1]], [12])  # restores one, answers the same
        again.wait()
        assert _text(again, 0) == texts[1]
    copies = engine._parking.copies
    assert copies >= 2  # (the first parking of each slot was a copy)
    other, _ = _submit(small, [_prompt(small, 30, " orchard")], [4])  # parks it again: the same tokens
    other.wait()
    assert engine._parking.copies == copies
    final, _ = _submit(small, [prompts[1]], [12])
    final.wait()
    assert _text(final, 0) == texts[1]
    _assert_cache_matches_the_slots(small)


def test_parked_states_past_their_budget_are_dropped_oldest_first(model_path: Path) -> None:
    """The host memory parked states take is bounded: past it, the state parked first is let go, and its
    slot reuses nothing (a prompt for it is computed anew, with the same text)."""
    backend = _open(model_path, 512)
    try:
        engine = backend.engine
        assert engine._parking is not None
        prompts = [_prompt(backend, 40), _prompt(backend, 40, " harbour")]
        first, _ = _submit(backend, prompts, [8, 8])
        first.wait()
        owner = {
            s.seq_id: next(i for i, p in enumerate(prompts) if s.cached[: len(p)] == p)
            for s in engine._slots
            if s.cached
        }
        _wait_for_parked(engine, 1)  # (while idle: the slot used first; the other kept in the cache)
        size = engine._parking.bytes  # (the two hold as many tokens)
        engine._parking._budget = size + size // 2  # room for one of the two
        other, _ = _submit(backend, [_prompt(backend, 20, " orchard")], [2])
        other.wait()
        assert len([s for s in engine._slots if s.parked]) == 1
        assert engine._parking.bytes <= size + size // 2
        (dropped,) = [s for s in engine._slots if s.seq_id in owner and not s.parked]
        assert dropped.cached == []
        index = owner[dropped.seq_id]
        reused = engine.stats.reused_prompt_tokens
        again, _ = _submit(backend, [prompts[index]], [8])
        again.wait()
        assert engine.stats.reused_prompt_tokens == reused  # (computed anew)
        assert _text(again, 0) == _text(first, index)
        _assert_cache_matches_the_slots(backend)
    finally:
        backend.close()


def test_idle_slots_are_parked_while_the_engine_idles_and_not_on_the_next_admission(small: Backend) -> None:
    """After a burst, admitting the next request parked every other idle slot first: 69-220 ms before its
    first token, a one-stream request after a 16-stream burst ran at 0.91-0.94x llama-server's
    (bench/RESULTS.md, issue 37). The idle engine now parks them itself, all but the slot used last (an
    agent's next turn continues it), and the next admission parks at most that one."""
    engine = small.engine
    prompts = [_prompt(small, 30, word) for word in (" lighthouse", " harbour", " meadow", " orchard")]
    burst, _ = _submit(small, prompts, [6, 6, 6, 6])
    burst.wait()
    _wait_for_parked(engine, 3)
    kept = [s for s in engine._slots if s.cached and not s.parked]
    assert len(kept) == 1
    assert kept[0].last_used == max(s.last_used for s in engine._slots)
    _assert_cache_matches_the_slots(small)
    again, _ = _submit(small, [prompts[0]], [6])  # parked: copied back for its prefix
    again.wait()
    assert engine.stats.parked <= 4  # (the kept slot, at most, parked on admission)
    assert _text(again, 0) == _text(burst, 0)
    _wait_for_parked(engine, engine.stats.parked)
    _assert_cache_matches_the_slots(small)
