"""Errors as a client receives them: one hierarchy for the proxy, the backend and every protocol.

An :class:`APIError` is an OpenAI error body ``{"error": {"message", "type", "param", "code"}}`` and its
HTTP status (an error event once a stream started; each protocol front-end words it in its own shape,
conformance/protocols/). Its subclasses say what failed, so callers tell failures apart with ``except``
and ``isinstance`` rather than by status and code strings; the body and status a client sees are the
same whatever the class::

    APIError                       any error sent to a client
    ├── InvalidRequest             400: the client's request is not one the server or its upstream takes
    │   ├── ContextOverflow        400 context_length_exceeded (Q43/Q44/Q47/Q48, seed 003)
    │   └── UnsupportedParameter   400 unsupported_parameter (an upstream's 500 for a parameter, Q43)
    └── UpstreamError              the proxy's upstream failed the request (proxy/errors.py)

The upstream key a proxy holds is cut out of every error and body it sends (``APIError.redacted``,
``secret_in_bodies``): an upstream that repeats it in a message does not pass it on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from starlette.responses import JSONResponse

from conformance.openai_errors import error_body

__all__ = [
    "MAX_MESSAGE",
    "MIN_SECRET_IN_BODY",
    "REDACTED",
    "APIError",
    "ContextOverflow",
    "InvalidRequest",
    "UnsupportedParameter",
    "error_response",
    "quoted",
    "redact_text",
    "secret_in_bodies",
]

MAX_MESSAGE = 500
"""The longest error message relayed from an upstream: proxy/errors.py cuts longer ones, with "..."."""
REDACTED = "<redacted>"
"""What stands in for the upstream key wherever an upstream repeats it."""
MIN_SECRET_IN_BODY = 8
"""A shorter upstream key is a placeholder, not looked for in bodies or errors: "EMPTY", vLLM's usual one,
or "none" would take words out of answers and messages and could break their JSON or SSE framing."""
_MIN_KEY_PART = 4  # a message bound cut the key short: a tail this long that begins the key is cut too


MAX_QUOTED = 80
"""The most of a value the client sent that an error message quotes back."""


def quoted(value: str) -> str:
    """``value`` as an error message quotes it: whole up to ``MAX_QUOTED`` characters, else its start and
    "...". A 1 MB ``previous_response_id`` came back whole in the 400 (issue 32)."""
    return value if len(value) <= MAX_QUOTED else value[:MAX_QUOTED] + "..."


def secret_in_bodies(secret: str | None) -> bytes | None:
    """The upstream key as it is cut out of the bodies the proxy sends (replaced by ``REDACTED``), or
    None for no key or a placeholder shorter than ``MIN_SECRET_IN_BODY``."""
    return secret.encode() if secret and len(secret) >= MIN_SECRET_IN_BODY else None


def redact_text(text: str, secret: str) -> str:
    """``text`` with ``secret`` replaced, also at its end where a message cut to ``MAX_MESSAGE`` cut the
    key short."""
    cut_short = len(text) == MAX_MESSAGE + 3 and text.endswith("...")
    text = text.replace(secret, REDACTED)
    if cut_short:
        head = text[:-3]
        for size in range(min(len(secret) - 1, len(head)), _MIN_KEY_PART - 1, -1):
            if head.endswith(secret[:size]):
                return head[:-size] + REDACTED + "..."
    return text


@dataclass(slots=True)
class APIError(Exception):
    """An error to send the client: HTTP status before the stream started, an error event after."""

    status: int
    body: dict[str, Any]
    quirk: str | None = None
    """The quirk the upstream showed by sending it this way, for the repair counters."""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    """Headers of the upstream's error response the client needs with it (when to retry)."""

    STATUS: ClassVar[int] = 500
    """The status ``of`` gives this class's errors."""
    CODE: ClassVar[str | None] = None
    """The ``code`` ``of`` gives this class's errors."""
    TYPE: ClassVar[str | None] = None
    """The ``type`` ``of`` gives this class's errors (None: the one its status has)."""

    @classmethod
    def make(
        cls,
        message: str,
        status: int,
        *,
        code: str | None = None,
        type: str | None = None,
        param: str | None = None,
        quirk: str | None = None,
    ) -> Self:
        return cls(status, error_body(message, status, type=type, param=param, code=code), quirk)

    @classmethod
    def of(cls, message: str, *, param: str | None = None, quirk: str | None = None) -> Self:
        """An error of this class with its own status, code and type (``STATUS``, ``CODE``, ``TYPE``)."""
        return cls.make(message, cls.STATUS, code=cls.CODE, type=cls.TYPE, param=param, quirk=quirk)

    @property
    def message(self) -> str:
        return str(self.body["error"]["message"])

    @property
    def param(self) -> str | None:
        param = self.body["error"].get("param")
        return param if isinstance(param, str) else None

    @property
    def code(self) -> str | None:
        code = self.body["error"].get("code")
        return code if isinstance(code, str) else None

    def response(self, body: dict[str, Any] | None = None) -> JSONResponse:
        """This error as an HTTP response (``body``: this error's body as a protocol words it)."""
        response = JSONResponse(self.body if body is None else body, status_code=self.status)
        response.raw_headers.extend(self.headers)  # Retry-After
        return response

    def redacted(self, secret: str | None) -> Self:
        """This error with ``secret`` (the upstream key an upstream may echo) cut out of every field,
        and the upstream's headers it carries that hold it (whatever the key's length, as in every
        relayed header) left out: they are a retry's advice, which a key in them makes none."""
        if not secret:
            return self
        key = secret.encode()
        headers = [(name, value) for name, value in self.headers if key not in value]
        fields = self.body["error"]
        error = fields
        if len(secret) >= MIN_SECRET_IN_BODY:  # a placeholder: cutting it would garble the message
            error = {k: redact_text(v, secret) if isinstance(v, str) else v for k, v in fields.items()}
        if error == fields and headers == self.headers:
            return self
        return type(self)(self.status, {"error": error}, self.quirk, headers)


class InvalidRequest(APIError):
    """The client's request is not one the proxy or its upstream takes (a 400, or the 4xx it gets)."""

    __slots__ = ()
    STATUS = 400
    TYPE = "invalid_request_error"


class ContextOverflow(InvalidRequest):
    """Prompt and completion do not fit the model's context: the client's error, as OpenAI says it."""

    __slots__ = ()
    CODE = "context_length_exceeded"


class UnsupportedParameter(InvalidRequest):
    """A parameter the upstream does not support (it said so with a 500, Q43)."""

    __slots__ = ()
    CODE = "unsupported_parameter"


def error_response(
    message: str,
    status: int,
    *,
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """An error the server answers by itself (a bad key, an unknown path, a full queue), as an HTTP
    response with an OpenAI error body: the one helper every route of the proxy and the backend uses."""
    return JSONResponse(
        error_body(message, status, code=code, param=param), status_code=status, headers=headers
    )
