"""A chat template's control tokens left in an answer's text: the server printed the turn markers it
should have stopped at or removed (``<|im_end|>`` of ChatML, ``<|eot_id|>`` of Llama 3, ``<end_of_turn>``
of Gemma, ``</s>`` or ``[/INST]`` of Llama 2 and Mistral). OpenAI's content never holds them; a client
shows them to its user and keeps them in the history it sends back (issue 33: a held-out llama-server
answer ended ``...<|im_end|>``). A warning: the answer arrives and reads, with debris at its end.

Judged on every answer a client shows as text: a chat completion's content, a Responses ``output_text``
and a Messages text block, whole in a body and joined across a stream's deltas. A server whose model's
vocabulary lacks the token writes it as text, a few characters per delta (llama-server b11434 sends
``<``, ``|``, ``im``, ``_end``...), so one delta alone rarely holds it: each text keeps a
:class:`TokenScan`, the end of its text so far that could begin a token, never longer than the longest
token less one character, so a stream of any length costs the memory of one delta. Not for
``/v1/completions``: a completion of raw text may write such a string as text.
"""

from __future__ import annotations

from typing import Any

from conformance.rules.context import ChoiceState, Context, choice_text
from conformance.rules.token_scan import CONTROL_TOKENS, KEEP, TokenScan

__all__ = ["CONTROL_TOKENS", "KEEP", "TokenScan", "template_tokens", "text_tokens"]


def text_tokens(ctx: Context, scan: TokenScan, piece: Any, event: int | None, pointer: str) -> None:
    """The rule on one piece of a text the client shows (``pointer``: where the piece is), reported at the
    piece that completes a token. Every protocol's text goes through here."""
    if scan.found or not isinstance(piece, str) or not piece:
        return
    token = scan.feed(piece)
    if token is None:
        return
    ctx.warn(
        "template-token-in-content",
        f"the content holds the chat template's control token {token!r}: the server did not stop at it"
        " or remove it, and the client shows it",
        event=event,
        pointer=pointer,
        quirk="spec",
    )


def template_tokens(
    ctx: Context, event: int | None, pos: int, choice: dict[str, Any], state: ChoiceState
) -> None:
    """A chat choice's content, joined across its deltas (``state`` keeps the scan of each choice)."""
    if ctx.endpoint != "chat":
        return
    part = "message" if event is None else "delta"
    text_tokens(ctx, state.tokens, choice_text(choice), event, f"/choices/{pos}/{part}/content")
