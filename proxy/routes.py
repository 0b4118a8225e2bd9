"""Every route of the proxy, in one table.

The protocols it serves are their front-ends (conformance/protocols/), one line each in
``front_ends``: each front-end's paths get the one generating route (proxy/generation.py), its own
state's routes (the stored Responses) are served behind the API key, and so are its counting route
(proxy/counting.py: ``/v1/messages/count_tokens``) and its WebSocket mode (proxy/sockets.py:
``/v1/responses``). The proxy's own routes follow:
the model listing, health, metrics, and every other ``/v1/*`` path relayed to an upstream.

The generating paths are also looked up directly (``RouteTable.generating``) by the app, ahead of
Starlette's router: the proxy's hot path (proxy/app.py). They are the same handlers as the table's
routes, which are what the ``Allow`` header of a 405 is read from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute

from conformance.protocols import chat, completions, messages, responses
from conformance.protocols.front_end import FrontEnd, StateRoute
from conformance.protocols.responses.store_settings import store_of

from .config import ProxyConfig
from .counting import count
from .generation import generate
from .listing import model, models
from .observability import exchange_of
from .passthrough import PASSTHROUGH_PATH, passthrough
from .serving import Serving, refusal, refused_client
from .sockets import serve_socket

__all__ = ["RouteTable", "front_ends", "route_table"]

Handler = Callable[[Request], Awaitable[Response]]


def front_ends(config: ProxyConfig) -> tuple[FrontEnd, ...]:
    """The protocols the proxy serves: one line each."""
    return (
        chat.front_end(),
        completions.front_end(),
        *responses.front_ends(store_of(config), config.max_body),
        messages.front_end(),
    )


@dataclass(frozen=True, slots=True)
class RouteTable:
    routes: list[BaseRoute]
    """Every route, in the order Starlette matches them."""
    generating: dict[str, Handler]
    """``POST`` to a front-end's path (with and without its trailing slash): its generating route."""


def route_table(serving: Serving) -> RouteTable:
    routes: list[BaseRoute] = []
    generating: dict[str, Handler] = {}
    for front_end in serving.front_ends:
        handler: Handler = partial(generate, serving, front_end)
        for path in (path for own in front_end.paths for path in _slashed(own)):
            generating[path] = handler
            routes.append(Route(path, handler, methods=["POST"]))
        for state in front_end.routes:
            guarded: Handler = partial(_state_route, serving, front_end, state)
            routes.append(Route(state.path, guarded, methods=list(state.methods)))
        if front_end.counting is not None:
            counter: Handler = partial(count, serving, front_end, front_end.counting)
            # With its trailing slash too, as the generating paths: without, it fell to the relay of
            # other paths, and the bundled backend's redirect reached the client (a 307 without a body).
            routes += [Route(path, counter, methods=["POST"]) for path in _slashed(front_end.counting.path)]
        if front_end.socket is not None:
            socket = partial(serve_socket, serving, front_end.socket)
            routes.append(WebSocketRoute(front_end.socket.path, socket))
    routes += [
        Route("/v1/models", partial(models, serving), methods=["GET"]),
        Route("/v1/models/", partial(models, serving), methods=["GET"]),
        Route("/v1/models/{model:path}", partial(model, serving), methods=["GET"]),
        Route("/health", _health, methods=["GET"]),
        Route("/metrics", partial(_metrics, serving), methods=["GET"]),
        Route(
            PASSTHROUGH_PATH,
            partial(passthrough, serving),
            methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        ),
    ]
    return RouteTable(routes, generating)


def _slashed(path: str) -> tuple[str, str]:
    """A path a client may write with its trailing slash: both are served."""
    return path, path + "/"


async def _state_route(
    serving: Serving, front_end: FrontEnd, state: StateRoute, request: Request
) -> Response:
    """A route of a protocol's own state (``GET /v1/responses/{id}``), behind the API key: answered from
    the proxy's store, never the upstream's."""
    exchange_of(request.scope).endpoint = front_end.name
    if (turned_away := refused_client(request, serving.config)) is not None:
        return refusal(front_end, turned_away, exchange_of(request.scope))
    return await state.handle(request)


async def _health(_: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _metrics(serving: Serving, _: Request) -> Response:
    return Response(generate_latest(serving.metrics.exposed()), media_type=CONTENT_TYPE_LATEST)
