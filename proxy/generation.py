"""The route of every protocol that generates (chat completions, completions, the Responses API...): one
function, served for each front-end of the table (proxy/routes.py).

A request goes through these steps, whatever its protocol and however many upstreams serve it:

1. the client's key, and its body within ``--max-body``;
2. the front-end's translation: the client's body checked and turned into the core's request (a chat or
   completions body), its errors worded in the protocol's terms; kept for a native upstream where one of
   the pool's may take what the translation refuses (conformance/protocols/front_end.py);
3. what the request asks, read once (``RequestInfo``), and the fan-out limit (``--max-fan-out``);
4. the pool's replicas for its model (a 404 for a model no upstream serves; a pool of one serves every
   model), and the request's plan: its leg on whichever replica takes it (proxy/sources/plan.py);
5. the response writer (proxy/writer.py), which holds the status until the first output of the
   failover source (proxy/sources/failover.py), and writes it through the leg's output.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Send

from conformance.api_errors import APIError
from conformance.protocols.front_end import FrontEnd, Translation
from conformance.request_info import RequestInfo

from .item_limit import too_many_items
from .observability import exchange_of
from .routing import prefix_key, unrouted
from .serving import (
    NOT_FORWARDED_TO_GENERATION,
    Serving,
    forward_headers,
    read_json_body,
    refusal,
    refused_client,
)
from .sources.builder import fan_out_refusal
from .sources.failover import FailoverSource
from .sources.plan import RequestPlan
from .writer import HeldResponse, serve_source

__all__ = ["generate"]


async def generate(serving: Serving, front_end: FrontEnd, request: Request) -> Response:
    """``POST`` to one of ``front_end``'s paths (see the module's docstring)."""
    exchange = exchange_of(request.scope)
    exchange.endpoint = front_end.name
    config = serving.config
    if (turned_away := refused_client(request, config)) is not None:
        return refusal(front_end, turned_away, exchange)
    try:
        raw = await read_json_body(request, config.max_body)
    except APIError as refused:
        return refusal(front_end, refused, exchange)
    if isinstance(raw, Response):
        return raw
    pool = serving.pool
    try:
        native = front_end.native_path is not None and _may_be_native(serving, front_end)
        translation = await front_end.translate(raw, keep_refusal=native)
    except APIError as refused:
        exchange.take_error(refused)
        return JSONResponse(refused.body, status_code=refused.status)  # worded by the front-end
    body = translation.body
    too_many = too_many_items(body, config.max_items) if body is not None else None
    if too_many is not None:
        return refusal(front_end, too_many, exchange)
    info = _request_info(serving, front_end, translation)
    if body is not None and config.fan_out:
        limit = fan_out_refusal(front_end.endpoint, body, info, config.max_fan_out, "--max-fan-out")
        if limit is not None:
            return refusal(front_end, limit, exchange)
    model = body.get("model") if body is not None else translation.model
    route = pool.route(model)
    if route is None:
        return refusal(front_end, unrouted(model), exchange)
    served, replicas = route
    headers = forward_headers(request.scope, NOT_FORWARDED_TO_GENERATION)
    plan = RequestPlan(front_end, translation, info, headers, served)
    chars = pool.routing.options.prefix_chars
    key = prefix_key(body, chars) if chars and body is not None else None
    source = FailoverSource(pool, replicas, key, plan, exchange, config.first_byte_timeout)

    async def run(send: Send) -> None:
        await serve_source(
            send, source, info, exchange, config.first_byte_timeout, config.upstream_api_key, front_end.error
        )

    return HeldResponse(run, exchange, lambda error: source.output.cut(error), front_end.error)


def _may_be_native(serving: Serving, front_end: FrontEnd) -> bool:
    """Whether a replica of the pool may send the protocol to its own endpoint, which may take what
    the translation refuses (``--responses native``, a file's key): the translation's refusal waits
    for the replica's choice then."""
    if front_end.native_path is None:
        return False
    name = front_end.name
    return any(
        (replica.entry.native.get(name) or replica.config.native_mode(name)) != "translate"
        for replica in serving.pool.replicas.values()
    )


def _request_info(serving: Serving, front_end: FrontEnd, translation: Translation) -> RequestInfo:
    """What the request asks for; the model reported is ``--model-alias`` when given, else the
    request's, cleaned."""
    config = serving.config
    body: dict[str, Any] = translation.body or {"model": translation.model, "stream": translation.stream}
    return RequestInfo.from_body(
        front_end.endpoint,
        body,
        alias=config.model_alias,
        reasoning_field=config.reasoning_field,
        names_stop=translation.names_stop,
    )
