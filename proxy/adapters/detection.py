"""Which adapter an upstream gets: ``--upstream-kind`` (a file's ``kind``), or for ``auto`` what its
``GET /props`` says (llama.cpp's server answers it; any other family is served as OpenAI's).

An upstream that gives no answer to judge by (none at all, or a 5xx: llama-server answers 503 "Loading
model" to everything while it loads) is not judged: served as OpenAI's until then, it is asked again
(proxy/routing/replica.py). Judged on that, a llama-server started beside the proxy was served as
OpenAI's for the proxy's life: its tools went to a template that cannot show them, and ``required`` was
answered with text (Q83). One that takes the connection and says nothing in ``_TIMEOUT`` is judged
OpenAI's, as before: asked again, it would hold a request that long every time.

What ``/props`` shows also tells that the server answers other requests beside a stream
(``UpstreamTraits.serial`` False): llama.cpp's server, and the bundled backend (``concurrent``). Else
unknown until a listing tells, a Message's stream asked its prompt's count before the answer, adding the
count's time to every first token in front of llama-server where no client read the listing.
"""

from __future__ import annotations

import time

from ..config import ProxyConfig
from ..upstream import Upstream
from .base import Adapter
from .llamacpp import LlamaCppAdapter, is_llamacpp_props
from .openai import OpenAIAdapter

__all__ = ["detect_adapter"]

_TIMEOUT = 5.0


async def detect_adapter(config: ProxyConfig, upstream: Upstream) -> Adapter | None:
    """The adapter of ``upstream``; None where it gave no answer to judge its family by."""
    default = config.default_max_tokens
    if config.upstream_kind == "llamacpp":
        upstream.traits.serves_several()
        return LlamaCppAdapter(default_max_tokens=default)  # its /props read when first needed
    if config.upstream_kind != "auto":
        return OpenAIAdapter(default, upstream.traits)
    began = time.monotonic()
    status, props = await upstream.answer("GET", "/props", timeout=_TIMEOUT)
    if status is None and time.monotonic() - began < _TIMEOUT:
        return None  # refused or broken off: not listening yet
    if status is not None and status >= 500:
        return None  # loading
    llamacpp = is_llamacpp_props(props)
    if llamacpp or (isinstance(props, dict) and props.get("concurrent") is True):
        # llama.cpp's HTTP threads answer beside a stream; the bundled backend says it batches.
        upstream.traits.serves_several()
    if llamacpp:
        return LlamaCppAdapter(props, default)
    # (Any other server's /props, read once here: the bundled backend states its sampling defaults there.)
    return OpenAIAdapter(default, upstream.traits, props)
