"""The route that counts a request's prompt tokens without generating (``POST
/v1/messages/count_tokens``), for each front-end that has one (conformance/protocols/front_end.py
``CountRoute``): the client's key and body as for generating, the front-end's reading of the body, then
one of the replicas that serve its model counts the core's chat request as that upstream reads it
(proxy/adapters: llama.cpp's template and tokenizer; an OpenAI-compatible server's tokenizer on the
texts, with its template's markup estimated: template_overhead.py), else, and before an estimate, the
upstream's own counting route (the bundled backend's: its template, its vocabulary), whose refusal of
the request itself (a 400: an image its model cannot read) is the client's, as generating would answer
(proxy/sources/prompt_count.py, which a Message's stream counts with too). An upstream that
can count nothing answers 404 in the protocol's words, which the Anthropic SDKs do not retry; one that
answered nothing at all (down, refused, silent) a 502, which they retry: a 404 there told a client the
model could never be counted while its upstream was only restarting."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from conformance import jsoncodec
from conformance.api_errors import APIError
from conformance.protocols.front_end import CountRoute, FrontEnd

from .errors import UpstreamError
from .item_limit import too_many_items
from .observability import exchange_of
from .routing import unrouted
from .serving import Serving, read_json_body, refusal, refused_client
from .sources.prompt_count import prompt_tokens

__all__ = ["count"]


async def count(serving: Serving, front_end: FrontEnd, counting: CountRoute, request: Request) -> Response:
    exchange = exchange_of(request.scope)
    exchange.endpoint = front_end.name
    config = serving.config
    try:
        if (turned_away := refused_client(request, config)) is not None:
            raise turned_away
        raw = await read_json_body(request, config.max_body)
    except APIError as refused:
        return refusal(front_end, refused, exchange)
    if isinstance(raw, Response):
        return raw
    try:
        translation = await counting.read(raw)
    except APIError as refused:
        exchange.take_error(refused)
        return JSONResponse(refused.body, status_code=refused.status)  # worded by the front-end
    body = translation.body
    assert body is not None  # (a refusal is kept only where asked to)
    too_many = too_many_items(body, config.max_items)
    if too_many is not None:
        return refusal(front_end, too_many, exchange)
    route = serving.pool.route(body.get("model"))
    if route is None:
        return refusal(front_end, unrouted(body.get("model")), exchange)
    _, replicas = route
    replica = serving.pool.pick([r for r in replicas if r.available] or replicas, None)
    own_route = (counting.path, jsoncodec.loads(raw))
    tokens, answered, declined = await prompt_tokens(replica, body, own_route, config.first_byte_timeout)
    if declined is not None:  # (the request itself, as the upstream's own counting route read it)
        return refusal(front_end, declined, exchange)
    if tokens is None and not answered:
        silent = UpstreamError.of("the upstream server did not answer a request to count the tokens")
        return refusal(front_end, silent, exchange)
    if tokens is None:
        unknown = "this server cannot count tokens for the model: its upstream has no tokenizer that answered"
        return refusal(front_end, APIError.make(unknown, 404, code="not_found"), exchange)
    return JSONResponse(counting.answer(tokens))
