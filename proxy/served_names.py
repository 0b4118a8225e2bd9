"""Model names as clients see them, and as the upstream serves them.

``/v1/models`` through the proxy shows each model without its local path (Q09), or only the alias
(``--model-alias``). A client then asks for the model by that name, which an upstream that checks
names (vLLM, Ollama, llama.cpp's router) does not know: the proxy sends the name the upstream serves.
Each worker learns the names from every listing a client asks it for. The alias needs no listing
first: a worker reads the upstream's listing on its first request for the alias, and again in the
background on a request a minute or more after the last read (five seconds after a failed one), so a
model swapped behind the alias is found without holding up a request. A name shown without its path
reaches its model through the workers that listed it.
"""

from __future__ import annotations

import asyncio
import math
from time import monotonic
from typing import Any

from conformance import jsoncodec
from conformance.api_errors import APIError
from conformance.model_names import clean_model_name

from .errors import upstream_timeout
from .observability import Exchange
from .upstream import Upstream

__all__ = ["ServedNames", "served_name"]

_LISTING_TIMEOUT = 10.0  # seconds for the upstream's /v1/models, within the first-byte timeout
_MAX_LISTING = 8 * 1024 * 1024

_MAX_NAMES = 1024  # bounds what an upstream listing many models can make the proxy remember
_STALE_AFTER = 60.0  # seconds
_LOOKUP_TIMEOUT = 5.0  # a listing read for a request holds it up at most this long
_RETRY_AFTER = 5.0  # seconds after a failed read


def served_name(entry: Any) -> str | None:
    """The name a ``/v1/models`` entry is served by (``id``, or llama.cpp's ``name``), if it has one."""
    name = (entry.get("id") or entry.get("name")) if isinstance(entry, dict) else None
    return name if isinstance(name, str) else None


class ServedNames:
    """What each name the proxy shows stands for at the upstream, from the upstream's own listing."""

    def __init__(self, upstream: Upstream, alias: str | None) -> None:
        self._upstream = upstream
        self._alias = alias
        self._names: dict[str, str] = {}
        self._read_at = -math.inf
        self._reading: asyncio.Task[list[Any] | None] | None = None

    async def listing(self, timeout: float = 10.0) -> list[Any] | None:  # noqa: ASYNC109
        """The upstream's ``/v1/models`` entries now (None when it lists none), its names and traits
        learned from them (``Upstream.listing``); asked for at most ``timeout`` seconds, or the
        first-byte timeout when it is shorter."""
        timeout = min(timeout, self._upstream.config.first_byte_timeout)
        entries = await self._upstream.listing(timeout)
        self.learn(entries)
        return entries

    def learn(self, entries: Any) -> None:
        """Take the names from the ``data`` of an upstream listing read now (not a list: none read)."""
        if not isinstance(entries, list):
            # Down, or no listing: asked again after a few seconds, not a whole minute.
            self._read_at = monotonic() - _STALE_AFTER + _RETRY_AFTER
            return
        self._read_at = monotonic()
        names = [name for entry in entries if (name := served_name(entry)) is not None]
        served = set(names)
        shown: dict[str, set[str]] = {}
        for name in names[:_MAX_NAMES]:
            shown.setdefault(clean_model_name(name), set()).add(name)
        # Only a name that is no served name itself and stands for one model: a client asking for a
        # name the upstream serves gets that model, and two paths that end alike are left as asked.
        mapping = {
            name: next(iter(paths)) for name, paths in shown.items() if len(paths) == 1 and name not in served
        }
        alias = self._alias
        if alias and alias not in served:
            before = self._names.get(alias)
            if len(served) == 1:
                mapping[alias] = names[0]  # the alias stands for the one model there is
            elif before in served:
                mapping[alias] = before  # a model added beside it (ollama pull) changes nothing
        self._names = mapping

    async def models(self, exchange: Exchange) -> list[Any]:
        """The entries a client's ``/v1/models`` shows of this upstream: the alias alone (no upstream
        asked), or the upstream's own listing, learned from (its status in ``exchange``). Raises the
        ``APIError`` to answer when the upstream cannot list them."""
        if self._alias:
            return [{"id": self._alias}]
        upstream = self._upstream
        try:
            async with asyncio.timeout(min(_LISTING_TIMEOUT, upstream.config.first_byte_timeout)):
                stream = await upstream.forward("GET", b"/v1/models", b"", [])
                try:
                    exchange.upstream_status = stream.status
                    if stream.status >= 400:
                        raise await stream.error()
                    raw = await stream.read_all(_MAX_LISTING)
                finally:
                    await stream.aclose()
        except TimeoutError:
            raise upstream_timeout("the upstream server did not list its models in time") from None
        try:
            answer = jsoncodec.loads(raw)
        except ValueError:
            answer = None
        entries = answer.get("data") if isinstance(answer, dict) else None
        self.learn(entries)
        if not isinstance(entries, list):
            raise APIError.make("the upstream server did not list its models", 502)
        return entries

    async def learn_serial(self) -> None:
        """Learn whether the upstream serves one request at a time (``UpstreamTraits.serial``) from its
        listing: llama-cpp-python's (``owned_by: "me"`` and ``permissions``) has one model lock, and
        breaks a stream off for each request that waits. Read now, learned from like any listing; left
        unknown when it could not be read (asked again next time)."""
        await self.listing(_LOOKUP_TIMEOUT)

    async def upstream_name(self, model: Any) -> Any:
        """The name to send the upstream for ``model``, as a client asked for it."""
        if not isinstance(model, str):
            return model
        if model == self._alias and monotonic() - self._read_at >= _STALE_AFTER:
            # The alias's model is read again now and then: the upstream may have swapped it.
            reading = self._reading
            if reading is None or reading.done():
                reading = self._reading = asyncio.create_task(self.listing(_LOOKUP_TIMEOUT))
            if self._read_at == -math.inf:  # never read: this request waits for it (its own cancel aside)
                await asyncio.shield(reading)
        return self._names.get(model, model)
