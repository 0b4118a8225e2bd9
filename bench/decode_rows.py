"""What a decode step costs by where its rows sit: ``llama_decode`` alone, one context of 16 sequences,
the same 4, 8 or 16 rows on different sequence ids, with a KV stream per sequence (the backend's
``--no-kv-unified`` and ``--batch-invariant``, llama-server's default with ``-np N``) and with one unified
KV cache (the backend's default, llama-server's ``--kv-unified``).

    python bench/decode_rows.py [--model PATH] [--threads 2] [--steps 40]

With a stream per sequence, llama.cpp cuts a batch into one ubatch per run of consecutive, increasing
sequence ids and runs the whole graph once per ubatch, so rows on scattered ids cost as many graph runs
as there are runs of ids. This is why the backend, with a stream per slot, keeps its running sequences
on the lowest ids with no gap (backend/engine.py, ``_pack``); one unified cache is cut by size alone
(``split_simple``), whatever the ids. The ratio printed is against the same number of rows on ids 0..n-1.
Also printed: what moving a sequence to another stream costs (``llama_memory_seq_cp`` across streams,
applied at the next decode), the price of closing a gap.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import llama_cpp as ll
from backend_throughput import add_model_arguments, model_path  # (bench/, the script's own folder)

LAYOUTS: list[list[int]] = [
    [0, 1, 2, 3],
    [0, 2, 4, 6],
    [3, 2, 1, 0],
    [8, 9, 10, 11],
    list(range(8)),
    [0, 1, 2, 3, 8, 9, 10, 11],
    list(range(16)),
]
PROMPT = 100
"""Tokens already in each sequence's cache when the steps are timed."""
CTX_PER_SEQUENCE = 1024


class Decoder:
    def __init__(self, model: Any, threads: int, *, unified: bool) -> None:
        params = ll.llama_context_default_params()
        params.n_ctx = CTX_PER_SEQUENCE * 16
        params.n_batch = params.n_ubatch = 512
        params.n_seq_max = 16
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = unified
        params.swa_full = True  # as the backend runs
        params.flash_attn_type = 0
        self.ctx = ll.llama_init_from_model(model, params)
        self.mem = ll.llama_get_memory(self.ctx)
        self.batch = ll.llama_batch_init(512, 0, 1)

    def decode(self, rows: list[tuple[int, int, int]], *, logits: bool = True) -> None:
        """(sequence, token, position) rows; only the last row's logits unless ``logits``."""
        for n, (seq, token, pos) in enumerate(rows):
            self.batch.token[n], self.batch.pos[n] = token, pos
            self.batch.n_seq_id[n], self.batch.seq_id[n][0] = 1, seq
            self.batch.logits[n] = logits or n == len(rows) - 1
        self.batch.n_tokens = len(rows)
        if ll.llama_decode(self.ctx, self.batch) != 0:
            raise SystemExit("llama_decode failed")

    def step_ms(self, seqs: list[int], steps: int) -> float:
        for seq in range(16):
            ll.llama_memory_seq_rm(self.mem, seq, -1, -1)
        for seq in seqs:
            self.decode([(seq, 100 + i, i) for i in range(PROMPT)], logits=False)
        start = time.perf_counter()
        for k in range(steps):
            self.decode([(seq, 200 + k, PROMPT + k) for seq in seqs])
        return 1000 * (time.perf_counter() - start) / steps

    def move_ms(self, repeats: int = 5) -> float:
        """A cross-stream copy's cost: one-row decodes with and without a copy pending before them."""
        for seq in range(16):
            ll.llama_memory_seq_rm(self.mem, seq, -1, -1)
        self.decode([(0, 100 + i, i) for i in range(PROMPT)], logits=False)
        plain, moved = [], []
        for r in range(repeats):
            start = time.perf_counter()
            self.decode([(0, 5, PROMPT + 2 * r)])
            plain.append(time.perf_counter() - start)
            ll.llama_memory_seq_cp(self.mem, 0, 5, -1, -1)
            start = time.perf_counter()
            self.decode([(0, 5, PROMPT + 2 * r + 1)])
            moved.append(time.perf_counter() - start)
        return 1000 * (sorted(moved)[repeats // 2] - sorted(plain)[repeats // 2])

    def close(self) -> None:
        ll.llama_batch_free(self.batch)
        ll.llama_free(self.ctx)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    parser.add_argument("--steps", type=int, default=40, help="decode steps timed per layout")
    a = parser.parse_args()
    a.model = model_path(a.model)
    ll.llama_backend_init()
    quiet = ll.llama_log_callback(lambda level, text, data: None)  # kept: llama.cpp holds the pointer
    ll.llama_log_set(quiet, None)
    model = ll.llama_model_load_from_file(a.model.encode(), ll.llama_model_default_params())
    if not model:
        raise SystemExit(f"cannot load {a.model}")
    print(f"{a.model}, {a.threads} threads, 16 sequences of {CTX_PER_SEQUENCE} cells, {a.steps} steps")
    for unified in (False, True):
        decoder = Decoder(model, a.threads, unified=unified)
        kind = "unified KV" if unified else "a KV stream per sequence"
        packed: dict[int, float] = {}
        for seqs in LAYOUTS:
            ms = decoder.step_ms(seqs, a.steps)
            packed.setdefault(len(seqs), ms)  # the first layout of each size is ids 0..n-1
            shown = ",".join(map(str, seqs)) if len(seqs) <= 8 else f"0-{len(seqs) - 1}"
            print(f"{kind:26} ids {shown:22} {ms:7.1f} ms a step  {ms / packed[len(seqs)]:5.2f}x")
        if not unified:
            print(f"{kind:26} moving a sequence to another stream: {decoder.move_ms():.1f} ms")
        decoder.close()
    ll.llama_model_free(model)


if __name__ == "__main__":
    main()
