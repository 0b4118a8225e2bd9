"""Usage held against the choices it counts and the request it answers: counts that cannot be true.

A server whose usage disagrees with what it sent hides a fault the shape rules cannot see: a finish it
did not reach, tokens it never generated, a prompt it cut (Ollama truncates an over-long prompt without
a word, Q50; koboldcpp shrinks it to fit a large ``max_tokens``, Q54) or a prompt array it answered as
one prompt. Judged at the end of a stream and on a body, from the last usage the response carried.
"""

from __future__ import annotations

from conformance.rules.context import Context, usage_count

__all__ = ["least_prompt_tokens", "prompt_tokens_short", "stop_at_limit", "usage_below_length"]

LONG_PROMPT_WORDS = 32
"""Below this many words a prompt's count says too little: a short text is judged by no bound."""


def _finished(ctx: Context, reason: str) -> list[int]:
    return [index for index, state in ctx.choices.items() if state.finish_reason == reason]


def stop_at_limit(ctx: Context) -> None:
    """``finish_reason: "stop"`` although usage shows every sequence reached the token limit, and the
    request named no stop sequence that could have ended it there (spec: ``length`` when the limit is
    reached). An error (docs/validate.md, severity policy): the client takes a cut answer for a whole
    one, and an agent acts on it (a model that picks its end-of-sequence token as the very last one the
    limit allows is the rare case this may misjudge)."""
    limit = ctx.request.completion_limit
    completion = ctx.completion_tokens
    if (
        limit is None
        or not ctx.request.max_tokens
        or ctx.request.stop
        or completion is None
        or completion < limit
    ):
        return
    stopped = _finished(ctx, "stop")
    if stopped:
        ctx.error(
            "finish-stop-at-limit",
            f"choice {stopped[0]} finished 'stop', but usage counts {completion} completion tokens: the"
            f" limit of {ctx.request.max_tokens} was reached, which is finish_reason 'length'",
            event=ctx.usage_last_event,
            pointer="/usage/completion_tokens",
            quirk="spec",
        )


def usage_below_length(ctx: Context) -> None:
    """Each choice that finished ``length`` generated the request's ``max_tokens``; usage counting fewer
    than that for them all is wrong about the tokens or about the finish (spec). A warning, not an
    error: a context that fills before the limit also ends a choice with ``length``, and the response
    does not say how large the context is."""
    cut = _finished(ctx, "length")
    per = ctx.request.max_tokens
    completion = ctx.completion_tokens
    if not cut or not per or per < 0 or completion is None or completion >= per * len(cut):
        return
    ctx.warn(
        "usage-below-length",
        f"{len(cut)} choice(s) finished 'length' at max_tokens {per}, which takes {per * len(cut)}"
        f" completion tokens; usage counts {completion}",
        pointer="/usage/completion_tokens",
        quirk="spec",
    )


def least_prompt_tokens(text: str) -> int:
    """The fewest tokens ``text`` can take: one per whitespace-separated word. The BPE tokenizers split
    text into words before merging (GPT-2, cl100k, o200k, Llama 3, Qwen: a token never spans two
    words), and SentencePiece splits on whitespace by default, so no token holds two words; a long word
    may take several, which only makes the real count larger."""
    return len(text.split())


def prompt_tokens_short(ctx: Context) -> None:
    """``prompt_tokens`` well below what the request's text prompts (or a chat request's messages) must
    take: the prompt was cut without a word (Q50), or a prompt array was counted as one of its prompts
    (spec: usage counts the whole request). Only for long text prompts, and only a quarter below the
    bound, so a tokenizer's odd merge never makes a finding: of the 262,144 tokens of Gemma 3's
    vocabulary (the bundled model) one holds two words (``"> </"``), and six texts of prose, code, long
    words and single letters took 1.0 to 2.2 of its tokens per word."""
    # A chat request's messages are one prompt: its template only adds tokens to their words.
    chat = ctx.request.endpoint == "chat" or ctx.endpoint == "chat"
    texts = (" ".join(ctx.request.message_texts),) if chat else ctx.request.prompt_texts
    prompt = usage_count(ctx.usage, "prompt_tokens")
    if not texts or prompt is None:
        return
    least = [least_prompt_tokens(text) for text in texts]
    need = sum(least)
    if need < LONG_PROMPT_WORDS or prompt * 4 >= need * 3:
        return
    if len(texts) > 1 and prompt * 4 >= max(least) * 3:
        ctx.error(
            "usage-prompt-array",
            f"prompt_tokens {prompt} for {len(texts)} prompts whose words alone take {need} tokens:"
            " usage counts one prompt, not the array",
            pointer="/usage/prompt_tokens",
            quirk="spec",
        )
        return
    ctx.error(
        "prompt-truncated",
        f"prompt_tokens {prompt}, but the prompt's {need} words take at least {need} tokens: the prompt"
        " was cut without an error (OpenAI answers 400 context_length_exceeded)",
        pointer="/usage/prompt_tokens",
        quirk="Q50",
    )
