"""One llama.cpp sampler chain per sequence, built from :class:`SamplingParams`.

The chain order follows llama.cpp's common sampler (bias, penalties, truncation, temperature, draw);
the grammar goes first so every later stage only sees tokens the grammar allows.
"""

from __future__ import annotations

import random
from typing import Any

import llama_cpp as ll

from backend.requests import RequestError, SamplingParams

__all__ = ["Sampler"]

_MIROSTAT_M = 100  # llama.cpp's fixed candidate count for mirostat v1


class Sampler:
    """Owns a ``llama_sampler`` chain; ``close()`` frees it (the engine calls it when the sequence ends)."""

    def __init__(self, vocab: Any, params: SamplingParams, *, eog_tokens: list[int], seed_offset: int = 0):
        n_vocab = int(ll.llama_vocab_n_tokens(vocab))
        self.chain: Any = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        self.greedy = params.temperature <= 0.0 and params.mirostat == 0
        seed = (params.seed + seed_offset) & 0xFFFFFFFF if params.seed is not None else random.getrandbits(32)
        try:
            if params.grammar is not None:
                grammar = ll.llama_sampler_init_grammar(vocab, params.grammar.encode(), b"root")
                if not grammar:
                    raise RequestError("'grammar' could not be parsed as GBNF with a 'root' rule", "grammar")
                self._add(grammar)
            self._add_bias(n_vocab, params, eog_tokens)
            if params.repeat_penalty != 1.0 or params.presence_penalty or params.frequency_penalty:
                self._add(
                    ll.llama_sampler_init_penalties(
                        n_vocab,
                        params.repeat_last_n,
                        params.repeat_penalty,
                        params.frequency_penalty,
                        params.presence_penalty,
                    )
                )
            self._add_draw(n_vocab, params, seed)
        except BaseException:
            self.close()
            raise

    def _add(self, sampler: Any) -> None:
        ll.llama_sampler_chain_add(self.chain, sampler)

    def _add_bias(self, n_vocab: int, params: SamplingParams, eog_tokens: list[int]) -> None:
        bias = {t: b for t, b in params.logit_bias.items() if 0 <= t < n_vocab}
        if params.ignore_eos:
            bias.update(dict.fromkeys(eog_tokens, float("-inf")))
        if not bias:
            return
        array = (ll.llama_logit_bias * len(bias))(*(ll.llama_logit_bias(t, b) for t, b in bias.items()))
        self._add(ll.llama_sampler_init_logit_bias(n_vocab, len(bias), array))

    def _add_draw(self, n_vocab: int, params: SamplingParams, seed: int) -> None:
        if params.mirostat == 1:
            self._add(ll.llama_sampler_init_temp(params.temperature))
            self._add(
                ll.llama_sampler_init_mirostat(
                    n_vocab, seed, params.mirostat_tau, params.mirostat_eta, _MIROSTAT_M
                )
            )
        elif params.mirostat == 2:
            self._add(ll.llama_sampler_init_temp(params.temperature))
            self._add(ll.llama_sampler_init_mirostat_v2(seed, params.mirostat_tau, params.mirostat_eta))
        elif self.greedy:
            self._add(ll.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                self._add(ll.llama_sampler_init_top_k(params.top_k))
            if params.top_p < 1.0:
                self._add(ll.llama_sampler_init_top_p(params.top_p, 1))
            if params.min_p > 0.0:
                self._add(ll.llama_sampler_init_min_p(params.min_p, 1))
            self._add(ll.llama_sampler_init_temp(params.temperature))
            self._add(ll.llama_sampler_init_dist(seed))

    def sample(self, ctx: Any, index: int) -> int:
        """Draw (and accept) a token from the logits of batch row ``index``."""
        return int(ll.llama_sampler_sample(self.chain, ctx, index))

    def close(self) -> None:
        if self.chain is not None:
            ll.llama_sampler_free(self.chain)
            self.chain = None
