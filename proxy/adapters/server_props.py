"""A llama.cpp server's ``GET /props`` answer, asked once for all that read it.

The context check (context_window.py: the context size) and the tool path (llamacpp_tools.py: whether
the chat template has a tool-call format) both read ``/props``. The answer given at detection serves
both; a reader that finds nothing in it asks the server again, lazily, on the first request that needs
it, and at most once a minute (not on every request: ik_llama.cpp's and older builds' answers never
have a template's capabilities). Readers waiting at once share one call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

from conformance.protocols.sampling import sampling_defaults

from ..upstream import Upstream

__all__ = ["ServerProps", "stated_sampling"]

T = TypeVar("T")

_TIMEOUT = 5.0  # seconds for /props; past it the reader finds nothing and the request goes unchecked
_RETRY = 60.0  # seconds before /props is asked again for a reader that found nothing in the last answer


class ServerProps:
    def __init__(self, answer: Any = None) -> None:
        self.answer = answer
        self._asked = -_RETRY if answer is None else time.monotonic()
        self._lock = asyncio.Lock()

    async def read(self, upstream: Upstream, reader: Callable[[Any], T | None]) -> T | None:
        """What ``reader`` finds in the answer, asking ``upstream`` again where it finds nothing."""
        value = reader(self.answer)
        if value is not None:
            return value
        async with self._lock:
            value = reader(self.answer)  # (another request may have asked while this one waited)
            if value is not None or time.monotonic() - self._asked < _RETRY:
                return value
            self._asked = time.monotonic()
            answer = await upstream.json("GET", "/props", timeout=_TIMEOUT)
            if answer is not None:
                self.answer = answer
            return reader(self.answer)


def stated_sampling(props: Any) -> dict[str, float] | None:
    """The sampling defaults a ``/props`` answer states: llama.cpp's server in
    ``default_generation_settings``, the bundled backend in ``sampling``; None where it states none."""
    if not isinstance(props, dict):
        return None
    return sampling_defaults(props.get("default_generation_settings")) or sampling_defaults(
        props.get("sampling")
    )
