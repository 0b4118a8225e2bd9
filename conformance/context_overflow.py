"""The counts a context overflow's words give: how many prompt tokens, of how large a context, with how
many asked for the completion.

The core words an overflow as OpenAI does (proxy/adapters/context_window.py, backend/service.py:
"This model's maximum context length is M tokens. However, you requested T tokens (N in the messages, K
in the completion)"); upstreams' words the proxy relays say it otherwise ("prompt is N tokens",
llama-server's "request (N tokens) exceeds the available context size (M tokens)").
Anthropic's clients read the numbers in Anthropic's words (Claude Code compacts its history by them),
and a Responses request with ``truncation: "auto"`` is cut by them: one reading for both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["OverflowCounts", "overflow_counts"]

_SIZE = re.compile(r"maximum context length is (\d+)")
_PROMPT = re.compile(
    r"\((\d+) in (?:the messages|the prompt|your prompt)|resulted in (\d+) tokens|prompt is (\d+) tokens"
)
_COMPLETION = re.compile(r"(\d+) (?:in|for) the completion")
# llama-server's own words, relayed as they came (tools/server: "exceed_context_size_error").
_LLAMA_SERVER = re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)")


@dataclass(frozen=True, slots=True)
class OverflowCounts:
    prompt: int
    """The prompt's tokens."""
    limit: int
    """The model's context, in tokens."""
    completion: int
    """The tokens asked for the completion (0 where the words give none)."""


def overflow_counts(text: str) -> OverflowCounts | None:
    """The counts an overflow's message gives, or None where it does not give the prompt's and the
    context's."""
    if (llama := _LLAMA_SERVER.search(text)) is not None:
        return OverflowCounts(int(llama.group(1)), int(llama.group(2)), 0)
    size, prompt, completion = _SIZE.search(text), _PROMPT.search(text), _COMPLETION.search(text)
    if size is None or prompt is None:
        return None
    tokens = int(next(group for group in prompt.groups() if group))
    asked = int(completion.group(1)) if completion is not None else 0
    return OverflowCounts(tokens, int(size.group(1)), asked)
