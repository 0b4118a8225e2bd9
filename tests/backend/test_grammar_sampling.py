"""A token the grammar refuses is drawn again from a shortlist of the best-scoring tokens, and the draw is
the one the grammar over the whole vocabulary gives: greedy and seeded top-k sampling, on Gemma 3's
262,144 tokens, at every refusal of real constrained answers."""

from __future__ import annotations

import json
from typing import Any

import httpx
import llama_cpp as ll
import pytest

from backend.sampling import Sampler

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
