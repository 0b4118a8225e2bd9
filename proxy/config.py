"""Proxy configuration: the ``serve`` settings table and the frozen object built from it.

Each setting (flag, ``CONFORMANT_*`` variable, cast, default, help) is written once, in ``SERVE_SETTINGS``;
``conformant serve`` derives its flags from it (proxy/cli.py) and ``ProxyConfig`` its defaults; the flag
table in docs/proxy.md is checked against it (tests/test_settings_docs.py).
"""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import httpx

from conformance.protocols.responses.store_settings import (
    RESPONSES_STORE,
    RESPONSES_STORE_MAX_AGE,
    RESPONSES_STORE_MAX_BYTES,
    RESPONSES_STORE_SETTINGS,
)
from conformance.settings import (
    Setting,
    boolean,
    comma_list,
    non_negative_number,
    one_of,
    port,
    positive_integer,
    positive_number,
    text,
    variable,
)

__all__ = [
    "KEY_VARIABLES",
    "SERVE_SETTINGS",
    "NativeMode",
    "ProxyConfig",
    "UpstreamKind",
    "base_of",
    "proxy_config",
    "upstream_url_problem",
    "variable",
]


def addresses(value: str) -> tuple[str, ...]:
    """Comma-separated IP addresses or networks (``10.0.0.5``, ``10.0.0.0/8``, ``fd00::/8``), each checked
    now: one that is no address would trust nothing, and say so only as a proxy left capped."""
    items = comma_list(value)
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            what = "is" if items == (item,) else f"holds {item!r}, which is"
            raise ValueError(f"{what} not an IP address or network (10.0.0.5, 10.0.0.0/8)") from None
    return items


def base_of(url: str) -> str:
    """An upstream's URL without ``/v1`` or a trailing slash: the server it names, whichever way written."""
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def upstream_url_problem(text: str, key_hint: str) -> str | None:
    """What is wrong with an upstream's URL (``--upstream``, a file's ``url``), or None; a user or password
    in it first, with ``key_hint`` (where the key goes instead), and the text itself never quoted once
    it holds one: it would be printed with the password (a URL whose scheme was wrong was quoted whole)."""
    authority = text.partition("://")[2] or text
    authority = authority.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in authority:
        return f"must not hold a user or password; {key_hint}"
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, ValueError) as exc:
        return f"{text!r} is not a URL: {exc}"
    if url.scheme not in ("http", "https") or not url.host or not 0 < (url.port or 80) < 65536:
        return f"must be an http(s) URL with a host and a valid port, not {text!r}"
    return None


UpstreamKind = Literal["auto", "openai", "llamacpp"]
NativeMode = Literal["translate", "native", "auto"]
"""How a protocol an upstream may speak itself is sent to it: translated to chat, to its own endpoint, or
auto (its own where the upstream answers it)."""
NATIVE_MODES: tuple[NativeMode, ...] = ("translate", "native", "auto")
UPSTREAM_KINDS: tuple[UpstreamKind, ...] = ("auto", "openai", "llamacpp")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
REASONING_FIELDS = ("reasoning_content", "reasoning")

# The variables that carry keys: kept out of what worker processes inherit.
KEY_VARIABLES = (variable("API_KEY"), variable("UPSTREAM_API_KEY"))

UPSTREAM = Setting[str | None](
    "upstream",
    text,
    None,
    "upstream base URL, with or without /v1",
    metavar="URL",
    shown="none: start the bundled backend",
)
HOST = Setting("host", text, "127.0.0.1", "address to listen on")
PORT = Setting("port", port, 8000, "port to listen on (1-65535)")
API_KEY = Setting[str | None](
    "api_key", text, None, "key clients must send: a bearer token, or an x-api-key or api-key header"
)
UPSTREAM_API_KEY = Setting[str | None]("upstream_api_key", text, None, "key sent to the upstream")
MODEL_ALIAS = Setting[str | None](
    "model_alias", text, None, "model name clients see", shown="the request's model"
)
UPSTREAM_KIND = Setting[UpstreamKind](
    "upstream_kind",
    one_of(UPSTREAM_KINDS),  # type: ignore[arg-type]  # one_of returns one of them
    "auto",
    "the upstream's API family; auto probes GET /props",
    choices=UPSTREAM_KINDS,
)
RESPONSES = Setting[NativeMode](
    "responses",
    one_of(NATIVE_MODES),  # type: ignore[arg-type]  # one_of returns one of them
    "translate",
    "how POST /v1/responses is served: translated to chat completions, passed to the upstream's own "
    "/v1/responses (normalized), or auto (native when the upstream answers it)",
    choices=NATIVE_MODES,
)
MESSAGES = Setting[NativeMode](
    "messages",
    one_of(NATIVE_MODES),  # type: ignore[arg-type]  # one_of returns one of them
    "translate",
    "how POST /v1/messages (Anthropic's Messages API) is served: translated to chat completions, passed "
    "to the upstream's own /v1/messages (normalized), or auto (native when the upstream answers it)",
    choices=NATIVE_MODES,
)
CONNECT_TIMEOUT = Setting(
    "connect_timeout",
    positive_number,
    10.0,
    "seconds to connect to the upstream (504)",
    unit="s",
)
FIRST_BYTE_TIMEOUT = Setting(
    "first_byte_timeout",
    positive_number,
    600.0,
    "seconds from sending the request to the upstream's first event, prompt processing included (504)",
    unit="s",
)
IDLE_TIMEOUT = Setting(
    "idle_timeout",
    positive_number,
    120.0,
    "longest silence between two upstream reads once the stream has started (Q25; 504 or an error event)",
    unit="s",
)
MAX_BODY = Setting(
    "max_body",
    positive_integer,
    16 * 1024 * 1024,
    "request body bytes (413 above)",
    shown="16 MiB",
)
MAX_ITEMS = Setting(
    "max_items",
    positive_integer,
    10_000,
    "messages in one request, as the upstream would get them (translated: Responses input items with the "
    "conversation they continue, consecutive ones of one role joined), a message of several content parts "
    "counting as that many (400 above)",
)
CORS_ORIGINS = Setting[tuple[str, ...]](
    "cors_origins",
    comma_list,
    (),
    "allowed browser origin (repeatable; the flags replace the variable's comma-separated list)",
    flag="--cors-origin",
    metavar="ORIGIN",
    kind="list",
)
NO_FAN_OUT = Setting(
    "no_fan_out",
    boolean,
    False,
    "pass n>1 and prompt arrays through instead of fanning out to concurrent single requests (Q70-Q73)",
    kind="switch",
)
DEFAULT_MAX_TOKENS = Setting[int | None](
    "default_max_tokens",
    positive_integer,
    None,
    "max_tokens for requests that give no limit, so that none runs to the end of a context",
    metavar="N",
    shown="none: the upstream's own",
)
MAX_FAN_OUT = Setting(
    "max_fan_out",
    positive_integer,
    256,
    "upstream requests one request may become (prompts x n; sent at once, at most"
    " --max-upstream-connections; a 400 above)",
)
MAX_UPSTREAM_CONNECTIONS = Setting(
    "max_upstream_connections",
    positive_integer,
    1000,
    "upstream connections open at once, per worker (further requests wait in turn)",
)
CLIENT_TIMEOUT = Setting(
    "client_timeout",
    positive_number,
    30.0,
    "seconds a client has to send a request's head, and again its body (408 after; proxy/client_limits.py)",
    unit="s",
)
MAX_CONNECTIONS = Setting(
    "max_connections",
    positive_integer,
    1000,
    "open client connections per worker past which requests but /health get a 503",
)
MAX_CONNECTIONS_PER_CLIENT = Setting(
    "max_connections_per_client",
    positive_integer,
    250,
    "open connections per worker from one client address past which its requests but /health get a "
    "503 (one client must not hold the whole --max-connections)",
)
TRUSTED_PROXIES = Setting[tuple[str, ...]](
    "trusted_proxies",
    addresses,
    (),
    "addresses or networks (CIDR), comma-separated, of reverse proxies in front, whose connections the "
    "per-client cap leaves alone and whose X-Forwarded-For names the client (repeatable; the flags "
    "replace the variable's list; proxy/client_limits.py)",
    metavar="ADDRESS[,...]",
    kind="list",
)
MODEL = Setting[str | None](
    "model",
    text,
    None,
    "GGUF file for the bundled backend (only without --upstream)",
    metavar="PATH",
    shown="the bundled Gemma 3 270M",
)
WORKERS = Setting(
    "workers",
    positive_integer,
    1,
    "processes serving requests, each on its own event loop (one per core spreads the load)",
    metavar="N",
)
SHUTDOWN_TIMEOUT = Setting(
    "shutdown_timeout",
    non_negative_number,
    30.0,
    "seconds open streams get to finish on SIGINT or SIGTERM before they are cut (proxy/graceful.py)",
    unit="s",
)
LOG_LEVEL = Setting(
    "log_level",
    one_of(LOG_LEVELS),
    "info",
    "level of the access log and of serve's own messages",
    choices=LOG_LEVELS,
)
REASONING_FIELD = Setting(
    "reasoning_field",
    one_of(REASONING_FIELDS),
    "reasoning_content",
    "the field a reasoning model's thinking is sent in, whichever name the upstream uses (Q39)",
    choices=REASONING_FIELDS,
)

CONFIG_FILE = Setting[str | None](
    "config_file",
    text,
    None,
    "TOML file of several upstreams, the models each serves and their limits (instead of --upstream; "
    "SIGHUP re-reads it; docs/routing.md)",
    flag="--config",
    env="CONFIG",
    metavar="FILE",
    shown="none: one --upstream",
)

SERVE_SETTINGS: tuple[Setting[Any], ...] = (
    UPSTREAM,
    CONFIG_FILE,
    HOST,
    PORT,
    API_KEY,
    UPSTREAM_API_KEY,
    MODEL_ALIAS,
    UPSTREAM_KIND,
    RESPONSES,
    MESSAGES,
    CONNECT_TIMEOUT,
    FIRST_BYTE_TIMEOUT,
    IDLE_TIMEOUT,
    MAX_BODY,
    MAX_ITEMS,
    CORS_ORIGINS,
    DEFAULT_MAX_TOKENS,
    NO_FAN_OUT,
    MAX_FAN_OUT,
    MAX_UPSTREAM_CONNECTIONS,
    CLIENT_TIMEOUT,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_CLIENT,
    TRUSTED_PROXIES,
    WORKERS,
    SHUTDOWN_TIMEOUT,
    REASONING_FIELD,
    MODEL,
    *RESPONSES_STORE_SETTINGS,
    LOG_LEVEL,
)


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """What one proxy app serves with; each default is its setting's (the help is there too)."""

    upstream: str
    api_key: str | None = field(default=API_KEY.default, repr=False)
    upstream_api_key: str | None = field(default=UPSTREAM_API_KEY.default, repr=False)
    """Never logged or echoed."""
    model_alias: str | None = MODEL_ALIAS.default
    upstream_kind: UpstreamKind = UPSTREAM_KIND.default
    responses: NativeMode = RESPONSES.default
    messages: NativeMode = MESSAGES.default
    connect_timeout: float = CONNECT_TIMEOUT.default
    first_byte_timeout: float = FIRST_BYTE_TIMEOUT.default
    idle_timeout: float = IDLE_TIMEOUT.default
    max_body: int = MAX_BODY.default
    max_items: int = MAX_ITEMS.default
    max_line_bytes: int = 4 * 1024 * 1024
    """Upper bound on one upstream SSE line; longer lines fail the stream instead of growing memory."""
    cors_origins: tuple[str, ...] = CORS_ORIGINS.default
    fan_out: bool = not NO_FAN_OUT.default
    default_max_tokens: int | None = DEFAULT_MAX_TOKENS.default
    client_timeout: float = CLIENT_TIMEOUT.default
    max_connections: int = MAX_CONNECTIONS.default
    max_connections_per_client: int = MAX_CONNECTIONS_PER_CLIENT.default
    trusted_proxies: tuple[str, ...] = TRUSTED_PROXIES.default
    max_fan_out: int = MAX_FAN_OUT.default
    max_upstream_connections: int = MAX_UPSTREAM_CONNECTIONS.default
    shutdown_timeout: float = SHUTDOWN_TIMEOUT.default
    workers: int = WORKERS.default
    """The processes serving (``--workers``): a worker takes a second stop otherwise (proxy/graceful.py)."""
    reasoning_field: str = REASONING_FIELD.default
    responses_store: str | None = field(default=RESPONSES_STORE.default, repr=False)
    """None: ``default_store_path()``; ``serve`` resolves it before it starts workers. Not in the repr:
    a PostgreSQL URL may hold a password."""
    responses_store_max_bytes: int = RESPONSES_STORE_MAX_BYTES.default
    responses_store_max_age: float = RESPONSES_STORE_MAX_AGE.default
    config_file: str | None = CONFIG_FILE.default
    """``--config``: the upstreams to route to (proxy/routing/); ``upstream`` is then the first's."""

    def native_mode(self, protocol: str) -> NativeMode:
        """How the command line says ``protocol`` goes to an upstream that may speak it itself: the
        Responses API as ``--responses`` says, the Messages API as ``--messages``; another protocol
        translated (a file may say otherwise per upstream: proxy/routing/config_file.py)."""
        if protocol == "responses":
            return self.responses
        return self.messages if protocol == "messages" else "translate"

    @property
    def upstream_base(self) -> str:
        """The upstream origin without ``/v1``: native endpoints (llama.cpp ``/completion``) hang off it."""
        return base_of(self.upstream)


_FIELDS = frozenset(f.name for f in fields(ProxyConfig))


def proxy_config(args: argparse.Namespace, **given: Any) -> ProxyConfig:
    """The ProxyConfig of ``serve``'s parsed flags: every setting that is a field, ``fan_out`` from
    ``--no-fan-out``, and ``given`` (what ``serve`` decides itself: the bundled backend's URL) over them."""
    values = {s.name: getattr(args, s.name) for s in SERVE_SETTINGS if s.name in _FIELDS}
    return ProxyConfig(**{**values, "fan_out": not args.no_fan_out, **given})
