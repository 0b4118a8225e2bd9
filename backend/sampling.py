"""One llama.cpp sampler chain per sequence, built from :class:`SamplingParams`.

The chain order follows llama.cpp's common sampler (bias, penalties, truncation, temperature, draw).
A grammar is kept beside the chain, not in it, and applied as llama.cpp's common sampler does: the
chain draws from the whole vocabulary, the grammar checks only the drawn token, and only when it refuses
that token is the grammar applied to every candidate and the draw made again. Applying a grammar to all
of Gemma 3's 262,144 tokens at every step would cost more than the forward pass of a 270M model; the
check of one token costs next to nothing (bench/grammar_cost.py measures both ways).
"""

from __future__ import annotations

import ctypes
import random
from typing import Any

import llama_cpp as ll
import numpy as np

from backend.requests import RequestError, SamplingParams

__all__ = ["Sampler"]

_MIROSTAT_M = 100  # llama.cpp's fixed candidate count for mirostat v1


class Sampler:
    """Owns a ``llama_sampler`` chain; ``close()`` frees it (the engine calls it when the sequence ends)."""

    def __init__(self, vocab: Any, params: SamplingParams, *, eog_tokens: list[int], seed_offset: int = 0):
        n_vocab = int(ll.llama_vocab_n_tokens(vocab))
        self.chain: Any = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        self.grammar: Any = None
        self.n_vocab = n_vocab
        self.greedy = params.temperature <= 0.0 and params.mirostat == 0
        seed = (params.seed + seed_offset) & 0xFFFFFFFF if params.seed is not None else random.getrandbits(32)
        try:
            if params.grammar is not None:
                self.grammar = _grammar_sampler(vocab, params.grammar, params.grammar_triggers)
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
        if self.grammar is None:
            return int(ll.llama_sampler_sample(self.chain, ctx, index))
        logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx, index), shape=(self.n_vocab,))
        token = self._draw(logits, constrained=False)
        one = (ll.llama_token_data * 1)(ll.llama_token_data(token, 0.0, 0.0))
        ll.llama_sampler_apply(self.grammar, ctypes.byref(ll.llama_token_data_array(one, 1, -1, False)))
        if one[0].logit == float("-inf"):
            token = self._draw(logits, constrained=True)
        ll.llama_sampler_accept(self.grammar, token)
        ll.llama_sampler_accept(self.chain, token)
        return token

    def _draw(self, logits: Any, *, constrained: bool) -> int:
        """The chain's pick over every token (after the grammar when ``constrained``), not accepted yet."""
        data = np.empty(self.n_vocab, dtype=_TOKEN_DATA)
        data["id"] = np.arange(self.n_vocab, dtype=np.int32)
        data["logit"] = logits
        data["p"] = 0.0
        array = ll.llama_token_data_array(
            data.ctypes.data_as(ctypes.POINTER(ll.llama_token_data)), self.n_vocab, -1, False
        )
        if constrained:
            ll.llama_sampler_apply(self.grammar, ctypes.byref(array))
        ll.llama_sampler_apply(self.chain, ctypes.byref(array))
        if array.selected < 0:
            raise RuntimeError("the sampler chain selected no token")
        return int(array.data[array.selected].id)  # a stage may have reordered the candidates

    def close(self) -> None:
        if self.chain is not None:
            ll.llama_sampler_free(self.chain)
            self.chain = None
        if self.grammar is not None:
            ll.llama_sampler_free(self.grammar)
            self.grammar = None


_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


def _grammar_sampler(vocab: Any, gbnf: str, triggers: tuple[str, ...]) -> Any:
    if triggers:
        patterns = (ctypes.c_char_p * len(triggers))(*(t.encode() for t in triggers))
        sampler = ll.llama_sampler_init_grammar_lazy_patterns(
            vocab, gbnf.encode(), b"root", patterns, len(triggers), None, 0
        )
    else:
        sampler = ll.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
    if not sampler:
        raise RequestError("'grammar' could not be parsed as GBNF with a 'root' rule", "grammar")
    return sampler
