"""Every route of the bundled backend, in one table: the protocols it serves are their front-ends
(conformance/protocols/), one line each in ``front_ends`` as in the proxy's table (proxy/routes.py); each
front-end's paths get the one generating route (backend/generation.py), its own state's routes (the
stored Responses), its counting route (backend/counting.py) and its WebSocket mode (``/v1/responses``,
each turn answered by the generating route: issue 38). The model listing and health follow."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute, request_response
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from backend.counting import count
from backend.generation import SAMPLING_DEFAULTS, Generation, generate
from conformance.api_errors import error_response
from conformance.browser_origin import refused_origin
from conformance.protocols import chat, completions, messages, responses
from conformance.protocols.front_end import FrontEnd, SocketRoute
from conformance.protocols.responses.store_base import Store

__all__ = ["front_ends", "route_table"]

Handler = Callable[[Request], Awaitable[Response]]


def front_ends(store: Store) -> tuple[FrontEnd, ...]:
    """The protocols the backend serves: one line each."""
    return (
        chat.front_end(),
        completions.front_end(),
        *responses.front_ends(store),
        messages.front_end(),
    )


def route_table(generation: Generation, served: tuple[FrontEnd, ...]) -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    for front_end in served:
        handler = _no_page(front_end, partial(generate, generation, front_end))
        routes += [Route(path, handler, methods=["POST"]) for path in front_end.paths]
        routes += [
            Route(state.path, _no_page(front_end, state.handle), methods=list(state.methods))
            for state in front_end.routes
        ]
        if front_end.counting is not None:
            counter = _no_page(front_end, partial(count, generation, front_end, front_end.counting))
            routes.append(Route(front_end.counting.path, counter, methods=["POST"]))
        if front_end.socket is not None:
            socket = partial(_socket, generation, front_end.socket)
            routes.append(WebSocketRoute(front_end.socket.path, socket))
    routes += [
        Route("/v1/models", partial(_models, generation), methods=["GET"]),
        Route("/v1/models/{model:path}", partial(_model, generation), methods=["GET"]),
        Route("/health", partial(_health, generation), methods=["GET"]),
        Route("/props", partial(_props, generation), methods=["GET"]),
    ]
    return routes


def _no_page(front_end: FrontEnd, handler: Handler) -> Handler:
    """``handler``, refusing a browser page's request that does something (not a GET) with a 403 in
    the protocol's words: the backend has no CORS to allow a page (conformance/browser_origin.py)."""

    async def from_no_page(request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            refused = refused_origin(request.headers, (), "Requests")
            if refused is not None:
                return JSONResponse(front_end.error(refused.body, refused.status), status_code=refused.status)
        return await handler(request)

    return from_no_page


async def _props(generation: Generation, _: Request) -> Response:
    """What the server says of itself, for a proxy in front: the sampling a request that names none gets
    (a Response states it; the proxy asked the API's 1.0 / 1.0 of an upstream that says nothing, and a
    base model wrote longer at those), and that the model reads text only. Not in llama.cpp's shape
    (``default_generation_settings``): a proxy would take the backend for a llama.cpp server, whose
    native routes it does not have. ``reports_stopping_word``: a chat request with ``verbose`` has the
    stop sequence met named in its answer (backend/requests.py). ``concurrent``: it serves other requests
    beside a stream (continuous batching), so a proxy may ask a count beside the answer."""
    modalities = {"vision": False, "audio": False, "video": False}
    return JSONResponse(
        {
            "sampling": SAMPLING_DEFAULTS,
            "modalities": modalities,
            "reports_stopping_word": True,
            "concurrent": True,
        }
    )


async def _socket(generation: Generation, socket: SocketRoute, websocket: WebSocket) -> None:
    # (no browser page: the backend has no CORS to allow one)
    refused = refused_origin(websocket.headers, (), "WebSocket connections")
    if refused is not None:
        await websocket.send_denial_response(refused.response())
        return
    await socket.serve(websocket, partial(_answering, generation))


def _answering(generation: Generation, front_end: FrontEnd) -> ASGIApp:
    """The generating route of ``front_end`` as the app of one WebSocket turn's request."""
    return request_response(partial(generate, generation, front_end))


def _model_card(generation: Generation) -> dict[str, object]:
    backend = generation.backend
    return {"id": backend.model_id, "object": "model", "created": backend.created, "owned_by": "conformant"}


async def _models(generation: Generation, _: Request) -> Response:
    return JSONResponse({"object": "list", "data": [_model_card(generation)]})


async def _model(generation: Generation, request: Request) -> Response:
    name = request.path_params["model"]
    if name != generation.backend.model_id:
        return error_response(
            f"The model '{name}' does not exist", 404, param="model", code="model_not_found"
        )
    return JSONResponse(_model_card(generation))


async def _health(generation: Generation, _: Request) -> Response:
    return JSONResponse({"status": "ok", **generation.backend.engine.health()})
