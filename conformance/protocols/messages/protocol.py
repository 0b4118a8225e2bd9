"""Anthropic's Messages API as the judge and ``check`` know it: its path, its request, its rules, its
probes."""

from __future__ import annotations

from ..wire import WireProtocol
from .errors import messages_error
from .probes import PROBES
from .request import COUNT_PATH, PATH, SCHEMA, read_request
from .stream_rules import RULES

__all__ = ["MESSAGES"]

MESSAGES = WireProtocol(
    name="messages",
    paths=(PATH,),
    endpoint="chat",
    request_schema=SCHEMA,
    read_request=read_request,
    probes=PROBES,
    rules=RULES,
    native=True,
    error=messages_error,
    count_path=COUNT_PATH,
)
