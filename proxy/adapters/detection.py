"""Which adapter an upstream gets: ``--upstream-kind`` (a file's ``kind``), or for ``auto`` what its
``GET /props`` says (llama.cpp's server answers it; any other family is served as OpenAI's)."""

from __future__ import annotations

from ..config import ProxyConfig
from ..upstream import Upstream
from .base import Adapter
from .llamacpp import LlamaCppAdapter, is_llamacpp_props
from .openai import OpenAIAdapter

__all__ = ["detect_adapter"]


async def detect_adapter(config: ProxyConfig, upstream: Upstream) -> Adapter:
    default = config.default_max_tokens
    if config.upstream_kind == "llamacpp":
        return LlamaCppAdapter(default_max_tokens=default)  # its /props read when first needed
    props = await upstream.json("GET", "/props", timeout=5) if config.upstream_kind == "auto" else None
    if is_llamacpp_props(props):
        return LlamaCppAdapter(props, default)
    # (Any other server's /props, read once here: the bundled backend states its sampling defaults there.)
    return OpenAIAdapter(default, upstream.traits, props)
