"""The proxy's upstream errors, and upstream error shapes (quirks section E, note N2) turned into them.

Every error a client gets is a :class:`conformance.api_errors.APIError` (the hierarchy's root and the
client's own errors live in the core, shared with the backend). What failed at the upstream is one of
these subclasses::

    APIError                       any error sent to a client (conformance/api_errors.py)
    └── UpstreamError              the upstream failed the request
        ├── UpstreamRefused        502: no connection could be made
        ├── UpstreamTimeout        504 upstream_timeout: too slow to connect, answer or go on (Q25)
        ├── UpstreamBroke          502: closed, not HTTP, badly framed: the stream or protocol broke
        ├── UpstreamInvalidData    502: a body that is no valid compression, or too large
        ├── UpstreamRedirect       502: a redirect, which the proxy does not follow
        └── UpstreamReported       the upstream's own error response, with the status it maps to

Lower errors on the way to and from the upstream (httpx's from proxy/transport.py, asyncio's
``TimeoutError``, ``OSError``, zlib's) become these classes in one table, proxy/upstream_faults.py; a
client body past jsoncodec's depth (``TooDeep``) is an ``InvalidRequest``
(conformance/request_validation.py). Upstream error bodies in any N2 shape become them here: an
``error:`` SSE line (Q42), a string error (Q45), an odd error object (Q45/Q47-Q49/Q51), a top-level
``{"object": "error"}`` (Q46), an HTML or plain-text error page (``error_from_payload``,
``error_from_http``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from conformance import jsoncodec
from conformance.api_errors import MAX_MESSAGE, APIError, ContextOverflow, UnsupportedParameter
from conformance.openai_errors import CONTEXT_OVERFLOW, STATUS_INSTEAD, UNSUPPORTED_PARAMETER

__all__ = [
    "UpstreamBroke",
    "UpstreamError",
    "UpstreamInvalidData",
    "UpstreamRedirect",
    "UpstreamRefused",
    "UpstreamReported",
    "UpstreamTimeout",
    "error_from_http",
    "error_from_payload",
    "first_byte_timeout_error",
    "is_error_payload",
    "naming_its_input",
    "scrub_message",
    "upstream_timeout",
]

# Local paths and tracebacks must not reach clients (DESIGN: never a stack trace or a local path). A
# path is cut out whole (issue 18 found the tail of each of these left in a message): spaces inside a
# directory name (a separator after it says the path goes on) and inside a last name ending ".gguf".
# A bare file name ("x.gguf") is left: it names a model as clients ask for it, and is no place. The
# repetitions are bounded (64 names, 8 words a name): unbounded, "a/b a/b ..." over the 64 KiB of an
# error body took 30 s of backtracking.
_SEG = r"[\w.@+%~$-]+"
_SPACED = rf"{_SEG}(?: {_SEG}){{0,7}}"
_LAST = rf"(?:{_SPACED}\.gguf\b|{_SEG})"
_PATH = re.compile(
    "|".join(
        [
            rf"\bfile:(?://[\w.-]*)?(?:/[A-Za-z]:)?(?:/{_SPACED}){{0,63}}/{_LAST}/?",  # file:///home/u/x.gguf
            # /home/u/x (two names at least: not "/v1"); an API's path (/v1/embeddings) is no place on
            # the host: a 404's "no route for GET /v1/x" named no route once scrubbed
            rf"(?<![\w:/\\.~-])(?!/v\d+/)(?:/{_SPACED}){{1,63}}/{_LAST}/?",
            rf"(?<!\w)[A-Za-z]:[\\/](?:{_SPACED}[\\/]){{0,63}}{_LAST}[\\/]?",  # C:\Users\u\x.gguf, C:/x
            rf"\\\\{_SEG}(?:\\{_SPACED}){{0,63}}\\{_LAST}\\?",  # UNC: \\server\share\x.gguf
            rf"(?<![\w.@+%~$/\\-]){_SEG}[\\/](?:{_SPACED}[\\/]){{0,63}}{_SPACED}\.gguf\b",  # models/x.gguf
        ]
    )
)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|\nTraceback|\n\s+at |\n\s*File \"")
_TAGS = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")
_TIMEOUT_CODE = "upstream_timeout"
_OPENAI_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "conflict_error",
        "rate_limit_error",
        "rate_limit_exceeded",
        "insufficient_quota",
        "tokens",
        "requests",
        "timeout_error",
        "server_error",
        "service_unavailable_error",
    }
)
"""The error types OpenAI's API answers with (openai-spec.md section 6; "tokens" and "requests" are the
429 types of its rate limits): an upstream's other types are not relayed."""
_IDENTIFIER = re.compile(r"[A-Za-z0-9_.\[\]-]{1,64}")


class UpstreamError(APIError):
    """The upstream failed the request: the proxy answers 502, or 504 when it was too slow."""

    __slots__ = ()
    STATUS = 502


class UpstreamRefused(UpstreamError):
    """No connection to the upstream could be made (refused, unreachable, no such host)."""

    __slots__ = ()


class UpstreamTimeout(UpstreamError):
    """The upstream was too slow to connect, to answer or to go on (Q25): asking again may succeed, but
    a request it is still running must not be sent twice."""

    __slots__ = ()
    STATUS = 504
    CODE = _TIMEOUT_CODE


class UpstreamBroke(UpstreamError):
    """The connection or its HTTP broke: closed early, a reply that is not HTTP, a body badly framed."""

    __slots__ = ()


class UpstreamInvalidData(UpstreamError):
    """The upstream sent a body the proxy cannot read: compression that is not valid, or too large."""

    __slots__ = ()


class UpstreamRedirect(UpstreamError):
    """The upstream redirected the request; the proxy follows no redirects."""

    __slots__ = ()


class UpstreamReported(UpstreamError):
    """The upstream answered with an error of its own (any N2 shape), at the status it maps to."""

    __slots__ = ()


def upstream_timeout(message: str) -> UpstreamTimeout:
    """A 504 for an upstream too slow to connect, to answer or to go on."""
    return UpstreamTimeout.of(message)


def first_byte_timeout_error() -> UpstreamTimeout:
    return UpstreamTimeout.of("the upstream server sent nothing before the first-byte timeout")


def scrub_message(text: str) -> str:
    """One line, no traceback, no local paths, bounded length."""
    text = _TRACEBACK.split(text, 1)[0]
    # Cut to a few times the bound before the paths are looked for: what is past it is not sent, and
    # the path search over a whole 64 KiB error body costs a quarter of a second at worst.
    text = _SPACE.sub(" ", text)[: MAX_MESSAGE * 4]
    text = _SPACE.sub(" ", _PATH.sub("<path>", text)).strip()
    return text[:MAX_MESSAGE] + ("..." if len(text) > MAX_MESSAGE else "")


_INPUTS = {"chat": "messages", "completions": "prompt"}
"""The parameter a request's input is in, by the endpoint: what a context overflow names."""


def naming_its_input(error: APIError, endpoint: str) -> APIError:
    """An upstream's context overflow naming the input of the request it answered: llama-cpp-python names
    ``messages`` for a completion's ``prompt`` too (found by black-box testing)."""
    own = _INPUTS.get(endpoint)
    if not isinstance(error, ContextOverflow) or error.param not in _INPUTS.values() or own == error.param:
        return error
    return ContextOverflow.of(error.message, param=own, quirk=error.quirk)


def is_error_payload(obj: Any) -> bool:
    """Whether a decoded JSON payload is an error in any of the N2 shapes rather than a completion."""
    if not isinstance(obj, dict):
        return False
    if obj.get("error"):
        return True
    return obj.get("object") == "error" or (obj.get("type") == "error" and "choices" not in obj)


def _is_number(text: str) -> bool:
    """Whether ``int`` reads ``text``: ``str.isdigit`` alone also takes digits ``int`` cannot read ("²"),
    and an upstream error with such a ``code`` became the proxy's own 500 with a traceback."""
    return text.isascii() and text.isdigit()


def _int_status(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
        return value
    if isinstance(value, str) and _is_number(value) and 400 <= int(value) <= 599:
        return int(value)
    return None


def error_from_payload(obj: Any, status: int | None = None, *, quirk: str | None = None) -> APIError:
    """An OpenAI error from a decoded upstream error payload (any N2 shape) and the HTTP status seen."""
    outer: dict[str, Any] = obj if isinstance(obj, dict) else {}
    inner: Any = outer.get("error", obj)
    message, code, etype, param, hinted = "", None, None, None, None
    if isinstance(inner, dict):
        message, code, etype, param, hinted = _object_fields(inner, outer)
    elif isinstance(inner, str):
        message, etype = inner, outer.get("error_type")
        hinted = _int_status(outer.get("code")) or _int_status(outer.get("status"))
    if not message and isinstance(outer.get("message"), str):
        message = outer["message"]
    return _build(
        message or "the upstream server reported an error", hinted or status, code, etype, param, quirk
    )


def _object_fields(inner: dict[str, Any], outer: dict[str, Any]) -> tuple[str, Any, Any, Any, int | None]:
    """Message, code, type, param and the status it hints at, of an error object (``inner``, found in
    ``outer`` or the payload itself)."""
    message = _words(inner.get("message") or inner.get("msg") or inner.get("detail"))
    code = inner.get("code")
    hinted = _int_status(inner.get("http_status_code")) or _int_status(inner.get("status"))
    return (
        message,
        code,
        inner.get("type") or outer.get("error_type"),
        inner.get("param"),
        hinted or _int_status(code),
    )


def _words(value: Any) -> str:
    """An error's message as text: FastAPI-style ``detail`` objects and lists are not printed as Python."""
    if isinstance(value, dict):
        return _words(value.get("message") or value.get("msg") or value.get("detail"))
    if isinstance(value, list):
        return json.dumps(value)
    return "" if value is None else str(value)


def _build(
    message: str, status: int | None, code: Any, etype: Any, param: Any, quirk: str | None
) -> APIError:
    # A message that was all traceback says nothing once scrubbed: the status must speak for it.
    message = scrub_message(message) or f"the upstream server reported an error (HTTP {status or 500})"
    str_param = _identifier(param)
    if CONTEXT_OVERFLOW.search(f"{message} {etype or ''} {code or ''}"):
        # Seed 003 / llama.cpp #14566, Q43/Q44/Q47/Q48: overflow is the client's error, 400.
        return ContextOverflow.of(message, param=str_param, quirk=quirk)
    if (status or 500) >= 500 and UNSUPPORTED_PARAMETER.search(message):
        return UnsupportedParameter.of(message, param=str_param, quirk=quirk or "Q43")
    final = STATUS_INSTEAD.get(status or 500, status or 500)
    final = final if 400 <= final <= 599 else 502
    str_code = _identifier(code) if isinstance(code, str) and not _is_number(code) else None
    str_type = _reported_type(etype, final)
    return UpstreamReported.make(message, final, code=str_code, type=str_type, param=str_param, quirk=quirk)


def _identifier(value: Any) -> str | None:
    """An upstream's ``code`` or ``param`` where it is a short name ("messages", "tools[0].function"),
    else None: they reach the client and the access log unscrubbed, so a traceback or a local path an
    upstream puts there must not pass."""
    return value if isinstance(value, str) and _IDENTIFIER.fullmatch(value) else None


def _reported_type(etype: Any, status: int) -> str | None:
    """The upstream's error type where it is one of OpenAI's kind for ``status``; None for the status's own
    (a 5xx is a ``server_error`` unless the upstream named another server type). A type OpenAI does not
    send (a Python class name, a traceback) is the status's own: it would reach the client unscrubbed."""
    given = etype if isinstance(etype, str) and etype in _OPENAI_TYPES else None
    if status >= 500:
        return "server_error" if given in (None, "invalid_request_error") else given
    return None if given == "server_error" else given


def error_from_http(status: int, content_type: str, body: bytes) -> APIError:
    """An OpenAI error from an upstream non-2xx response of any content type (JSON, HTML, plain text)."""
    text = body.decode("utf-8", "replace")
    stripped = text.strip()
    payload = _error_json(stripped) if stripped[:1] in ("{", "[") else None
    if payload is not None:
        already_openai = isinstance(payload.get("error"), dict) and {"message", "type"} <= set(
            payload["error"]
        )
        return error_from_payload(payload, status, quirk=None if already_openai else "Q46")
    if "html" in content_type or stripped.lower().startswith(("<!doctype", "<html")):
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
        text = title.group(1) if title else _TAGS.sub(" ", text)
    else:
        text = next((line for line in text.splitlines() if line.strip()), "")  # a page's first line
    message = scrub_message(text) or f"the upstream server answered HTTP {status}"
    return _build(f"upstream error (HTTP {status}): {message}", status, None, None, None, None)


def _error_json(text: str) -> dict[str, Any] | None:
    """An error body's JSON as an error payload, or None for one that is no JSON error (judged as text)."""
    try:
        obj = jsoncodec.loads(text)
    except ValueError:  # also nested past the parser's depth
        return None
    if not isinstance(obj, dict) or not (is_error_payload(obj) or "message" in obj or "detail" in obj):
        return None
    detail = obj.get("detail")
    if not is_error_payload(obj) and detail:
        # FastAPI's {"detail": ...}: a string, a list of validation errors, or an object
        # (koboldcpp's {"msg", "type"} when its queue is full, Q54).
        return {"error": detail if isinstance(detail, dict) else {"message": _words(detail)}}
    return obj
