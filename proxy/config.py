"""Proxy configuration: one frozen object built from flags and ``CONFORMANT_*`` environment variables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["KEY_VARIABLES", "ProxyConfig", "UpstreamKind", "variable"]

UpstreamKind = Literal["auto", "openai", "llamacpp"]


def variable(name: str) -> str:
    """The environment variable of a ``serve`` setting: ``API_KEY`` is ``CONFORMANT_API_KEY``."""
    return f"CONFORMANT_{name}"


# The variables that carry keys: kept out of what worker processes inherit.
KEY_VARIABLES = (variable("API_KEY"), variable("UPSTREAM_API_KEY"))


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    upstream: str
    """Base URL of the upstream server, with or without a trailing ``/v1``."""
    api_key: str | None = field(default=None, repr=False)
    """When set, clients must send ``Authorization: Bearer <api_key>``."""
    upstream_api_key: str | None = field(default=None, repr=False)
    """Sent to the upstream as a bearer token; never logged or echoed."""
    model_alias: str | None = None
    """The model name clients see in every response and in /v1/models."""
    upstream_kind: UpstreamKind = "auto"
    connect_timeout: float = 10.0
    first_byte_timeout: float = 600.0
    """Seconds from sending the request to the upstream's first event (covers prompt processing)."""
    idle_timeout: float = 120.0
    """Longest silence between two upstream reads once the stream has started (Q25)."""
    max_body: int = 16 * 1024 * 1024
    max_line_bytes: int = 4 * 1024 * 1024
    """Upper bound on one upstream SSE line; longer lines fail the stream instead of growing memory."""
    cors_origins: tuple[str, ...] = ()
    fan_out: bool = True
    """Serve ``n > 1`` and prompt arrays as concurrent single requests (Q70-Q73)."""
    default_max_tokens: int | None = None
    """``max_tokens`` sent for a request that gives no limit, so that none runs to the end of a context."""
    client_timeout: float = 30.0
    """Seconds a client has to send a request head, and again its body (proxy/client_limits.py)."""
    max_connections: int = 1000
    """Open client connections (per worker) past which requests other than /health are answered 503."""
    max_fan_out: int = 256
    """Upstream requests one client request may become (prompts x n); a 400 past it."""
    max_upstream_connections: int = 1000
    """Upstream connections open at once (per worker); further requests wait in turn for one."""
    shutdown_timeout: float = 30.0
    """Seconds open responses may go on after SIGINT or SIGTERM; then each is ended (proxy/graceful.py)."""

    @property
    def upstream_base(self) -> str:
        """The upstream origin without ``/v1``: native endpoints (llama.cpp ``/completion``) hang off it."""
        base = self.upstream.rstrip("/")
        return base[: -len("/v1")] if base.endswith("/v1") else base
