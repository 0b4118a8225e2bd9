"""The backend's refusal of a request: the core's ``InvalidRequest`` (conformance/api_errors.py) made from
a message and the parameter it names, the shape every check of backend/requests.py raises.

Its own module, below both the request reading (backend/requests.py) and what it calls (the grammars,
the chat template, the sampler), so that none of them imports another to refuse a request."""

from __future__ import annotations

from conformance.api_errors import InvalidRequest
from conformance.openai_errors import error_body

__all__ = ["RequestError"]


class RequestError(InvalidRequest):
    """A request the server refuses: an OpenAI error body with this status, ``param`` and ``code``."""

    __slots__ = ()

    def __init__(self, message: str, param: str | None, *, status: int = 400, code: str | None = None):
        super().__init__(status, error_body(message, status, param=param, code=code))
