"""Legacy logprobs against the text they score (``/v1/completions``, spec §2.7): no ``text_offset`` past
the end of the prompt and text, and no more ``tokens`` than the text holds.

OpenAI counts ``text_offset`` from the start of the prompt even without ``echo`` (its reference stream in
tests/data starts at 16; llama-cpp-python's recorded logprobs start at 24 for a 24-character prompt), so
the end is the prompt's length plus the text's, or the text's alone with echo, whose text holds the prompt.
Only what is certain is flagged:

- lengths are UTF-8 bytes, the largest unit a server may count in (characters, UTF-16 units are fewer);
- a token counts for the least text it can stand for: its characters (a raw byte-level piece such as
  ``Ġthe`` or ``▁the`` stands for at least one byte per character), less any U+FFFD standing in for part
  of a character, and nothing for a byte or id form (``bytes:\\xe2``, ``token_id:42``, ``<0xE2>``) or a
  special token (``<|endoftext|>``);
- the tokens run past the text only when they still do without their longest token: a first token's
  space that the detokenizer drops, or one closing special token, is never a whole extra token;
- a choice that a stop sequence may have ended is not judged: the tokens that matched it may be scored
  past the text it was cut from;
- without echo the prompt's length counts only for a text prompt of a request that asked for these
  logprobs (the corpus's bug-report sidecars are made-up requests); otherwise only the spread of the
  offsets is judged, which must fit in the text.

A stream's choice is judged whole at the end, from running totals: nothing of its text is kept.
"""

from __future__ import annotations

from typing import Any

from conformance.rules.context import ChoiceState, Context, LegacyLogprobsExtent

__all__ = ["legacy_logprobs_extent", "logprobs_past_text", "logprobs_past_text_body"]

_NO_TEXT_PREFIXES = ("bytes:", "token_id:")


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _least_text(token: str) -> int:
    """The fewest characters of the text that ``token`` can stand for."""
    if token.startswith(_NO_TEXT_PREFIXES) or (len(token) > 2 and token[0] == "<" and token[-1] == ">"):
        return 0
    return len(token) - token.count("\ufffd")


def legacy_logprobs_extent(
    ctx: Context, event: int | None, pos: int, choice: dict[str, Any], state: ChoiceState
) -> None:
    """Keeps the running totals: the text's length, the offsets' extremes, the tokens' least length."""
    if ctx.endpoint != "completions":
        return
    text = choice.get("text")
    if isinstance(text, str) and text:
        state.text_bytes += _utf8_length(text)
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return
    offsets = logprobs.get("text_offset")
    tokens = logprobs.get("tokens")
    if not isinstance(offsets, list) and not isinstance(tokens, list):
        return
    extent = state.legacy
    if extent is None:
        extent = state.legacy = LegacyLogprobsExtent(event, f"/choices/{pos}/logprobs")
    else:
        extent.event, extent.pointer = event, f"/choices/{pos}/logprobs"
    for offset in offsets if isinstance(offsets, list) else ():
        if isinstance(offset, int) and not isinstance(offset, bool):
            if extent.offset_low is None or offset < extent.offset_low:
                extent.offset_low = offset
            if extent.offset_high is None or offset > extent.offset_high:
                extent.offset_high = offset
    for token in tokens if isinstance(tokens, list) else ():
        if isinstance(token, str):
            length = _least_text(token)
            extent.token_length += length
            extent.longest_token = max(extent.longest_token, length)


def _prompt_bytes(ctx: Context, index: int) -> int | None:
    """Where the choice's text starts, counted from the start of the prompt; None when unknown."""
    if ctx.request.echo:
        return 0
    if not ctx.request.logprobs or ctx.request.suffix:
        return None  # a made-up request, or a suffix that offsets might count in
    prompt = ctx.request.prompt_for(index)
    return None if prompt is None else _utf8_length(prompt)


def _judge(ctx: Context, state: ChoiceState, finish_reason: Any) -> None:
    extent = state.legacy
    if extent is None or (ctx.request.stop and finish_reason != "length"):
        return
    end = state.text_bytes
    low, high = extent.offset_low, extent.offset_high
    if low is not None and high is not None:
        start = _prompt_bytes(ctx, state.index)
        if start is not None and high > start + end:
            covered = "text" if ctx.request.echo else "prompt and text"
            message = f"text_offset {high} lies past the end of the {covered} ({start + end} bytes)"
        elif high - low > end:
            message = f"text_offset runs from {low} to {high}, further than the text's {end} bytes"
        else:
            message = ""
        if message:
            pointer = f"{extent.pointer}/text_offset"
            ctx.error("text-offset-past-end", message, event=extent.event, pointer=pointer, quirk="spec")
    if extent.token_length - extent.longest_token > end:
        ctx.error(
            "logprobs-tokens-past-end",
            f"the tokens spell at least {extent.token_length} characters, more than the text's {end} bytes "
            f"by more than their longest token ({extent.longest_token})",
            event=extent.event,
            pointer=f"{extent.pointer}/tokens",
            quirk="spec",
        )


def logprobs_past_text(ctx: Context) -> None:
    """At a stream's end, each choice's logprobs against its whole text."""
    if ctx.endpoint != "completions":
        return
    for state in ctx.choices.values():
        _judge(ctx, state, state.finish_reason)


def logprobs_past_text_body(ctx: Context, pos: int, choice: dict[str, Any], state: ChoiceState) -> None:
    legacy_logprobs_extent(ctx, None, pos, choice, state)
    _judge(ctx, state, choice.get("finish_reason"))
