"""Legacy completions (``POST /v1/completions``): the core's own wire, as chat completions is.

The client's body, checked against ``schemas/completion_request.json``, is the core's request (prompt
arrays, ``n``, ``echo`` and token-id prompts included: the proxy's sources fan them out), and the core's
chunks go out as they are. The judge's rules for it are the core's own (conformance/rules/).
"""

from __future__ import annotations

from functools import partial

from conformance.request import Request

from ..front_end import CoreFrontEnd, FrontEnd
from ..wire import WireProtocol
from .probes import PROBES

__all__ = ["COMPLETIONS", "front_end"]

COMPLETIONS = WireProtocol(
    name="completions",
    paths=("/v1/completions",),
    endpoint="completions",
    request_schema="completion_request",
    read_request=partial(Request.from_body, "completions"),
    probes=PROBES,
)


def front_end() -> FrontEnd:
    return CoreFrontEnd(COMPLETIONS)
