"""Chat completions (``POST /v1/chat/completions``): the core's own wire.

The normalized stream that the proxy repairs and the backend writes is this protocol's, so its
front-end translates nothing: the client's body, checked against ``schemas/chat_completion_request.json``,
is the core's request, and the core's chunks go out as they are (``data:`` lines, then ``[DONE]``). The
judge's rules for it are the core's own (conformance/rules/).
"""

from __future__ import annotations

from functools import partial

from conformance.request import Request

from ..front_end import CoreFrontEnd, FrontEnd
from ..wire import WireProtocol
from .probes import PROBES

__all__ = ["CHAT", "front_end"]

CHAT = WireProtocol(
    name="chat",
    paths=("/v1/chat/completions",),
    endpoint="chat",
    request_schema="chat_completion_request",
    read_request=partial(Request.from_body, "chat"),
    probes=PROBES,
)


def front_end() -> FrontEnd:
    return CoreFrontEnd(CHAT)
