"""The OpenAI-facing Starlette app of the bundled backend: its route table (backend/routes.py), errors as
OpenAI error bodies, and its store's life."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from backend.generation import Generation
from backend.reasoning import markers_in_template
from backend.routes import front_ends, route_table
from backend.service import Backend
from conformance.api_errors import error_response
from conformance.protocols.responses.store_base import Store
from conformance.protocols.responses.store_settings import default_store

__all__ = ["create_app"]

log = logging.getLogger("conformant.backend")


def create_app(
    backend: Backend, *, on_shutdown: Callable[[], None] | None = None, store: Store | None = None
) -> Starlette:
    """The backend's app; ``store``: where stored Responses are kept (default: the default file, opened
    when first used)."""
    served = front_ends(store or default_store())
    generation = Generation(backend, markers_in_template(backend.template.source))

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        message = (
            "method not allowed" if status == 405 else f"no route for {request.method} {request.url.path}"
        )
        return error_response(message if status in (404, 405) else "internal server error", status)

    async def server_error(_: Request, exc: Exception) -> Response:
        log.exception("unhandled error", exc_info=exc)
        return error_response("internal server error", 500)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await asyncio.gather(*(front_end.aclose() for front_end in served))
        if on_shutdown is not None:
            on_shutdown()

    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        HTTPException: not_found,
        Exception: server_error,
    }
    return Starlette(routes=route_table(generation, served), exception_handlers=handlers, lifespan=lifespan)
