"""The Starlette application: routes, auth, body limits, and the wiring of upstream, adapter and sources."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from conformance.openai_errors import error_body
from conformance.responses_state import (
    ResponseStore,
    delete_response,
    input_items,
    list_input_items,
    previous_items,
    retrieve_response,
    store_of,
)
from conformance.responses_translation import TranslationError, responses_error, translate_request

from . import jsoncodec
from .adapters import Adapter, LlamaCppAdapter, OpenAIAdapter, is_llamacpp_props
from .adapters.base import fitted_request
from .config import ProxyConfig
from .errors import REDACTED, ProxyError, secret_in_bodies
from .normalizer import Endpoint, RequestInfo, clean_model_name
from .observability import Exchange, Metrics, ObservabilityMiddleware, exchange_of
from .passthrough import connection_options, has_dot_segment, relay
from .request_sources import SourceBuilder, fan_out_prompts
from .request_validation import parse_json_object, parse_request, validate_request
from .respond import HeldResponse, serve_source
from .responses import NativeResponses, ResponsesOutput, StoredAs, serve_native
from .routing import RoutedSource, Router, load_routing_file, prefix_key, reload_on_sighup
from .routing.replica import Replica
from .served_names import ServedNames, served_name
from .source import Source
from .upstream import Upstream

__all__ = ["create_app"]

# Not forwarded: hop-by-hop, the client's credentials (the upstream gets its own key), and what the
# proxy sets itself for the upstream request.
_NOT_FORWARDED = frozenset(
    {
        b"host",
        b"content-length",
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"authorization",
        b"api-key",
        b"x-api-key",
        b"accept-encoding",
        b"upgrade",
        b"te",
        b"trailer",
        b"proxy-authorization",
        b"cookie",
        # The proxy answers browsers by its own CORS policy (--cors-origin): an upstream that allows any
        # origin (llama-server echoes it back) must not see one, and its CORS headers are not relayed.
        b"origin",
    }
)
_NOT_FORWARDED_TO_COMPLETIONS = _NOT_FORWARDED | {b"content-type", b"accept", b"user-agent"}


def _forward_headers(scope: Scope, dropped: frozenset[bytes]) -> list[tuple[bytes, bytes]]:
    """The client's headers that the upstream gets too (names are lower case in ASGI): not ``dropped``,
    and not those the client's ``Connection`` header names (hop-by-hop, RFC 9110 section 7.6.1)."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    listed = connection_options(headers)
    return [(k, v) for k, v in headers if k not in dropped and k not in listed]


@dataclass(slots=True)
class _Context:
    config: ProxyConfig
    upstream: Upstream
    adapter: Adapter
    metrics: Metrics
    names: ServedNames
    responses: NativeResponses
    store: ResponseStore
    router: Router | None = None
    """The upstreams of ``--config``; None: the one ``--upstream`` (``upstream``, ``adapter``, ``names``)."""


def _error(message: str, status: int, code: str | None = None, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, status, code=code, param=param), status_code=status)


def _authorized(request: Request, api_key: str | None) -> bool:
    if not api_key:
        return True
    header = request.headers.get("authorization", "")
    supplied = (
        header[7:].strip() if header.lower().startswith("bearer ") else request.headers.get("api-key", "")
    )
    return hmac.compare_digest(supplied.encode(), api_key.encode())


async def _read_body(request: Request, limit: int) -> bytes | Response:
    """The request's body, or the response that ends it: 413 above ``limit``; 499 (sent to no one,
    logged and counted) when the client leaves while sending it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return _error(f"request body larger than {limit} bytes", 413, "request_too_large")
    parts: list[bytes] = []
    size = 0
    while True:  # receive() itself: Request.stream() is an async generator, which costs more per request
        message = await request.receive()
        if message["type"] == "http.disconnect":
            exchange_of(request.scope).disconnected = True
            return Response(status_code=499)
        part = message.get("body", b"")
        size += len(part)
        if size > limit:
            return _error(f"request body larger than {limit} bytes", 413, "request_too_large")
        parts.append(part)
        if not message.get("more_body", False):
            return b"".join(parts)


def _fan_out_refused(
    endpoint: Endpoint, body: dict[str, Any], info: RequestInfo, limit: int, flag: str
) -> ProxyError | None:
    """A 400 for a request that would fan out to more than ``limit`` upstream requests (prompts x n).

    The limits: ``--max-fan-out`` (a 1 KB request of 200 prompts and n 128 opened 25,600 at once and
    ran the proxy out of files), and for requests sent at once, ``--max-upstream-connections``: they
    are in flight together (proxy/admission.py)."""
    prompts = len(fan_out_prompts(endpoint, body))
    if prompts * info.n <= limit:
        return None
    param = "prompt" if prompts > 1 else "n"
    return ProxyError.make(
        f"Invalid '{param}': {prompts} prompt(s) x n={info.n} is {prompts * info.n} upstream requests; "
        f"this server sends at most {limit} for one request ({flag}).",
        400,
        code="fan_out_too_large",
        param=param,
    )


async def _completion(ctx: _Context, endpoint: Endpoint, request: Request) -> Response:
    exchange = exchange_of(request.scope)
    exchange.endpoint = endpoint
    if not _authorized(request, ctx.config.api_key):
        return _error("invalid or missing API key", 401, "invalid_api_key")
    raw = await _read_body(request, ctx.config.max_body)
    if isinstance(raw, Response):
        return raw
    try:
        body = parse_request(endpoint, raw)
    except ProxyError as exc:
        return JSONResponse(exc.body, status_code=exc.status)
    prepared = await _prepared(ctx, endpoint, body, request)
    if isinstance(prepared, Response):
        return prepared
    source, info = prepared

    async def run(send: Send) -> None:
        config = ctx.config
        await serve_source(send, source, info, exchange, config.first_byte_timeout, config.upstream_api_key)

    return HeldResponse(run, exchange)


async def _prepared(
    ctx: _Context, endpoint: Endpoint, body: dict[str, Any], request: Request
) -> tuple[Source, RequestInfo] | Response:
    """The source that answers a validated completion ``body``, and what the request asks for; or the
    response that refuses it. Every route that generates goes through here (``/v1/responses`` too)."""
    exchange = exchange_of(request.scope)
    info = RequestInfo.from_body(
        endpoint, body, alias=ctx.config.model_alias, reasoning_field=ctx.config.reasoning_field
    )
    if ctx.config.fan_out and (
        refused := _fan_out_refused(endpoint, body, info, ctx.config.max_fan_out, "--max-fan-out")
    ):
        return JSONResponse(refused.body, status_code=refused.status)
    headers = _forward_headers(request.scope, _NOT_FORWARDED_TO_COMPLETIONS)
    if ctx.router is not None:
        return _routed(ctx, ctx.router, endpoint, body, info, headers, exchange)
    upstream, adapter, names = ctx.upstream, ctx.adapter, ctx.names
    built = await _upstream_source(ctx.config, upstream, adapter, names, endpoint, body, info, headers)
    if isinstance(built, ProxyError):
        return _failed(built, exchange, ctx.config.upstream_api_key)
    return built, info


async def _upstream_source(
    config: ProxyConfig,
    upstream: Upstream,
    adapter: Adapter,
    names: ServedNames,
    endpoint: Endpoint,
    body: dict[str, Any],
    info: RequestInfo,
    headers: list[tuple[bytes, bytes]],
) -> Source | ProxyError:
    """The source that sends ``body`` to ``upstream``, or the adapter's refusal of it."""
    body = fitted_request(upstream.traits, body, info)
    model = body.get("model")
    served = await names.upstream_name(model)
    if served != model:
        body = {**body, "model": served}  # answers still name the model as asked
    declined = await adapter.refusal(upstream, endpoint, body)
    if declined is not None:
        return declined
    builder = SourceBuilder(
        upstream,
        adapter,
        endpoint,
        info,
        headers,
        max_line_bytes=config.max_line_bytes,
        first_byte_timeout=config.first_byte_timeout,
        fan_out=config.fan_out,
    )
    if builder.fans_out(body):
        if upstream.traits.serial is None:
            # Before the first fan-out: fanned out at once, llama-cpp-python's streams break each other off.
            await names.learn_serial()
        if not upstream.traits.serial and (
            refused := _fan_out_refused(
                endpoint, body, info, config.max_upstream_connections, "--max-upstream-connections"
            )
        ):
            return refused
    return builder.source(body)


def _routed(
    ctx: _Context,
    router: Router,
    endpoint: Endpoint,
    body: dict[str, Any],
    info: RequestInfo,
    headers: list[tuple[bytes, bytes]],
    exchange: Exchange,
) -> tuple[Source, RequestInfo] | Response:
    """The source of a request on a routed proxy (``--config``): a 404 for a model no upstream serves,
    before any upstream is asked; else a replica of the model's group, another if it fails first."""
    model = body.get("model")
    route = router.route(model)
    if route is None:
        return _error(f"The model '{model}' does not exist", 404, "model_not_found", "model")
    served, replicas = route
    if served != model:
        body = {**body, "model": served}  # an alias: the upstreams know the model by its name

    async def build(replica: Replica) -> Source | ProxyError:
        return await _upstream_source(
            replica.config, replica.upstream, replica.adapter, replica.names, endpoint, body, info, headers
        )

    key = prefix_key(body, router.routing.options.prefix_chars)
    return RoutedSource(router, served, replicas, key, build, exchange), info


async def _responses(ctx: _Context, request: Request) -> Response:
    """``POST /v1/responses``: translated to a chat request that runs through the chat route's pipeline
    (validation, repairs, emulations, limits, error mapping), its normalized output translated back;
    or, by ``--responses``, the upstream's own endpoint (proxy/responses/native.py)."""
    exchange = exchange_of(request.scope)
    exchange.endpoint = "responses"
    if not _authorized(request, ctx.config.api_key):
        return _error("invalid or missing API key", 401, "invalid_api_key")
    raw = await _read_body(request, ctx.config.max_body)
    if isinstance(raw, Response):
        return raw
    if ctx.router is None and await ctx.responses.native(ctx.upstream):
        return await _native_responses(ctx, request, raw)
    try:
        # The Responses request as the judge reads it first: the translation echoes settings into the
        # Response, and an invalid one (``truncation: "middle"``) made a Response its schema refuses.
        asked = parse_request("responses", raw)
    except ProxyError as exc:
        return JSONResponse(exc.body, status_code=exc.status)
    previous = await previous_items(ctx.store, asked)  # the conversation previous_response_id names
    if isinstance(previous, Response):
        return previous
    try:
        translation = translate_request(asked, previous)
        validate_request("chat", translation.chat)
    except TranslationError as refused:
        return _error(refused.message, refused.status, refused.code, refused.param)
    except ProxyError as exc:
        return JSONResponse(responses_error(exc.body), status_code=exc.status)
    prepared = await _prepared(ctx, "chat", translation.chat, request)
    if isinstance(prepared, Response):
        return prepared
    source, info = prepared
    output = ResponsesOutput(translation, info.model, ctx.store, [*previous, *input_items(asked)])

    async def run(send: Send) -> None:
        config = ctx.config
        await serve_source(
            send, source, info, exchange, config.first_byte_timeout, config.upstream_api_key, output
        )

    return HeldResponse(run, exchange, output.cut)


async def _models(ctx: _Context, request: Request) -> Response:
    """``GET /v1/models``: the upstream's models as OpenAI lists them, named as clients may ask."""
    exchange = exchange_of(request.scope)
    exchange.endpoint = "models"
    if not _authorized(request, ctx.config.api_key):
        return _error("invalid or missing API key", 401, "invalid_api_key")
    try:
        data = await _listed_models(ctx, exchange)
    except ProxyError as raised:
        return _failed(raised, exchange, ctx.config.upstream_api_key)
    return _redacted_json({"object": "list", "data": data}, ctx.config.upstream_api_key)


async def _model(ctx: _Context, request: Request) -> Response:
    """``GET /v1/models/{model}``: one entry of the listing (404 ``model_not_found`` if none)."""
    exchange = exchange_of(request.scope)
    exchange.endpoint = "models"
    if not _authorized(request, ctx.config.api_key):
        return _error("invalid or missing API key", 401, "invalid_api_key")
    name = request.path_params["model"].rstrip("/")
    try:
        data = await _listed_models(ctx, exchange)
    except ProxyError as raised:
        return _failed(raised, exchange, ctx.config.upstream_api_key)
    found = next((entry for entry in data if entry["id"] == name), None)
    if found is None:
        return _error(f"The model '{name}' does not exist", 404, "model_not_found", "model")
    return _redacted_json(found, ctx.config.upstream_api_key)


async def _listed_models(ctx: _Context, exchange: Exchange) -> list[dict[str, Any]]:
    """The models clients may ask for: the alias alone (no upstream needed), or the upstream's listing
    with each name shown without its local path (Q09); the upstream's failure as a ProxyError."""
    now = int(time.time())
    alias = ctx.config.model_alias
    if ctx.router is not None:  # the models of every upstream in the file, and their aliases
        entries: list[Any] = [{"id": name} for name in ctx.router.listing()]
    else:
        entries = [{"id": alias}] if alias else await _upstream_listing(ctx, exchange)
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


async def _upstream_listing(ctx: _Context, exchange: Exchange) -> list[Any]:
    try:
        async with asyncio.timeout(min(_LISTING_TIMEOUT, ctx.config.first_byte_timeout)):
            stream = await ctx.upstream.forward("GET", b"/v1/models", b"", [])
            try:
                exchange.upstream_status = stream.status
                if stream.status >= 400:
                    raise await stream.error()
                raw = await stream.read_all(_MAX_LISTING)
            finally:
                await stream.aclose()
    except TimeoutError:
        raise ProxyError.timeout("the upstream server did not list its models in time") from None
    try:
        answer = jsoncodec.loads(raw)
    except ValueError:
        answer = None
    entries = answer.get("data") if isinstance(answer, dict) else None
    ctx.names.learn(entries)
    if not isinstance(entries, list):
        raise ProxyError.make("the upstream server did not list its models", 502)
    return entries


def _failed(raised: ProxyError, exchange: Exchange, secret: str | None) -> Response:
    error = raised.redacted(secret)
    exchange.take_error(error)
    response = JSONResponse(error.body, status_code=error.status)
    response.raw_headers.extend(error.headers)  # Retry-After
    return response


def _without_keys(ctx: _Context, text: str) -> str:
    """``text`` (a stored Response or its input, read back as JSON) with every upstream key the proxy
    holds cut out: the command line's and, routed, each replica's from the file. (A key is letters,
    digits, dashes: written the same inside JSON.)"""
    keys = {ctx.config.upstream_api_key}
    if ctx.router is not None:
        keys.update(replica.config.upstream_api_key for replica in ctx.router.replicas.values())
    for key in keys:
        if (cut := secret_in_bodies(key)) is not None:
            text = text.replace(cut.decode(), REDACTED)
    return text


def _redacted_json(body: Any, secret: str | None) -> Response:
    """A JSON answer made of what the upstream said, with its key cut out (as from every body)."""
    content = jsoncodec.dumps(body)
    key = secret_in_bodies(secret)
    if key is not None:
        content = content.replace(key, REDACTED.encode())
    return Response(content, media_type="application/json")


async def _passthrough(ctx: _Context, request: Request) -> Response:
    """Other /v1/* paths go to the upstream unchanged (auth and the upstream key still apply)."""
    if not _authorized(request, ctx.config.api_key):
        return _error("invalid or missing API key", 401, "invalid_api_key")
    scope = request.scope
    if has_dot_segment(scope["path"]):
        return _unknown_url(request)
    allowed = _own_methods(scope["path"])
    if allowed:  # another method on a path the proxy answers itself
        response = _error(f"Method Not Allowed: {request.method} {scope['path']}", 405)
        response.headers["allow"] = allowed
        return response
    raw = await _read_body(request, ctx.config.max_body)
    if isinstance(raw, Response):
        return raw
    exchange = exchange_of(scope)
    upstream, names, secret = ctx.upstream, ctx.names, ctx.config.upstream_api_key
    if ctx.router is not None:
        chosen = _routed_passthrough(ctx.router, raw, exchange)
        if isinstance(chosen, Response):
            return chosen
        upstream, names, secret = chosen.upstream, chosen.names, chosen.config.upstream_api_key
    raw, renamed = await _with_served_model(names, raw, request.headers.get("content-type", ""))
    target = scope.get("raw_path") or request.url.path.encode()  # as the client wrote it
    if scope["query_string"]:
        target += b"?" + scope["query_string"]
    headers = _forward_headers(scope, _NOT_FORWARDED)
    open_upstream = partial(upstream.forward, request.method, target, raw, headers)
    run = partial(
        relay,
        open_upstream=open_upstream,
        exchange=exchange,
        secret=secret,
        head_only=request.method == "HEAD",
        renamed=renamed,
        client_location=upstream.client_location,
    )
    return HeldResponse(run, exchange)


async def _native_responses(ctx: _Context, request: Request, raw: bytes) -> Response:
    """``POST /v1/responses`` sent to the upstream's own endpoint, its answer normalized."""
    exchange = exchange_of(request.scope)
    try:
        asked = parse_json_object(raw)
    except ProxyError as exc:
        return JSONResponse(exc.body, status_code=exc.status)
    # State is the proxy's here too: the upstream's ids never reach the client (each Response gets the
    # proxy's own), so its store could not be named; a continuation is sent as the whole conversation.
    previous = await previous_items(ctx.store, asked)
    if isinstance(previous, Response):
        return previous
    items = [*previous, *input_items(asked)]
    if "previous_response_id" in asked:
        forwarded = {k: v for k, v in asked.items() if k != "previous_response_id"}
        raw = jsoncodec.dumps({**forwarded, "input": items})
    raw, _ = await _with_served_model(ctx.names, raw, "json")
    model = asked.get("model")
    shown = ctx.config.model_alias or (clean_model_name(model) if isinstance(model, str) and model else None)
    headers = _forward_headers(request.scope, _NOT_FORWARDED_TO_COMPLETIONS)
    headers.append((b"content-type", b"application/json"))
    upstream, secret, store = ctx.upstream, ctx.config.upstream_api_key, ctx.store

    async def run(send: Send) -> None:
        stored = StoredAs(store, items)
        await serve_native(send, upstream, raw, asked, headers, exchange, shown, secret, stored)

    return HeldResponse(run, exchange, cut=None)  # its events' numbers are inside


def _routed_passthrough(router: Router, raw: bytes, exchange: Exchange) -> Replica | Response:
    """The upstream a pass-through request (embeddings, tokenize...) goes to on a routed proxy: one of
    its ``model``'s replicas (404 for a model none serves), or any ready replica for a body naming none."""
    model = _body_model(raw)
    if model is not None:
        route = router.route(model)
        if route is None:
            return _error(f"The model '{model}' does not exist", 404, "model_not_found", "model")
        replicas = route[1]
    else:
        replicas = list(router.replicas.values())
    ready = [r for r in replicas if r.available] or replicas
    chosen = router.pick(ready, None)
    exchange.upstream = chosen.label
    return chosen


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
    names: ServedNames, raw: bytes, content_type: str
) -> tuple[bytes, tuple[str, str] | None]:
    """A JSON body (embeddings, tokenize...) with its ``model`` named as the upstream serves it, and
    (the served name, the asked name) when they differ."""
    if "json" not in content_type or b'"model"' not in raw:
        return raw, None
    try:
        body = jsoncodec.loads(raw)
    except ValueError:
        return raw, None  # the upstream's to refuse
    if not isinstance(body, dict):
        return raw, None
    model = body.get("model")
    served = await names.upstream_name(model)
    if served == model or not isinstance(served, str) or not isinstance(model, str):
        return raw, None
    return jsoncodec.dumps({**body, "model": served}), (served, model)


async def _stored_response(ctx: _Context, request: Request) -> Response:
    """``GET`` and ``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``: answered from
    the response store (conformance/responses_state/), never the upstream's."""
    exchange_of(request.scope).endpoint = "responses"
    if not _authorized(request, ctx.config.api_key):
        return _error("invalid or missing API key", 401, "invalid_api_key")
    response_id = request.path_params["response_id"]
    if request.url.path.endswith("/input_items"):
        return await list_input_items(ctx.store, response_id, request.query_params)
    if request.method == "DELETE":
        return await delete_response(ctx.store, response_id)
    return await retrieve_response(ctx.store, response_id, request.query_params)


async def _health(_: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _metrics(ctx: _Context, _: Request) -> Response:
    return Response(generate_latest(ctx.metrics.exposed()), media_type=CONTENT_TYPE_LATEST)


async def _detect_adapter(config: ProxyConfig, upstream: Upstream) -> Adapter:
    default = config.default_max_tokens
    if config.upstream_kind == "llamacpp":
        return LlamaCppAdapter(default_max_tokens=default)  # its /props read when first needed
    if config.upstream_kind == "auto" and is_llamacpp_props(
        props := await upstream.json("GET", "/props", timeout=5)
    ):
        return LlamaCppAdapter(props, default)
    return OpenAIAdapter(default, upstream.traits)


_COMPLETION_PATHS: dict[str, Endpoint] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/chat/completions/": "chat",
    "/v1/completions/": "completions",
}
_RESPONSES_PATHS = frozenset({"/v1/responses", "/v1/responses/"})
_GENERATING_PATHS = _RESPONSES_PATHS | frozenset(_COMPLETION_PATHS)
_STORED_RESPONSE = re.compile(r"/v1/responses/[^/]+")
_STORED_INPUT_ITEMS = re.compile(r"/v1/responses/[^/]+/input_items")
_LISTING_TIMEOUT = 10.0  # seconds for the upstream's /v1/models, within the first-byte timeout
_MAX_LISTING = 8 * 1024 * 1024


def _own_methods(path: str) -> str | None:
    """The methods the proxy answers on ``path`` itself (its Allow header), if it answers any."""
    if path in _COMPLETION_PATHS:
        return "POST"
    if path in _RESPONSES_PATHS:
        return "POST"
    if path.rstrip("/") == "/v1/models" or path.startswith("/v1/models/"):
        return "GET, HEAD"
    if _STORED_RESPONSE.fullmatch(path):
        return "GET, HEAD, DELETE"
    if _STORED_INPUT_ITEMS.fullmatch(path):
        return "GET, HEAD"
    return None


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (an unknown path: 404; a method the route does not take: 405, with its
    Allow header) as OpenAI errors, which is what clients of an OpenAI endpoint can read."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return _unknown_url(request)
    response = _error(f"{exc.detail}: {request.method} {request.url.path}", exc.status_code)
    response.headers.update(exc.headers or {})
    return response


def _unknown_url(request: Request) -> JSONResponse:
    return _error(f"unknown request URL: {request.method} {request.url.path}", 404, "unknown_url")


async def _internal_error(_: Request, exc: Exception) -> Response:
    """A bug in the proxy: an OpenAI error for the client; the traceback goes to the server log only."""
    return _error("internal error in the proxy", 500)


class _CORS(CORSMiddleware):
    """Starlette's CORS, with a refused preflight answered as an OpenAI error like every other refusal."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        refused = _error(f"CORS preflight refused: {bytes(response.body).decode()}", 400, "cors_refused")
        refused.headers.update({k: v for k, v in response.headers.items() if k.startswith("vary")})
        return refused


def _wrapped(app: ASGIApp, middleware: Sequence[Middleware]) -> ASGIApp:
    for cls, args, kwargs in reversed(middleware):
        app = cls(app, *args, **kwargs)
    return app


class _ProxyApplication(Starlette):
    """Starlette with a shorter way in for POSTs to the routes that generate, the proxy's hot path.

    Starlette's router and exception middleware cost about 20 µs of CPU per request and one more
    wrapper call for every chunk sent; on a loaded machine each costs two to three times that, and the
    time to first token pays it. These requests get the same middleware (the access log and metrics,
    CORS, the guard against the proxy's own faults) around a direct call of their handler, so the
    router has no routes for them: other methods on these paths reach the pass-through.
    """

    def __init__(
        self,
        completion: Callable[[Endpoint, Request], Awaitable[Response]],
        responses: Callable[[Request], Awaitable[Response]],
        **options: Any,
    ) -> None:
        super().__init__(**options)

        async def completion_route(scope: Scope, receive: Receive, send: Send) -> None:
            path = scope["path"]
            if path in _RESPONSES_PATHS:
                response = await responses(Request(scope, receive))
            else:
                response = await completion(_COMPLETION_PATHS[path], Request(scope, receive))
            await response(scope, receive, send)

        self._completions = _wrapped(completion_route, self.user_middleware)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in _GENERATING_PATHS:
            scope["app"] = self
            await self._completions(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def create_app(config: ProxyConfig) -> Starlette:
    """The proxy as an ASGI app."""
    metrics = Metrics()
    upstream = Upstream(config)
    adapter = OpenAIAdapter(config.default_max_tokens, upstream.traits)
    names = ServedNames(upstream, config.model_alias)
    store = store_of(config)
    ctx = _Context(config, upstream, adapter, metrics, names, NativeResponses(config.responses), store)
    if config.config_file is not None:
        ctx.router = Router(config, load_routing_file(config.config_file), metrics.registry)
    store.redact = partial(_without_keys, ctx)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        router = ctx.router
        if router is None:
            ctx.adapter = await _detect_adapter(config, ctx.upstream)
        else:
            await router.start(_detect_adapter)
            reloading = reload_on_sighup(router, config.config_file)
        try:
            yield
        finally:
            if router is not None:
                reloading()
                await router.aclose()
            await ctx.upstream.aclose()
            await store.aclose()
            metrics.retire()

    routes = [
        Route("/v1/models", partial(_models, ctx), methods=["GET"]),
        Route("/v1/models/", partial(_models, ctx), methods=["GET"]),
        Route("/v1/models/{model:path}", partial(_model, ctx), methods=["GET"]),
        Route("/v1/responses/{response_id}/input_items", partial(_stored_response, ctx), methods=["GET"]),
        Route("/v1/responses/{response_id}", partial(_stored_response, ctx), methods=["GET", "DELETE"]),
        Route("/health", _health, methods=["GET"]),
        Route("/metrics", partial(_metrics, ctx), methods=["GET"]),
        Route(
            "/v1/{rest:path}", partial(_passthrough, ctx), methods=["GET", "POST", "PUT", "PATCH", "DELETE"]
        ),
    ]
    middleware = [Middleware(ObservabilityMiddleware, metrics=metrics)]
    if config.cors_origins:
        middleware.append(
            Middleware(
                _CORS,
                allow_origins=list(config.cors_origins),
                allow_methods=["*"],
                allow_headers=["*"],
                expose_headers=["x-request-id"],  # so that browser code can read it
            )
        )
    # Inside the access log, so that a 500 is logged and counted and carries its x-request-id.
    middleware.append(Middleware(ServerErrorMiddleware, handler=_internal_error))
    app = _ProxyApplication(
        partial(_completion, ctx),
        partial(_responses, ctx),
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.context = ctx
    return app
