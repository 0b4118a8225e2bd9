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

import re
from dataclasses import dataclass
from typing import Any

from conformance.rules.context import ChoiceState, Context, choice_text

__all__ = ["CONTROL_TOKENS", "KEEP", "TokenScan", "template_tokens", "text_tokens"]

CONTROL_TOKENS = (
    "<|im_start|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|end|>",
    "<start_of_turn>",
    "<end_of_turn>",
    "</s>",
    "[/INST]",
)
_FOUND = re.compile("|".join(re.escape(token) for token in CONTROL_TOKENS))
KEEP = max(len(token) for token in CONTROL_TOKENS) - 1
"""The most characters of a text a scan keeps between deltas: a token split across deltas has at most
this many of its characters before the delta that completes it."""


@dataclass(slots=True)
class TokenScan:
    """One text's scan for control tokens across the pieces it arrives in (a body's text is one piece)."""

    tail: str = ""
    """The text's last characters, at most :data:`KEEP`: where a token split across pieces begins."""
    found: bool = False
    """A token was reported: the text is not scanned again (one finding per text, folded per response)."""

    def feed(self, piece: str) -> str | None:
        """The control token that ``piece`` completes, joined to the text before it; None if none does."""
        window = self.tail + piece
        found = _FOUND.search(window)
        if found is not None:
            self.found, self.tail = True, ""
            return found.group()
        # A token wholly inside the tail would have been found in the window before: keeping the last
        # KEEP characters finds every split token, and no more is needed.
        self.tail = window[-KEEP:]
        return None


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
    if state.tokens is None:  # the choice's first chunk: its scan starts
        state.tokens = TokenScan()
    part = "message" if event is None else "delta"
    text_tokens(ctx, state.tokens, choice_text(choice), event, f"/choices/{pos}/{part}/content")
