"""What one client request becomes on whichever replica takes it: its leg there, a source and the output
that writes it.

The route makes one :class:`RequestPlan` per request, after the front-end translated it and the pool
found the model's replicas; the failover source (failover.py) asks it for the leg on each replica it
tries. A leg is either

- translated: the core's request fitted to the upstream's traits (``max_tokens: 0`` asked as 1, a
  streamed ``echo`` asked whole), the model named as the upstream serves it, the adapter's refusal
  before sending (a prompt past the context; what the proxy cannot serve there), the fan-out's limit on
  that upstream, then the sources of builder.py (a forced tool call's held and judged first,
  forced_call.py) and the protocol's output of the core's chunks; or
- native: the protocol's own request sent to the upstream's own path (native.py), where the protocol
  allows it and the replica serves it so (``--responses native``, the file's key per upstream), unless
  the adapter says that endpoint would not serve this request as asked (tools where a llama.cpp
  template cannot write calls): the translated leg supplies what it lacks.

The plan holds what every leg shares; it is handed to the failover source as an object of this layer,
never as a callback into the route.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from conformance import jsoncodec
from conformance.api_errors import APIError
from conformance.protocols.front_end import DataLines, FrontEnd, Output, Translation
from conformance.protocols.sampling import with_stated_sampling
from conformance.request_info import RequestInfo

from ..adapters.base import fitted_request
from ..adapters.forced_choice import forced_kind
from ..routing.replica import Replica
from .base import Source
from .builder import SourceBuilder, fan_out_refusal
from .forced_call import ForcedCall
from .native import NativeSource
from .prompt_count import PromptCounted, prompt_tokens
from .token_prompt import source_for

__all__ = ["RequestPlan"]


@dataclass(slots=True)
class RequestPlan:
    front_end: FrontEnd
    translation: Translation
    info: RequestInfo
    headers: list[tuple[bytes, bytes]]
    """The client's headers the upstream gets too."""
    model: Any
    """The model as the pool serves it (an alias of the file's resolved): each replica's names map it."""

    def shortened(self, refused: APIError) -> RequestPlan | None:
        """The plan of the request made shorter to fit the context (``Translation.shortened``), or None."""
        translation = self.translation.shortened(refused)
        return None if translation is None else replace(self, translation=translation)

    async def leg(self, replica: Replica) -> tuple[Source, Output]:
        """The source and output of the request on ``replica``; raises the proxy's own refusal (an
        ``APIError``: no upstream was asked)."""
        path, body = self.front_end.native_path, self.translation.body
        if (
            self.translation.native is not None
            and path is not None
            and await replica.speaks(self.front_end.name, path)
            and (body is None or await replica.adapter.native_fits(replica.upstream, body))
        ):
            return await self._native(replica)
        if self.translation.body is None:  # refused by the translation, kept for a native upstream
            assert self.translation.refusal is not None
            raise self.translation.refusal
        body, sampling = await self._sampled(replica, self.translation.body)
        output = self.translation.output(self.info.model, sampling)
        lines = self.info.stream and isinstance(output, DataLines)  # (read by ``next_lines`` alone)
        source = await self._translated(replica, body, lines)
        if self.info.stream and self.translation.states_prompt_tokens:
            # Counted first where the upstream may serve one request at a time (its stream broke off for
            # the count's request); not learned here: a listing that never answers held every stream.
            first = replica.upstream.traits.serial is not False
            source = PromptCounted(source, self._prompt_tokens(replica, body), output, first=first)
        return source, output

    async def _prompt_tokens(self, replica: Replica, body: dict[str, Any]) -> int | None:
        """The prompt's tokens as ``replica`` reads them, counted as the protocol's counting route counts
        them (prompt_count.py), for an output that opens with them; within the first-byte timeout, as
        the answer is."""
        counting, native = self.front_end.counting, self.translation.native
        own_route = (counting.path, native.body) if counting is not None and native is not None else None
        return (await prompt_tokens(replica, body, own_route, replica.config.first_byte_timeout)).tokens

    async def _sampled(
        self, replica: Replica, body: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, float] | None]:
        """The request to send and the upstream's sampling defaults, for a protocol whose answer states
        its sampling: where the upstream does not say its defaults, the request names every sampling
        field (the API's default where the client sent none), so that the answer states what was used."""
        if not self.translation.states_sampling:
            return body, None
        sampling = await replica.adapter.sampling_defaults(replica.upstream)
        return (body if sampling is not None else with_stated_sampling(body)), sampling

    async def _translated(self, replica: Replica, body: dict[str, Any], lines: bool) -> Source:
        upstream, adapter, names, config = replica.upstream, replica.adapter, replica.names, replica.config
        info, endpoint = self.info, self.front_end.endpoint
        body = fitted_request(upstream.traits, body, info)
        served = await names.upstream_name(self.model)
        if served != body.get("model"):
            body = {**body, "model": served}  # answers still name the model as asked
        declined = await adapter.refusal(upstream, endpoint, body)
        if declined is not None:
            raise declined
        builder = SourceBuilder(
            upstream,
            adapter,
            endpoint,
            info,
            self.headers,
            max_line_bytes=config.max_line_bytes,
            first_byte_timeout=config.first_byte_timeout,
            fan_out=config.fan_out,
            lines=lines,
        )
        if builder.fans_out(body):
            if upstream.traits.serial is None:
                # Before the first fan-out: fanned out at once, llama-cpp-python's streams break each
                # other off.
                await names.learn_serial()
            if not upstream.traits.serial and (
                refused := fan_out_refusal(
                    endpoint, body, info, config.max_upstream_connections, "--max-upstream-connections"
                )
            ):
                raise refused
        if endpoint == "chat" and (kind := forced_kind(body)) is not None:
            return ForcedCall(builder, body, kind)  # a call, or an honest error: never text (Q86)
        return source_for(builder, body)

    async def _native(self, replica: Replica) -> tuple[Source, Output]:
        call = self.translation.native
        assert call is not None
        body = call.body  # (an upstream that speaks the protocol states its own sampling in its answer)
        sampling = (
            await replica.adapter.sampling_defaults(replica.upstream)
            if self.translation.states_sampling
            else None
        )
        served, asked = await replica.names.upstream_name(self.model), body.get("model")
        if isinstance(served, str) and isinstance(asked, str) and served != asked:
            body = {**body, "model": served}
        headers = [*self.headers, (b"content-type", b"application/json")]
        answer = call.stream(self.info.model, sampling)
        source = NativeSource(
            replica.upstream,
            call.path,
            jsoncodec.dumps(body),
            headers,
            answer,
            streamed=body.get("stream") is True,
            max_line_bytes=replica.config.max_line_bytes,
        )
        return source, source.output
