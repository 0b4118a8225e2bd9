"""The Responses API (``POST /v1/responses``; the Open Responses specification), served over the core
by translation to chat completions, both ways, or by an upstream's own endpoint, normalized.

- request.py: the request as the judge reads it; translation.py: as the chat request that serves it;
- response.py, events.py, logprobs.py: the chat answer as a Response object and as stream events;
- output.py: the writer of one answer (the one encoder of Responses events); native.py: an upstream's
  own answer normalized;
- store.py, stored.py, store_settings.py: ``store`` and ``previous_response_id``, one SQLite file for
  every worker, and the routes that read it;
- protocol.py: the protocol as the judge knows it; serving.py: the front-end the proxy and the backend
  serve, with its WebSocket mode (websocket.py); compact.py: ``POST /v1/responses/compact``, whose
  ``compaction`` item (compaction.py) comes back as input (issue 38);
- stream_rules.py, response_rules.py: the judge's rules; probes.py: ``check``'s probes.

What is translated and what is refused: docs/responses.md.
"""

from __future__ import annotations

from ..front_end import FrontEnd
from .compact import CompactFrontEnd
from .protocol import RESPONSES
from .serving import ResponsesFrontEnd
from .store_base import Store

__all__ = ["RESPONSES", "front_end", "front_ends"]


def front_end(store: Store, max_bytes: int | None = None) -> FrontEnd:
    """The front-end, keeping Responses in ``store``; a continuation with its conversation is at most
    ``max_bytes`` (None: any size)."""
    return ResponsesFrontEnd(store, max_bytes)


def front_ends(store: Store, max_bytes: int | None = None) -> tuple[FrontEnd, FrontEnd]:
    """``POST /v1/responses`` (``front_end``), then ``POST /v1/responses/compact``, which reads its
    requests as the first does."""
    responses = ResponsesFrontEnd(store, max_bytes)
    return responses, CompactFrontEnd(responses)
