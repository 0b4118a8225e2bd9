"""A chat template's control tokens left in an answer's text: the server printed the turn markers it
should have stopped at or removed (``<|im_end|>`` of ChatML, ``<|eot_id|>`` of Llama 3, ``<end_of_turn>``
of Gemma, ``</s>`` or ``[/INST]`` of Llama 2 and Mistral). OpenAI's content never holds them; a client
shows them to its user and keeps them in the history it sends back (issue 33: a held-out llama-server
answer ended ``...<|im_end|>``). A warning: the answer arrives and reads, with debris at its end.

Chat only: a completion of raw text may write such a string as text. Judged on each chunk's text (a
server emits a special token as one piece) and on a body's message.
"""

from __future__ import annotations

import re
from typing import Any

from conformance.rules.context import ChoiceState, Context, choice_text

__all__ = ["CONTROL_TOKENS", "template_tokens"]

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


def template_tokens(
    ctx: Context, event: int | None, pos: int, choice: dict[str, Any], state: ChoiceState | None
) -> None:
    if ctx.endpoint != "chat":
        return
    text = choice_text(choice)
    found = _FOUND.search(text) if isinstance(text, str) else None
    if found is None:
        return
    part = "message" if event is None else "delta"
    ctx.warn(
        "template-token-in-content",
        f"the content holds the chat template's control token {found.group()!r}: the server did not stop"
        " at it or remove it, and the client shows it",
        event=event,
        pointer=f"/choices/{pos}/{part}/content",
        quirk="spec",
    )
