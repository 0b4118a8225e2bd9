"""Errors and HTTP: error events inside a 200 stream (note N2, Q42-Q51), error body shape and status,
status code and content type of the response (spec §2.11, §6)."""

from __future__ import annotations

from typing import Any

from conformance import schemas
from conformance.openai_errors import CONTEXT_OVERFLOW, STATUS_INSTEAD, UNSUPPORTED_PARAMETER
from conformance.rules.context import Context
from conformance.rules.intents import CONTEXT_OVERFLOW_INTENT
from conformance.rules.leaks import error_leaks

__all__ = [
    "error_body",
    "error_event",
    "error_text",
    "http_status",
    "is_error_payload",
    "json_content_type",
    "overflow_code",
    "says_overflow",
]

OVERFLOW_CODE = "context_length_exceeded"
_OVERFLOW_NAMES = frozenset({OVERFLOW_CODE, "exceed_context_size_error"})
_CLIENT_ERROR_CODES = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "invalid_request_error"}
)
# Why each status of STATUS_INSTEAD matters to a client, and its quirk.
_WHY_NOT = {
    402: ("OpenAI answers an exhausted quota with 429; openai-python has no class for 402", "Q53"),
    422: ("OpenAI answers invalid parameters with 400; a client catching BadRequestError misses it", "Q53"),
    424: ("OpenAI answers a failed model call with a 5xx, which clients retry; 424 has no class", "Q45"),
}


def is_error_payload(payload: Any) -> bool:
    """What openai-python raises APIError for: a mapping with a truthy ``error`` key."""
    return isinstance(payload, dict) and bool(payload.get("error"))


def error_event(ctx: Context, event: int, payload: dict[str, Any]) -> None:
    """An error inside an HTTP 200 stream: the request failed after the status was committed (N2). A
    context overflow said so is its own, more specific finding: the client gets an ``APIError`` where
    it needed a 400 ``context_length_exceeded`` to trim its history (llama-server's ``server_error``
    event, Q42), whether or not the exchange was recorded as an overflow probe."""
    ctx.in_band_errors += 1
    err = payload.get("error")
    message = err.get("message") if isinstance(err, dict) else err
    if says_overflow(err):
        ctx.error(
            "context-overflow-in-stream",
            f"a context overflow sent as an error event in an HTTP 200 stream, not HTTP 400"
            f" context_length_exceeded: {str(message)[:160]}",
            event=event,
            pointer="/error",
            quirk="Q42",
        )
    else:
        ctx.error(
            "error-in-stream",
            f"error event inside an HTTP 200 stream: {str(message)[:160]}",
            event=event,
            pointer="/error",
            quirk=_error_quirk(payload),
        )
    error_leaks(ctx, event, payload)
    odd = _odd_shape(payload)
    if odd:
        ctx.warn(
            "error-event-shape",
            f"error event not in OpenAI's shape: {odd}",
            event=event,
            pointer="/error",
            quirk=_error_quirk(payload),
        )


def says_overflow(err: Any) -> bool:
    """An error object (or bare message) that says the prompt is longer than the context: by its words
    (``CONTEXT_OVERFLOW``) or by a name servers give it in ``code`` or ``type``."""
    if isinstance(err, str):
        return CONTEXT_OVERFLOW.search(err) is not None
    if not isinstance(err, dict):
        return False
    message = err.get("message")
    if isinstance(message, str) and CONTEXT_OVERFLOW.search(message):
        return True
    return any(isinstance(err.get(k), str) and err[k] in _OVERFLOW_NAMES for k in ("code", "type"))


def _odd_shape(payload: dict[str, Any]) -> str | None:
    """Every way an error event differs from OpenAI's error object: the keys a body must have too
    (``param`` and ``code`` present, strings or null, as schemas/error.json), and the extras servers add."""
    err = payload.get("error")
    if not isinstance(err, dict):
        return "'error' is not an object"
    problems = [f"no {k!r}" for k in ("message", "type") if not isinstance(err.get(k), str)]
    problems += [f"no {k!r}" for k in ("param", "code") if k not in err]
    problems += [
        f"{k!r} is {type(err[k]).__name__}, not a string or null"
        for k in ("param", "code")
        if k in err and err[k] is not None and not isinstance(err[k], str)
    ]
    problems += [f"extra {k!r}" for k in ("http_status_code", "trace", "object") if k in err]
    problems += [f"top-level {k!r}" for k in payload if k != "error"]
    return ", ".join(problems) or None


def _error_quirk(payload: dict[str, Any]) -> str:
    err = payload.get("error")
    if not isinstance(err, dict) or "http_status_code" in err or "error_type" in payload:
        return "Q45"
    if "trace" in err:
        return "Q49"
    if "message" in payload:
        return "Q48"
    if err.get("object") == "error":
        return "Q47"
    return "N2"


def http_status(ctx: Context) -> None:
    """2xx responses are 200; a stream is ``text/event-stream``, anything else JSON (spec §6)."""
    status = ctx.status
    if status is None:
        return
    if status != 200 and status < 400:
        ctx.error("http-status", f"HTTP {status}; a successful completion is HTTP 200", quirk="spec")
    elif status in STATUS_INSTEAD:
        why, quirk = _WHY_NOT[status]
        ctx.warn("http-status-nonstandard", f"HTTP {status}: {why}", quirk=quirk)
    content_type = _content_type(ctx)
    if status == 200 and ctx.stream and content_type and content_type != "text/event-stream":
        ctx.error("content-type", f"stream sent as {content_type!r}, not 'text/event-stream'", quirk="spec")


def _content_type(ctx: Context) -> str:
    return (ctx.headers.get("content-type") or "").split(";", 1)[0].strip().lower()


def json_content_type(ctx: Context) -> None:
    """A body that is JSON says so (spec). Judged once the body parsed: a body that is not JSON, sent
    as ``text/plain``, is labelled truly, and its fault is the body's (``body-not-json``,
    ``error-body-shape``), not said twice (issue 33: llama-cpp-python's plain-text 500)."""
    content_type = _content_type(ctx)
    if content_type and not content_type.endswith("json"):
        ctx.error("content-type", f"JSON body sent as {content_type!r}", quirk="spec")


def error_body(ctx: Context, body: Any) -> None:
    """An error response: ``{"error": {message, type, param, code}}`` with a fitting status (Q43-Q46)."""
    error_shape(ctx, body)
    error_leaks(ctx, None, body)
    status = ctx.status
    err = body.get("error") if isinstance(body, dict) else None
    if status is None or not isinstance(err, dict):
        return
    ctx.error_object = err  # what the intents read (a context overflow's code)
    if status < 400:
        ctx.error("error-with-200", f"error body sent with HTTP {status}", quirk="Q43")
        return
    message = err.get("message")
    text = message if isinstance(message, str) else ""
    overflow = CONTEXT_OVERFLOW.search(text) is not None
    overflow_code(ctx, status, err, overflow or ctx.intent == CONTEXT_OVERFLOW_INTENT)
    client_error_status(ctx, status, err, text, overflow)


def error_shape(ctx: Context, body: Any) -> None:
    """The body is OpenAI's error object, wrapped in ``error`` (Q45, Q46). A difference every strict
    client reads past (:func:`_tolerated`) is a warning; one that loses what went wrong is an error."""
    if isinstance(body, dict) and body.get("object") == "error" and "error" not in body:
        ctx.error("error-body-shape", "top-level error object without the 'error' wrapper", quirk="Q46")
        return
    quirk = "Q45" if isinstance(body, dict) and isinstance(body.get("error"), str) else "spec"
    for error in schemas.check("error", body).errors:
        where = schemas.pointer(error.absolute_path)
        message = f"{where or '/'}: {error.message[:160]}"
        if _tolerated(error, where):
            ctx.warn("error-body-shape", message, pointer=where, quirk=quirk)
        else:
            ctx.error("error-body-shape", message, pointer=where, quirk=quirk)


_LOOSE_KEYS = frozenset({"type", "param", "code"})
"""Keys of the error object that strict clients read loosely: openai-python reads each with ``get``,
and the AI SDK's openai-compatible error schema makes them optional (``type`` a string, ``param`` any
value, ``code`` a string or a number: llama-server's integer ``code``, issue 33). Only ``message`` is
what a client must have to tell its user what failed."""


def _tolerated(error: Any, where: str) -> bool:
    """A schema difference of the error object that no strict client fails on: one of
    :data:`_LOOSE_KEYS` missing, ``param`` of any type, or ``code`` a number."""
    if where == "/error" and error.validator == "required":
        quoted = str(error.message).split("'")  # "'param' is a required property"
        return len(quoted) > 1 and quoted[1] in _LOOSE_KEYS
    if where == "/error/param":
        return True
    if where == "/error/code":
        return isinstance(error.instance, (int, float)) and not isinstance(error.instance, bool)
    return False


def client_error_status(ctx: Context, status: int, err: dict[str, Any], text: str, overflow: bool) -> None:
    """A client's error (by its code or type, a context overflow, a refused parameter) answered with a
    5xx, where OpenAI answers 400."""
    refused = UNSUPPORTED_PARAMETER.search(text) is not None
    named = next(
        (v for v in (err.get("code"), err.get("type")) if isinstance(v, str) and v in _CLIENT_ERROR_CODES),
        None,
    )
    if status < 500 or not (named or overflow or refused):
        return
    if ctx.sink.fired("feature-server-error") or ctx.sink.fired("invalid-request-status"):
        return  # the request's own rule said it got a 5xx: one fact, reported by its most specific rule
    if named:
        what = f"client error ({named})"
    else:
        what = "a prompt longer than the context" if overflow else "a refused parameter"
    # llama.cpp's 500 for a parameter it refuses (echo, best_of, suffix...) is Q72; the rest Q43.
    quirk = "Q72" if refused and not overflow else "Q43"
    ctx.error("error-status", f"{what} answered with HTTP {status}; OpenAI uses 400", quirk=quirk)


def error_text(ctx: Context, raw: bytes) -> None:
    """An error response whose body is not JSON still must not show a stack frame or a path."""
    error_leaks(ctx, None, raw[:65536].decode("utf-8", "replace"), pointer=None)


def overflow_code(ctx: Context, status: int, err: dict[str, Any], overflow: bool) -> None:
    """A prompt longer than the context refused with a 4xx carries ``code: "context_length_exceeded"``,
    which clients (LangChain, LiteLLM) match to trim history and retry; llama.cpp names it
    ``exceed_context_size_error`` (Q43). Recognised by the message (``CONTEXT_OVERFLOW``, as check's
    overflow probe words are), by a name servers use for it, or by the exchange's intent (check's
    ``context-overflow`` probes); 429 is a rate limit, not the context."""
    code, kind = err.get("code"), err.get("type")
    named = any(isinstance(v, str) and v in _OVERFLOW_NAMES for v in (code, kind))
    if not 400 <= status < 500 or status == 429 or code == OVERFLOW_CODE or not (overflow or named):
        return
    ctx.error(
        "context-overflow-code",
        f"a context overflow refused with code {code!r}, not {OVERFLOW_CODE!r}",
        pointer="/error/code",
        quirk="Q43",
    )
