"""Anthropic's Messages API (``POST /v1/messages``, what Claude Code and the Anthropic SDKs speak),
served over the core by translation to chat completions, both ways, or by an upstream's own endpoint
(llama-server, vLLM, Ollama), normalized.

- request.py: the request as the judge reads it; translation.py: as the chat request that serves it;
- response.py, events.py: the chat answer as a Message and as stream events; output.py: the writer of one
  answer; native.py: an upstream's own answer normalized; errors.py: Anthropic's error bodies;
- protocol.py: the protocol as the judge knows it; serving.py: the front-end the proxy and the backend
  serve (with ``/v1/messages/count_tokens``);
- stream_rules.py, message_rules.py: the judge's rules; probes.py: ``check``'s probes.

What is translated and what is refused: docs/messages.md.
"""

from __future__ import annotations

from ..front_end import FrontEnd
from .protocol import MESSAGES
from .serving import MessagesFrontEnd

__all__ = ["MESSAGES", "front_end"]


def front_end() -> FrontEnd:
    return MessagesFrontEnd()
