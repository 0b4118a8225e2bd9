"""What a live probe is, and the pieces every protocol's probes are made of.

A probe is a small named request and its intent (:mod:`conformance.rules.intents`); each protocol
brings its own (``probes.py`` in each package of conformance/protocols/), and ``check`` runs them all
(conformance/live/probes.py). Everything else a response must be the judge reads from the request
itself, so a recording of a probe is judged the same as the live answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance.rules.context import OPEN_RESPONSES_PROFILE

__all__ = [
    "COUNTING",
    "STREAM_USAGE",
    "TIME",
    "UNKNOWN_MODEL",
    "WEATHER",
    "Probe",
    "ProbeContext",
    "RequestSpec",
    "function_tool",
    "without",
]

UNKNOWN_MODEL = "conformant-no-such-model"


@dataclass(frozen=True)
class RequestSpec:
    """What to send: a JSON body, or raw bytes when the body must be malformed on purpose."""

    path: str
    body: Any = None
    raw: bytes | None = None
    method: str = "POST"
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def content(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return json.dumps(self.body).encode()

    def as_request(self) -> dict[str, Any]:
        """The transcript's ``request`` object; a malformed body is kept as its text.

        Headers are included when given; ``save_transcript`` drops credentials and cookies from them.
        """
        body: Any = self.body if self.raw is None else self.raw.decode("utf-8", "replace")
        request: dict[str, Any] = {"method": self.method, "path": self.path, "body": body}
        if self.headers:
            request["headers"] = dict(self.headers)
        return request


@dataclass(frozen=True)
class ProbeContext:
    model: str
    overflow_words: int = 40_000
    """Words in the context-overflow prompt: more tokens than any small local context holds."""
    profile: str = OPEN_RESPONSES_PROFILE
    """The specification the answers are judged by where two define the protocol (rules/context.py):
    a live server is held to Open Responses' Response, the bar its users measure it by."""


@dataclass(frozen=True)
class Probe:
    name: str
    summary: str
    request: Callable[[ProbeContext], RequestSpec]
    intent: str | None = None
    """What the response is meant to show beyond what the request says (``success``, ``finish-length``,
    ``context-overflow``, ``unknown-model``); None where the request says it all (an invalid request)."""
    hang_up_after: int | None = None
    """Close the connection after this many body bytes (the disconnect probe)."""
    then: Callable[[ProbeContext], RequestSpec] | None = None
    """A second request, judged instead of the first (the server must still serve after a hang-up)."""


def function_tool(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    parameters = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


_CITY = {"type": "string", "description": "a city name", "minLength": 1, "maxLength": 24}
WEATHER = function_tool(
    "get_weather",
    "The current weather in a city.",
    {"city": _CITY, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
)
TIME = function_tool("get_time", "The local time in a city.", {"city": _CITY})


STREAM_USAGE: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
"""A stream that asks for its usage, in the chat and completions probes."""
COUNTING = "1, 2, 3, 4, 5, 6,"
"""A prompt a model goes on from (counting), for the probes that stop it: a stop sequence, a limit."""


def without(spec: RequestSpec, key: str) -> RequestSpec:
    """``spec`` with ``key`` left out of its body (a request missing a required parameter)."""
    return RequestSpec(spec.path, {k: v for k, v in spec.body.items() if k != key})
