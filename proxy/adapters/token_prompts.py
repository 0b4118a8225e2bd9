"""Token-id prompts (Q74) for upstreams that refuse them: turned into text by the upstream, sent once more.

OpenAI takes ``prompt`` as token ids (``int[]`` or ``int[][]``); llama-cpp-python answers them with a
500 and llama.cpp's OpenAI endpoint refused them before PR #15001. When the upstream refuses one, the
proxy asks the upstream's own detokenizer for the text (llama-cpp-python: ``POST /extras/detokenize``
-> ``{"text"}``; llama.cpp: ``POST /detokenize`` -> ``{"content"}``), so the ids mean what the model's
vocabulary says, and retries once with that text. An upstream without a detokenizer gets a clear 400.
"""

from __future__ import annotations

import re
from typing import Any

from conformance.api_errors import APIError, ContextOverflow

from ..upstream import Upstream

__all__ = ["detokenize", "is_token_prompt", "refused_token_prompt"]

# (path, field of the answer holding the text); llama.cpp's names first for a llama.cpp upstream.
_DETOKENIZERS = (("/extras/detokenize", "text"), ("/detokenize", "content"))
_LLAMACPP_FIRST = (_DETOKENIZERS[1], _DETOKENIZERS[0])
# Statuses an upstream refuses a token prompt with (422 arrives mapped to 400); not a timeout, not a
# missing model, not an overflow, which text would meet the same way.
_REFUSALS = frozenset({400, 500})
_INVALID_IDS = re.compile(r"invalid tokens?\b|out of (?:the )?vocab", re.IGNORECASE)
"""How an upstream that takes token ids refuses ids its vocabulary lacks (llama-server: "Prompt contains
invalid tokens"): the client's error, which the ids' text would not mend. Read as a refusal of token
prompts, it was answered for a prompt the client never sent, its bad id as U+FFFD (black-box testing)."""
_ABSENT = frozenset({404, 405})  # how a server without the endpoint answers
_MAX_DETOKENIZE_CALLS = 64
_REPLACEMENT = "\ufffd"


def is_token_prompt(prompt: Any) -> bool:
    """``int[]`` or ``int[][]``, non-empty (a bool is not a token id)."""
    if not isinstance(prompt, list) or not prompt:
        return False
    if all(type(t) is int for t in prompt):
        return True
    return all(isinstance(p, list) and p and all(type(t) is int for t in p) for p in prompt)


async def _detokenizer(upstream: Upstream, llamacpp_first: bool) -> tuple[str, str] | None:
    """The upstream's detokenize endpoint, found once per upstream with an empty list."""
    traits = upstream.traits
    if traits.detokenizer_probed:
        return traits.detokenizer
    found = None
    settled = True  # each endpoint either answered or said it is not there
    for path, field in _LLAMACPP_FIRST if llamacpp_first else _DETOKENIZERS:
        status, answer = await upstream.answer("POST", path, {"tokens": []})
        if isinstance(answer, dict) and isinstance(answer.get(field), str):
            found, settled = (path, field), True
            break
        if status not in _ABSENT:
            settled = False
    if settled:
        # Only an answer is remembered: a timeout, a refused connection or a 503 while the model loads
        # says nothing of the endpoint, and remembered it would refuse every later token prompt.
        traits.detokenizer, traits.detokenizer_probed = found, True
    return found


class _Budget:
    def __init__(self, calls: int) -> None:
        self.calls = calls


async def _text(upstream: Upstream, where: tuple[str, str], tokens: list[int], budget: _Budget) -> str:
    """The text of ``tokens``; halves that will not decode are split further.

    llama-cpp-python decodes strictly, so ids that end inside a UTF-8 character fail as a whole; each id
    that fails alone becomes U+FFFD, as llama.cpp's own ``/detokenize`` writes it.
    """
    if budget.calls <= 0:
        raise APIError.make(
            "The upstream server could not turn these token ids into text.", 400, param="prompt"
        )
    budget.calls -= 1
    path, field = where
    answer = await upstream.json("POST", path, {"tokens": tokens})
    if isinstance(answer, dict) and isinstance(answer.get(field), str):
        return str(answer[field])
    if len(tokens) <= 1:
        return _REPLACEMENT * len(tokens)
    half = len(tokens) // 2
    return await _text(upstream, where, tokens[:half], budget) + await _text(
        upstream, where, tokens[half:], budget
    )


async def detokenize(
    upstream: Upstream, prompt: list[Any], *, llamacpp_first: bool = False
) -> str | list[str]:
    """A token prompt as text (``int[][]``: one text each); a 400 when the upstream has no detokenizer."""
    where = await _detokenizer(upstream, llamacpp_first)
    if where is None and not upstream.traits.detokenizer_probed:
        # No answer yet: a client may ask again (openai-python retries a 503), unlike the 400 below.
        raise APIError.make("The upstream server did not answer on its detokenize endpoint; try again.", 503)
    if where is None:
        raise APIError.make(
            "The upstream server does not accept a prompt of token ids and has no detokenize endpoint "
            "to turn them into text; send the prompt as text.",
            400,
            code="unsupported_prompt",
            param="prompt",
        )
    budget = _Budget(_MAX_DETOKENIZE_CALLS)
    if all(type(t) is int for t in prompt):
        return await _text(upstream, where, prompt, budget)
    return [await _text(upstream, where, tokens, budget) for tokens in prompt]


def refused_token_prompt(error: APIError) -> bool:
    """Whether ``error`` is how an upstream refuses a prompt of token ids, which text may pass."""
    if error.status not in _REFUSALS or isinstance(error, ContextOverflow):
        return False
    return _INVALID_IDS.search(error.message) is None
