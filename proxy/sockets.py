"""A protocol's WebSocket mode on the proxy (the Responses API's on ``/v1/responses``, issue 38).

The handshake must carry the API key, as every route's request must (``authorized``: a bearer token,
``api-key``, ``x-api-key``); without it the handshake is answered with the HTTP 401 and OpenAI error
body that a request gets (ASGI's WebSocket denial response), and no socket opens. The connection caps
and the handshake's timeout are the HTTP connection's (proxy/client_limits.py). Then the protocol
serves the socket (conformance/protocols/responses/websocket.py), and each of its turns is answered by
the generating route (proxy/generation.py) as the same POST would be, under the access log and
metrics: one log line per turn, its key checked again, ``--max-body`` and ``--max-items`` applied,
routed, failed over and repaired.
"""

from __future__ import annotations

from functools import partial

from starlette.routing import request_response
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from conformance.protocols.front_end import FrontEnd, SocketRoute

from .generation import generate
from .observability import ObservabilityMiddleware
from .serving import Serving, authorized, refused_key

__all__ = ["serve_socket"]


async def serve_socket(serving: Serving, socket: SocketRoute, websocket: WebSocket) -> None:
    """A WebSocket to ``socket``'s path: refused without the key, else served by its protocol."""
    if not authorized(websocket, serving.config.api_key):
        await websocket.send_denial_response(refused_key())
        return
    await socket.serve(websocket, partial(_answering, serving))


def _answering(serving: Serving, front_end: FrontEnd) -> ASGIApp:
    """The generating route of ``front_end`` as the app of one turn's request, logged and counted."""
    return ObservabilityMiddleware(request_response(partial(generate, serving, front_end)), serving.metrics)
