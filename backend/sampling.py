"""One llama.cpp sampler chain per sequence, built from :class:`SamplingParams`.

The chain order follows llama.cpp's common sampler (bias, penalties, truncation, temperature, draw).
A grammar is kept beside the chain, not in it, and applied as llama.cpp's common sampler does: the
chain draws from the whole vocabulary, the grammar checks only the drawn token, and only when it refuses
that token is the draw made again among the tokens the grammar allows. Applying a grammar to all of
Gemma 3's 262,144 tokens costs about 87 ms on this project's 2-core machine, more than a forward pass of
the 270M model, and a JSON answer had a quarter of its tokens refused this way (9 of 38), a third of
its time. So the draw again first looks at the best-scoring 256 tokens, then 4,096, and only then at
all: where the chain keeps at most ``top_k`` tokens (greedy: one) and no bias or penalty reorders the
scores, the best allowed tokens among the best-scoring ones are the best allowed of all, and the draw is
the one the whole vocabulary would give (bench/grammar_cost.py measures it).

A tool-call grammar under ``tool_choice: auto`` starts where its trigger appears in the text: started
by lazy_grammar.py, not llama.cpp's lazy sampler, whose refusal of a trigger token's text was a C++
exception through the C API (the process ended).

A greedy draw with no penalty is an argmax over the row's logits, with any bias added to its few tokens
first: numpy does it in about 100 us a row, where ``llama_sampler_sample`` fills a candidate array of the
whole vocabulary first (about 440 us a row for Gemma 3 on this project's 2-core machine; at 16 streams
16 rows a step, serial between two decodes).
"""

from __future__ import annotations

import ctypes
import random
from typing import Any

import llama_cpp as ll
import numpy as np

from backend.lazy_grammar import LazyGrammar, grammar_sampler
from backend.request_errors import RequestError
from backend.requests import SamplingParams

__all__ = ["Sampler"]

_MIROSTAT_M = 100  # llama.cpp's fixed candidate count for mirostat v1
_REDRAWS = 16  # picks refused at a lazy grammar's start before it is given up (lazy_grammar.py)
_SHORTLISTS = (256, 4096)  # best-scoring tokens the grammar is asked about before the whole vocabulary


class Sampler:
    """Owns a ``llama_sampler`` chain; ``close()`` frees it (the engine calls it when the sequence ends)."""

    def __init__(self, vocab: Any, params: SamplingParams, *, eog_tokens: list[int], seed_offset: int = 0):
        n_vocab = int(ll.llama_vocab_n_tokens(vocab))
        self.chain: Any = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        self.grammar: Any = None
        self.lazy: LazyGrammar | None = None
        """A tool-call grammar not started yet: it starts where its trigger appears (lazy_grammar.py)."""
        self.n_vocab = n_vocab
        self.greedy = params.temperature <= 0.0 and params.mirostat == 0
        self.kept: int | None = None
        """Tokens the chain keeps from the best-scoring ones (greedy: 1), when that is all it reads: the
        grammar's refusals are then redrawn from a shortlist, not the whole vocabulary."""
        seed = (params.seed + seed_offset) & 0xFFFFFFFF if params.seed is not None else random.getrandbits(32)
        bias = _bias(n_vocab, params, eog_tokens)
        self.argmax = self.greedy and not _penalised(params)
        """Whether a draw is the biased logits' argmax, taken in numpy (the chain is never asked)."""
        self._bias_ids = np.array(list(bias), dtype=np.int64)
        self._bias_values = np.array(list(bias.values()), dtype=np.float32)
        try:
            if params.grammar is not None:
                self.grammar = _grammar_sampler(vocab, params.grammar, params.grammar_from)
                if params.grammar_triggers:  # (parsed once above, so that a bad one is refused at once)
                    ll.llama_sampler_free(self.grammar)
                    self.grammar = None
                    self.lazy = LazyGrammar(vocab, params.grammar, params.grammar_triggers)
            rescored = bool(bias)
            if bias:
                self._add_bias(bias)
            if _penalised(params):
                rescored = True
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
        if not rescored and params.mirostat == 0 and (self.greedy or params.top_k > 0):
            self.kept = 1 if self.greedy else params.top_k  # (mirostat reads every token's score)
        if params.grammar is not None:  # the whole vocabulary's candidates, filled again at each draw
            self._ids = np.arange(n_vocab, dtype=np.int32)
            self._data = np.empty(n_vocab, dtype=_TOKEN_DATA)

    def _add(self, sampler: Any) -> None:
        ll.llama_sampler_chain_add(self.chain, sampler)

    def _add_bias(self, bias: dict[int, float]) -> None:
        array = (ll.llama_logit_bias * len(bias))(*(ll.llama_logit_bias(t, b) for t, b in bias.items()))
        self._add(ll.llama_sampler_init_logit_bias(self.n_vocab, len(bias), array))

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
        if self.grammar is None and self.lazy is None and not self.argmax:
            return int(ll.llama_sampler_sample(self.chain, ctx, index))
        logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx, index), shape=(self.n_vocab,))
        token = self._biased_argmax(logits) if self.argmax else self._draw(logits)
        if self.lazy is not None:
            token = self._started(logits, token)
            ll.llama_sampler_accept(self.chain, token)
            return token
        if self.grammar is None:
            return token  # (a greedy chain and a bias keep no state: there is nothing to accept)
        one = (ll.llama_token_data * 1)(ll.llama_token_data(token, 0.0, 0.0))
        ll.llama_sampler_apply(self.grammar, ctypes.byref(ll.llama_token_data_array(one, 1, -1, False)))
        if one[0].logit == float("-inf"):
            token = self._redraw(logits)
        ll.llama_sampler_accept(self.grammar, token)
        ll.llama_sampler_accept(self.chain, token)
        return token

    def _started(self, logits: Any, token: int) -> int:
        """``token``, or another where its text starts the lazy grammar with text the grammar refuses
        (drawn again from a copy of the row without it: the row is read for logprobs afterwards)."""
        assert self.lazy is not None
        for _ in range(_REDRAWS):
            try:
                grammar = self.lazy.start(token)
            except ValueError:
                logits = np.array(logits)
                logits[token] = -np.inf
                token = self._biased_argmax(logits) if self.argmax else self._draw(logits)
                continue
            if grammar is not None:
                self.grammar, self.lazy = grammar, None
            return token
        self.lazy = None  # (every pick refused: the answer goes on as text, unconstrained)
        return token

    def _biased_argmax(self, logits: Any) -> int:
        """llama.cpp's greedy pick after its logit-bias stage: the first of the highest biased scores.
        The bias is added in place for the argmax and taken off again (the row's logits are read after
        the draw, for logprobs, as the model gave them)."""
        ids = self._bias_ids
        if not len(ids):
            return int(np.argmax(logits))
        kept = logits[ids]
        logits[ids] = kept + self._bias_values
        try:
            return int(np.argmax(logits))
        finally:
            logits[ids] = kept

    def _redraw(self, logits: Any) -> int:
        """The chain's pick among the tokens the grammar allows: from a shortlist of the best-scoring
        tokens when that gives the same pick, else from the whole vocabulary."""
        if self.kept is not None:
            for size in (n for n in _SHORTLISTS if n < self.n_vocab):  # (a small vocabulary: all)
                shortlist = np.argpartition(logits, -size)[-size:].astype(np.int32)
                data = _token_data(np.empty(size, dtype=_TOKEN_DATA), shortlist, logits[shortlist])
                array = _token_array(data)
                ll.llama_sampler_apply(self.grammar, ctypes.byref(array))
                if np.count_nonzero(data["logit"] != -np.inf) >= self.kept:
                    return self._chain_pick(array)
        array = _token_array(_token_data(self._data, self._ids, logits))
        ll.llama_sampler_apply(self.grammar, ctypes.byref(array))
        return self._chain_pick(array)

    def _draw(self, logits: Any) -> int:
        """The chain's pick over every token, not accepted yet."""
        return self._chain_pick(_token_array(_token_data(self._data, self._ids, logits)))

    def _chain_pick(self, array: Any) -> int:
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


def _token_array(data: Any) -> Any:
    """A ``llama_token_data_array`` over ``data`` (a ``_TOKEN_DATA`` array), unsorted, none selected."""
    pointer = data.ctypes.data_as(ctypes.POINTER(ll.llama_token_data))
    return ll.llama_token_data_array(pointer, len(data), -1, False)


def _token_data(data: Any, ids: Any, logits: Any) -> Any:
    data["id"] = ids
    data["logit"] = logits
    data["p"] = 0.0
    return data


def _bias(n_vocab: int, params: SamplingParams, eog_tokens: list[int]) -> dict[int, float]:
    """The logit bias of a draw: ``logit_bias`` within the vocabulary, and ``ignore_eos``'s bans."""
    bias = {t: b for t, b in params.logit_bias.items() if 0 <= t < n_vocab}
    if params.ignore_eos:
        bias.update(dict.fromkeys(eog_tokens, float("-inf")))
    return bias


def _penalised(params: SamplingParams) -> bool:
    return params.repeat_penalty != 1.0 or bool(params.presence_penalty or params.frequency_penalty)


def _grammar_sampler(vocab: Any, gbnf: str, source: str) -> Any:
    """llama.cpp's sampler of ``gbnf``; a 400 naming ``source`` (the parameter the grammar came from:
    the client's GBNF, or a grammar made of its schema or tools) where llama.cpp refuses it."""
    sampler = grammar_sampler(vocab, gbnf)
    if not sampler:
        if source == "grammar":
            raise RequestError("'grammar' could not be parsed as GBNF with a 'root' rule", "grammar")
        raise RequestError(
            f"'{source}' holds a schema whose grammar this server's grammar engine refuses",
            source,
            code="unsupported_schema",
        )
    return sampler
