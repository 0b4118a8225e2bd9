"""A protocol's WebSocket mode on the proxy (the Responses API's on ``/v1/responses``, issue 38).

The handshake must carry the API key, as every route's request must (``authorized``: a bearer token,
``api-key``, ``x-api-key``); without it the handshake is answered with the HTTP 401 and OpenAI error
body that a request gets (ASGI's WebSocket denial response), and no socket opens. The connection caps
and the handshake's timeout are the HTTP connection's (proxy/client_limits.py). Then the protocol
serves the socket (conformance/protocols/responses/websocket.py), and each of its turns is answered by
the generating route (proxy/generation.py) as the same POST would be, under the access log and
metrics: one log line per turn, its key checked again, ``--max-body`` and ``--max-items`` applied,
routed, failed over and repaired.

A browser does not hold a WebSocket to the same-origin rule as it holds ``fetch``: any web page may open
one to ``ws://127.0.0.1:8000/v1/responses`` and read what comes back, where the HTTP route's answers
are hidden from it unless ``--cors-origin`` names its origin. A handshake that carries an ``Origin``
(browsers always send one; openai-python and the ``websockets`` library send none) is therefore refused
with a 403 unless ``--cors-origin`` lists that origin (or ``*``): the black-box test of issue 38 drove
a keyless server from a page of another origin.

uvicorn's WebSocket implementation (websockets-sansio) logs "ASGI callable returned without completing
handshake" at ERROR after every denial response, though a denial is a completed handshake (ASGI's
``websocket.http.response``): ``QuietDenials`` drops that line, which an operator read as a fault on
every refused key.
"""

from __future__ import annotations

import logging
from functools import partial

from starlette.routing import request_response
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from conformance.protocols.front_end import FrontEnd, SocketRoute
from conformance.protocols.responses.websocket import STOPPING

from . import graceful
from .generation import generate
from .observability import ObservabilityMiddleware, exchange_of
from .serving import Serving, refused_client

__all__ = ["QuietDenials", "serve_socket"]


async def serve_socket(serving: Serving, socket: SocketRoute, websocket: WebSocket) -> None:
    """A WebSocket to ``socket``'s path: refused from a browser origin not allowed and without the key,
    else served by its protocol."""
    refused = refused_client(websocket, serving.config)
    if refused is not None:
        exchange_of(websocket.scope).take_error(refused)  # (the socket's access-log line)
        await websocket.send_denial_response(refused.response())
        return
    websocket.scope.setdefault("state", {})[STOPPING] = graceful.stopping()  # (closed after its turn)
    await socket.serve(websocket, partial(_answering, serving))


class QuietDenials(logging.Filter):
    """Drops uvicorn's ERROR line after a WebSocket denial response (see the module's docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "ASGI callable returned without completing handshake."


def _answering(serving: Serving, front_end: FrontEnd) -> ASGIApp:
    """The generating route of ``front_end`` as the app of one turn's request, logged and counted."""
    return ObservabilityMiddleware(request_response(partial(generate, serving, front_end)), serving.metrics)
