"""``GET /v1/models`` and ``GET /v1/models/{model}``: the pool's models as OpenAI lists them, each named as
clients may ask for it (no local path, Q09), with the upstream's key cut out of whatever it said."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from conformance import jsoncodec
from conformance.api_errors import REDACTED, APIError, error_response, secret_in_bodies
from conformance.model_names import clean_model_name

from .observability import Exchange, exchange_of
from .served_names import served_name
from .serving import Serving, failed, refused_client

__all__ = ["model", "models"]


async def models(serving: Serving, request: Request) -> Response:
    """``GET /v1/models``: the pool's models as OpenAI lists them, named as clients may ask."""
    exchange = exchange_of(request.scope)
    exchange.endpoint = "models"
    if (turned_away := refused_client(request, serving.config)) is not None:
        return turned_away.response()
    try:
        data = await _listed(serving, exchange)
    except APIError as raised:
        return failed(raised, exchange, serving.config.upstream_api_key)
    return _redacted_json({"object": "list", "data": data}, serving.config.upstream_api_key)


async def model(serving: Serving, request: Request) -> Response:
    """``GET /v1/models/{model}``: one entry of the listing (404 ``model_not_found`` if none)."""
    exchange = exchange_of(request.scope)
    exchange.endpoint = "models"
    if (turned_away := refused_client(request, serving.config)) is not None:
        return turned_away.response()
    name = request.path_params["model"].rstrip("/")
    try:
        data = await _listed(serving, exchange)
    except APIError as raised:
        return failed(raised, exchange, serving.config.upstream_api_key)
    found = next((entry for entry in data if entry["id"] == name), None)
    if found is None:
        return error_response(
            f"The model '{name}' does not exist", 404, code="model_not_found", param="model"
        )
    return _redacted_json(found, serving.config.upstream_api_key)


async def _listed(serving: Serving, exchange: Exchange) -> list[dict[str, Any]]:
    """The models clients may ask for, as OpenAI's entries: each name shown without its local path (Q09,
    counted where the upstream named one so and no alias stands for it)."""
    now = int(time.time())
    alias = serving.config.model_alias
    entries = await serving.pool.models(exchange)
    data = []
    for entry in entries:
        name = served_name(entry)
        if name is None:
            continue
        shown = clean_model_name(name)
        if shown != name and not alias:
            exchange.record(["Q09"])
        created = entry.get("created")
        owned_by = entry.get("owned_by")
        data.append(
            {
                "id": shown,
                "object": "model",
                "created": created if isinstance(created, int) and not isinstance(created, bool) else now,
                "owned_by": owned_by if isinstance(owned_by, str) and owned_by else "conformant",
            }
        )
    return data


def _redacted_json(body: Any, secret: str | None) -> Response:
    """A JSON answer made of what the upstream said, with its key cut out (as from every body)."""
    content = jsoncodec.dumps(body)
    key = secret_in_bodies(secret)
    if key is not None:
        content = content.replace(key, REDACTED.encode())
    return Response(content, media_type="application/json")
