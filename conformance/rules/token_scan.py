"""The scan of one text for a chat template's control tokens, across the pieces it arrives in
(rules/template_tokens.py judges with it). Apart from the rule, so that the choice state that keeps a
scan per choice (rules/context.py) and the rule that reads that state import it without importing each
other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CONTROL_TOKENS", "KEEP", "TokenScan"]

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
