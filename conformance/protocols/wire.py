"""What a wire protocol is to the judge and to ``check``: its paths, its request, its rules, its probes.

One :class:`WireProtocol` per package of conformance/protocols/, listed in the registry
(conformance/protocols/__init__.py). Chat completions and completions are the core's own wire: the
normalized stream that the core repairs is theirs, and the core's rules (conformance/rules/) judge them.
A protocol the core serves by translation (the Responses API) brings its own rules
(:class:`conformance.rules.context.ProtocolRules`), which the judge runs instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from conformance.probe import Probe
from conformance.request import Endpoint, Request
from conformance.rules.context import ProtocolRules

__all__ = ["WireProtocol"]


@dataclass(frozen=True)
class WireProtocol:
    name: str
    """The protocol's name in reports, transcripts' ``endpoint`` and the access log (``chat``)."""
    paths: tuple[str, ...]
    """The request paths it is served on (``/v1/chat/completions``)."""
    endpoint: Endpoint
    """The core's stream that serves it: ``chat`` or ``completions``."""
    request_schema: str
    """The schema (schemas/) its request bodies are checked against."""
    read_request: Callable[[Mapping[str, Any]], Request]
    """A request body as the judge reads it."""
    probes: tuple[Probe, ...] = ()
    rules: ProtocolRules | None = None
    """The judge's rules for its answers; None: the core's own (chat and completions)."""
    native: bool = False
    """Whether an upstream may speak it itself, on its path (llama-server's ``/v1/responses``): the
    proxy then sends it there where told to (per upstream, ``--config``'s key of this name)."""
    error: Callable[[dict[str, Any], int], dict[str, Any]] | None = None
    """An OpenAI error body, answered with a status, in the protocol's words (Anthropic's for the
    Messages API); None: OpenAI's own. For the answers written before a request reaches its route (a
    head too large, a body too slow, a server too busy)."""
    count_path: str | None = None
    """Its path that counts a request's prompt tokens (``/v1/messages/count_tokens``), if it has one:
    a recorded request there is the protocol's, its body judged without the request schema (a count
    request carries no token limit)."""

    @property
    def recorded_paths(self) -> tuple[str, ...]:
        """Every path a recording of this protocol may name."""
        return self.paths if self.count_path is None else (*self.paths, self.count_path)
