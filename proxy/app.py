"""The Starlette application: the route table (proxy/routes.py) with the middleware around it (the access
log and metrics, CORS, the guard against the proxy's own faults), and the pool's life."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from conformance.api_errors import APIError, error_response

from . import graceful
from .config import ProxyConfig
from .observability import Metrics, ObservabilityMiddleware
from .routes import front_ends, route_table
from .routing import Router, reload_on_sighup, routing_of
from .serving import Serving, unknown_url

__all__ = ["create_app"]

Handler = Callable[[Request], Awaitable[Response]]


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (an unknown path: 404; a method the route does not take: 405, with its
    Allow header) as errors of the protocol the path belongs to (OpenAI's outside the front-ends')."""
    assert isinstance(exc, HTTPException)
    path = request.url.path
    if exc.status_code == 404:
        error = unknown_url(request)
    else:
        error = APIError.make(f"{exc.detail}: {request.method} {path}", exc.status_code)
    serving: Serving = request.app.state.serving
    response = serving.refused_at(path, error)
    response.headers.update(exc.headers or {})
    return response


async def _internal_error(_: Request, exc: Exception) -> Response:
    """A bug in the proxy: an OpenAI error for the client; the traceback goes to the server log only."""
    return error_response("internal error in the proxy", 500)


class _CORS(CORSMiddleware):
    """Starlette's CORS, with a refused preflight answered as an OpenAI error like every other refusal."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        message = f"CORS preflight refused: {bytes(response.body).decode()}"
        refused = error_response(message, 400, code="cors_refused")
        refused.headers.update({k: v for k, v in response.headers.items() if k.startswith("vary")})
        return refused


def _wrapped(app: ASGIApp, middleware: Sequence[Middleware]) -> ASGIApp:
    for cls, args, kwargs in reversed(middleware):
        app = cls(app, *args, **kwargs)
    return app


class _ProxyApplication(Starlette):
    """Starlette, with the route table's generating paths looked up directly: the proxy's hot path.

    Starlette's router and exception middleware cost about 20 µs of CPU per request and one more
    wrapper call for every chunk sent; on a loaded machine each costs two to three times that, and the
    time to first token pays it. A ``POST`` to a generating path gets the same middleware (the access
    log and metrics, CORS, the guard against the proxy's own faults) around a direct call of the
    table's handler for it; every other request goes through Starlette's router, over the same table.
    """

    def __init__(self, generating: dict[str, Handler], **options: Any) -> None:
        super().__init__(**options)
        self._generating = generating

        async def generating_route(scope: Scope, receive: Receive, send: Send) -> None:
            response = await generating[scope["path"]](Request(scope, receive))
            await response(scope, receive, send)

        self._direct = _wrapped(generating_route, self.user_middleware)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self._generating:
            scope["app"] = self
            await self._direct(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def create_app(config: ProxyConfig) -> Starlette:
    """The proxy as an ASGI app."""
    metrics = Metrics()
    pool = Router(config, routing_of(config), metrics.registry)
    serving = Serving(config, pool, metrics, front_ends(config))
    for front_end in serving.front_ends:
        store = getattr(front_end, "store", None)
        if store is not None:
            store.redact = serving.without_keys

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await pool.start()
        reloading = reload_on_sighup(pool, config.config_file)
        giving_back = graceful.on_second_stop(config.workers)
        try:
            yield
        finally:
            giving_back()
            reloading()
            await pool.aclose()
            await asyncio.gather(*(front_end.aclose() for front_end in serving.front_ends))
            metrics.retire()

    middleware = [Middleware(ObservabilityMiddleware, metrics=metrics)]
    if config.cors_origins:
        middleware.append(
            Middleware(
                _CORS,
                allow_origins=list(config.cors_origins),
                allow_methods=["*"],
                allow_headers=["*"],
                expose_headers=["x-request-id", "request-id"],  # so that browser code can read it
            )
        )
    # Inside the access log, so that a 500 is logged and counted and carries its x-request-id.
    middleware.append(Middleware(ServerErrorMiddleware, handler=_internal_error))
    table = route_table(serving)
    app = _ProxyApplication(
        table.generating,
        routes=table.routes,
        middleware=middleware,
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.serving = serving
    return app
