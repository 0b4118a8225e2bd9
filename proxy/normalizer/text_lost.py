"""A lost text: the upstream generated tokens, counted them, and sent none of them (Q14).

ik_llama.cpp before PR #768 streamed ``/v1/completions`` with ``"text": ""`` on every chunk, each with
``finish_reason: "length"`` and usage counting the tokens (issue #767, corpus ``ik_llama-767.sse``):
relayed as it is, the client gets an empty success and cannot tell it from an empty answer. The
llama.cpp adapter avoids it by reading the native ``/completion`` stream; where that route is not there
(``--upstream-kind openai``, an upstream behind another proxy) the answer is a failure that names the
cause: a 502 before the stream starts, an error event after.

Evidence that tokens were generated for a choice that shows no output (text, content, refusal,
reasoning or tool calls):

- it finished ``length``: the token limit was reached, so tokens were generated;
- no choice shows output while usage counts more completion tokens than there are choices: llama-server
  counts the end-of-sequence token, so a genuine empty answer is 1 token per choice (its
  ``n_decoded``), and an empty answer must stay a success.

A ``max_tokens: 0`` request (``generates`` false) has no text to lose and is not judged. Nor is the
second evidence where the upstream counts tokens it never shows (``unshown_tokens``): llama-cpp-python's
function-calling handlers generate their format's own prefix first (``message:`` or ``functions.``), so an
answer to a tool result measured ``content: ""`` with 6 completion tokens in 4 of 10 seeds, an empty
answer and no loss. Nor, within what they account for, the stop sequences the request gave: an
upstream counts the tokens of the one it met and cuts them from the text, so an answer that begins with
a sequence of two tokens or more is empty with 2 counted (llama-server and the bundled backend:
``["who w"]`` after "... a little girl named" was a 502 before). A sequence has no more tokens than
bytes: more tokens than the longest one's bytes and the end token, per choice, are still a loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conformance.api_errors import APIError

__all__ = ["TEXT_LOST_CODE", "text_lost"]

TEXT_LOST_CODE = "upstream_text_lost"
"""The ``code`` of the error, which the access log and ``/metrics`` count by."""


def text_lost(
    choices: Sequence[tuple[int, bool, str | None]],
    usage: dict[str, Any] | None,
    *,
    unshown_tokens: bool = False,
    stops: tuple[str, ...] = (),
) -> APIError | None:
    """The failure for a response whose choices, ``(index, shows output, finish reason)``, lost their
    text, judged with the upstream's own ``usage`` (None when it sent none; ``unshown_tokens`` when its
    count holds tokens it never shows; ``stops``: the request's stop sequences); None when nothing
    was lost."""
    tokens = int(usage.get("completion_tokens") or 0) if usage is not None else 0
    for index, shown, reason in choices:
        if not shown and reason == "length":
            return _failure(f"finished 'length' for choice {index}", tokens)
    if unshown_tokens:
        return None
    per_choice = 1 + max((len(stop.encode()) for stop in stops), default=0)  # (the end token's 1)
    if choices and tokens > len(choices) * per_choice and not any(shown for _, shown, _ in choices):
        return _failure("finished", tokens)
    return None


def _failure(what: str, tokens: int) -> APIError:
    counted = f" after counting {tokens} completion tokens" if tokens else ""
    return APIError.make(
        f"the upstream server {what}{counted} but sent no text: its answer was lost on the way (Q14, as "
        "in ik_llama.cpp #767), and an empty answer in its place would pass for a real one",
        502,
        code=TEXT_LOST_CODE,
    )
