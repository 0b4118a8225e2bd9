"""A token the grammar refuses is drawn again from a shortlist of the best-scoring tokens, and the draw is
the one the grammar over the whole vocabulary gives: greedy and seeded top-k sampling, on Gemma 3's
262,144 tokens, at every refusal of real constrained answers. A greedy draw taken as numpy's argmax is
the llama.cpp chain's pick, with a logit bias too."""

from __future__ import annotations

import json
from typing import Any

import httpx
import llama_cpp as ll
import numpy as np
import pytest

from backend.sampling import _TOKEN_DATA, Sampler, _token_array, _token_data
from backend.service import Backend

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "pet": {"enum": ["cat", "dog", "none"]},
        "likes": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age", "pet", "likes"],
    "additionalProperties": False,
}


@pytest.fixture
def redraws(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int | None, int, int]]:
    """(tokens kept, shortlist draw, whole-vocabulary draw) at each refusal, each from a copy of the
    chain (a sampling chain's random state advances with each draw)."""
    seen: list[tuple[int | None, int, int]] = []
    original = Sampler._redraw

    def both(self: Sampler, logits: Any) -> int:
        chain, kept = self.chain, self.kept
        try:
            self.chain = ll.llama_sampler_clone(chain)
            short = original(self, logits)
            ll.llama_sampler_free(self.chain)
            self.chain, self.kept = ll.llama_sampler_clone(chain), None
            full = original(self, logits)
            ll.llama_sampler_free(self.chain)
        finally:
            self.chain, self.kept = chain, kept
        seen.append((kept, short, full))
        return original(self, logits)

    monkeypatch.setattr(Sampler, "_redraw", both)
    return seen


@pytest.mark.parametrize(
    "sampling",
    [{"temperature": 0}, {"temperature": 1.0, "top_k": 40, "seed": 7}],
    ids=["greedy", "top-k"],
)
def test_a_refused_token_is_redrawn_as_the_whole_vocabulary_would(
    gemma_url: str, redraws: list[tuple[int | None, int, int]], sampling: dict[str, Any]
) -> None:
    for person in ("a pirate", "a baker", "a child"):
        body = {
            "model": "gemma",
            "messages": [{"role": "user", "content": f"Describe {person} as JSON."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}},
            "max_tokens": 64,
            **sampling,
        }
        answer = httpx.post(gemma_url + "/v1/chat/completions", json=body, timeout=120).json()
        if answer["choices"][0]["finish_reason"] == "stop":
            json.loads(answer["choices"][0]["message"]["content"])
    assert len(redraws) >= 3  # the model's own first choice was refused, and redrawn, at least this often
    expected_kept = 1 if sampling["temperature"] == 0 else 40
    assert {kept for kept, _, _ in redraws} == {expected_kept}  # the shortlist was used
    assert [short for _, short, _ in redraws] == [full for _, _, full in redraws]


@pytest.fixture
def greedy_picks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(numpy's pick, the llama.cpp chain's pick over the whole vocabulary) at each greedy draw."""
    seen: list[tuple[int, int]] = []
    original = Sampler._biased_argmax

    def both(self: Sampler, logits: Any) -> int:
        candidates = np.empty(self.n_vocab, dtype=_TOKEN_DATA)
        ids = np.arange(self.n_vocab, dtype=np.int32)
        chain = self._chain_pick(_token_array(_token_data(candidates, ids, logits)))  # (a copy of logits)
        mine = original(self, logits)
        seen.append((mine, chain))
        return mine

    monkeypatch.setattr(Sampler, "_biased_argmax", both)
    return seen


def test_a_greedy_draw_is_the_chains_pick_with_and_without_a_bias(
    gemma_url: str, gemma_backend: Backend, greedy_picks: list[tuple[int, int]]
) -> None:
    """The argmax taken in numpy is llama.cpp's greedy pick after its logit-bias stage, at every token of
    real answers: one unbiased, one whose first tokens are banned, made likely or left as they were."""
    body = {"model": "gemma", "prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}
    plain = httpx.post(gemma_url + "/v1/completions", json=body, timeout=120).json()["choices"][0]["text"]
    first = gemma_backend.vocab.tokenize(plain, add_special=False)
    bias = {str(first[0]): -100, str(first[1]): 3.5, str(first[2]): 0}
    biased = httpx.post(gemma_url + "/v1/completions", json={**body, "logit_bias": bias}, timeout=120).json()
    assert biased["choices"][0]["text"] != plain  # the bias was applied
    assert len(greedy_picks) >= 20
    assert [mine for mine, _ in greedy_picks] == [chain for _, chain in greedy_picks]
