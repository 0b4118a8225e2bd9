"""Other ``/v1/*`` paths (embeddings, tokenize, ...): the route that sends them to an upstream of the pool
unchanged, its answer relayed (proxy/relay.py). Auth and the upstream key still apply; a path the
proxy answers itself, asked with another method, is a 405 naming the methods it takes."""

from __future__ import annotations

from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from conformance import jsoncodec
from conformance.api_errors import APIError

from .observability import Exchange, exchange_of
from .relay import has_dot_segment, relay
from .routing import unrouted
from .routing.replica import Replica
from .served_names import ServedNames
from .serving import NOT_FORWARDED, Serving, forward_headers, read_body, refused_client, unknown_url
from .writer import HeldResponse

__all__ = ["PASSTHROUGH_PATH", "passthrough"]

PASSTHROUGH_PATH = "/v1/{rest:path}"
_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


async def passthrough(serving: Serving, request: Request) -> Response:
    """Another ``/v1/*`` path, sent to the upstream as it is (see the module's docstring)."""
    scope = request.scope
    path = scope["path"]
    if (turned_away := refused_client(request, serving.config)) is not None:
        return serving.refused_at(path, turned_away)
    if has_dot_segment(path):
        return serving.refused_at(path, unknown_url(request))
    allowed = _own_methods(request)
    if allowed:  # another method on a path the proxy answers itself
        not_allowed = APIError.make(f"Method Not Allowed: {request.method} {path}", 405)
        response = serving.refused_at(path, not_allowed)
        response.headers["allow"] = allowed
        return response
    try:
        raw = await read_body(request, serving.config.max_body)
    except APIError as refused:
        return serving.refused_at(path, refused)
    if isinstance(raw, Response):
        return raw
    exchange = exchange_of(scope)
    routed = _replica(serving, path, raw, exchange)
    if isinstance(routed, Response):
        return routed
    chosen, model = routed
    upstream, secret = chosen.upstream, chosen.config.upstream_api_key
    content_type = request.headers.get("content-type", "")
    raw, renamed = await _with_served_model(chosen.names, raw, content_type, model)
    target = scope.get("raw_path") or request.url.path.encode()  # as the client wrote it
    if scope["query_string"]:
        target += b"?" + scope["query_string"]
    headers = forward_headers(scope, NOT_FORWARDED)
    open_upstream = partial(upstream.forward, request.method, target, raw, headers)
    run = partial(
        relay,
        open_upstream=open_upstream,
        exchange=exchange,
        secret=secret,
        head_only=request.method == "HEAD",
        renamed=renamed,
        client_location=upstream.client_location,
        worded=None if (front_end := serving.front_end_at(path)) is None else front_end.error,
    )
    return HeldResponse(run, exchange)


def _own_methods(request: Request) -> str | None:
    """The methods the proxy answers on the request's path itself (its ``Allow`` header), if it answers
    any: read off the app's own routes, the one table (proxy/routes.py)."""
    path = request.scope["path"]
    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, Route) and route.path != PASSTHROUGH_PATH and route.path_regex.match(path):
            methods |= route.methods or set()
    return ", ".join(m for m in _METHOD_ORDER if m in methods) or None


def _replica(serving: Serving, path: str, raw: bytes, exchange: Exchange) -> tuple[Replica, Any] | Response:
    """The upstream a pass-through request goes to: one of its ``model``'s replicas (404 for a model
    none serves), or any ready replica for a body naming none; and the model as the file names it (an
    alias's model: an alias was sent on as the client wrote it)."""
    pool = serving.pool
    model = _body_model(raw)
    if model is not None:
        route = pool.route(model)
        if route is None:
            return serving.refused_at(path, unrouted(model))
        model, replicas = route
    else:
        replicas = list(pool.replicas.values())
    ready = [r for r in replicas if r.available] or replicas
    chosen = pool.pick(ready, None)
    if not pool.catch_all:  # which of a file's replicas took it; one --upstream is no news
        exchange.upstream = chosen.label
    return chosen, model


def _body_model(raw: bytes) -> str | None:
    if b'"model"' not in raw:
        return None
    try:
        body = jsoncodec.loads(raw)
    except ValueError:
        return None
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None


async def _with_served_model(
    names: ServedNames, raw: bytes, content_type: str, routed: Any
) -> tuple[bytes, tuple[str, str] | None]:
    """A JSON body with its ``model`` named as the upstream serves ``routed`` (the model the route
    took it for), and (the served name, the asked name) when they differ."""
    if "json" not in content_type or b'"model"' not in raw:
        return raw, None
    try:
        body: Any = jsoncodec.loads(raw)
    except ValueError:
        return raw, None  # the upstream's to refuse
    if not isinstance(body, dict):
        return raw, None
    model = body.get("model")
    served = await names.upstream_name(routed if routed is not None else model)
    if served == model or not isinstance(served, str) or not isinstance(model, str):
        return raw, None
    return jsoncodec.dumps({**body, "model": served}), (served, model)
