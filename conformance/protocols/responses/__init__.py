"""The Responses API (``POST /v1/responses``; the Open Responses specification), served over the core
by translation to chat completions, both ways, or by an upstream's own endpoint, normalized.

- request.py: the request as the judge reads it; translation.py: as the chat request that serves it;
- response.py, events.py, logprobs.py: the chat answer as a Response object and as stream events;
- output.py: the writer of one answer (the one encoder of Responses events); native.py: an upstream's
  own answer normalized;
- store.py, stored.py, store_settings.py: ``store`` and ``previous_response_id``, one SQLite file for
  every worker, and the routes that read it;
- protocol.py: the protocol as the judge knows it; serving.py: the front-end the proxy and the backend
  serve;
- stream_rules.py, response_rules.py: the judge's rules; probes.py: ``check``'s probes.

What is translated and what is refused: docs/responses.md.
"""

from __future__ import annotations

from ..front_end import FrontEnd
from .protocol import RESPONSES
from .serving import ResponsesFrontEnd
from .store import ResponseStore

__all__ = ["RESPONSES", "front_end"]


def front_end(store: ResponseStore, max_bytes: int | None = None) -> FrontEnd:
    """The front-end, keeping Responses in ``store``; a continuation with its conversation is at most
    ``max_bytes`` (None: any size)."""
    return ResponsesFrontEnd(store, max_bytes)
