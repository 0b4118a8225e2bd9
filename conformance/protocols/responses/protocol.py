"""The Responses API as the judge and ``check`` know it: its path, its request, its rules, its probes."""

from __future__ import annotations

from ..wire import WireProtocol
from .probes import PROBES
from .request import SCHEMA, read_request
from .stream_rules import RULES

__all__ = ["RESPONSES"]

RESPONSES = WireProtocol(
    name="responses",
    paths=("/v1/responses",),
    endpoint="chat",
    request_schema=SCHEMA,
    read_request=read_request,
    probes=PROBES,
    rules=RULES,
    native=True,
)
