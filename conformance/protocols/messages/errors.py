"""Errors as Anthropic's Messages API words them: ``{"type": "error", "error": {"type", "message"}}``.

A request Anthropic refuses names the field as its API does, by a dotted path and pydantic's words
(``messages.1.content.0.id: Field required``, ``temperature: Input should be less than or equal to
1``; seen in its 400s as clients quote them, e.g. ``tools.0.custom.name: String should match pattern``):
the schema check's errors are worded so here (:func:`reject_field`), not in OpenAI's
``Missing required parameter: 'messages[1].content[0].id'``.

The error types by status are Anthropic's (its API reference, "Errors"; anthropic-python
``types/shared/*_error_object.py``): 400 ``invalid_request_error``, 401 ``authentication_error``, 402
``billing_error``, 403 ``permission_error``, 404 ``not_found_error``, 413 ``request_too_large``, 429
``rate_limit_error``, 500 ``api_error``, 504 ``timeout_error``, 529 ``overloaded_error``; a proxy's 503
(no upstream ready, the server stopping) is Anthropic's ``overloaded_error`` at the status the proxy
answers, so that the SDKs retry it, and any other 5xx ``api_error``. The SDKs raise by status and show
the message; an error event inside a stream (``event: error``) has the same body.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from jsonschema import ValidationError

from conformance.api_errors import InvalidRequest
from conformance.context_overflow import overflow_counts

__all__ = [
    "ERROR_TYPES",
    "MessagesError",
    "field_path",
    "messages_error",
    "overflow_message",
    "refused",
    "reject_field",
    "status_of",
]

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}

# The chat parameter an error of the translated request names -> the Messages parameter it came from.
_PARAMS = {
    "stop": "stop_sequences",
    "response_format": "output_config.format",
    "reasoning_effort": "thinking",
    "user": "metadata.user_id",
    "stream_options": "stream",
}


# A chat content part's type an error names -> the Messages block it came from: "image_url is only
# supported by certain models" reached an Anthropic client, whose request had an ``image`` block.
_BLOCKS = {"image_url": "image"}


def _error_type(status: int) -> str:
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def refused(message: str, status: int = 400) -> dict[str, Any]:
    """Anthropic's error body for ``message`` at ``status``."""
    return {"type": "error", "error": {"type": _error_type(status), "message": message}}


_STATUS_OF_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "rate_limit_exceeded": 429,
    "rate_limit_error": 429,
}
_STATUS_OF_CODE = {"upstream_timeout": 504, "server_shutting_down": 503, "upstream_unavailable": 503}


def status_of(body: dict[str, Any]) -> int:
    """The status an OpenAI error body stands for, where none came with it (an error that broke a
    stream off): by its ``code``, else its ``type``; a server error otherwise."""
    error = body.get("error")
    if not isinstance(error, dict):
        return 500
    code, kind = error.get("code"), error.get("type")
    if isinstance(code, str) and code in _STATUS_OF_CODE:
        return _STATUS_OF_CODE[code]
    return _STATUS_OF_TYPE.get(kind, 500) if isinstance(kind, str) else 500


def overflow_message(text: str) -> str:
    """A context overflow in Anthropic's words, which Claude Code reads to compact its history: ``prompt
    is too long: N tokens > M maximum``, or, where ``max_tokens`` made it overflow, ``input length and
    `max_tokens` exceed context limit: N + K > M, ...``; the numbers from the core's OpenAI wording."""
    counts = overflow_counts(text)
    if counts is None:
        return f"prompt is too long: {text}"
    tokens, limit, asked = counts.prompt, counts.limit, counts.completion
    if tokens >= limit or not asked:
        return f"prompt is too long: {tokens} tokens > {limit} maximum"
    return (
        f"input length and `max_tokens` exceed context limit: {tokens} + {asked} > {limit}, decrease input "
        "length or `max_tokens` and try again"
    )


def messages_error(body: dict[str, Any], status: int | None = None) -> dict[str, Any]:
    """An OpenAI error body (the core's, or the chat request's that a Messages request became) as
    Anthropic's, the chat parameter it names in the client's words; ``status``: the one it is answered
    with (None: a stream's, read off the body)."""
    if status is None:
        status = status_of(body)
    error = body.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    text = str(message) if message else f"the request failed (HTTP {status})"
    if isinstance(error, dict) and error.get("code") == "context_length_exceeded":
        return refused(overflow_message(text), status)
    param = error.get("param") if isinstance(error, dict) else None
    for chat, asked in _PARAMS.items():
        # Where the error names its parameter only that is renamed, not a value that reads alike ('user'
        # among a role's allowed values was 'metadata.user_id'); without one, 'user' is left alone.
        renamed = _names(param, chat) if isinstance(param, str) else chat != "user"
        if not renamed:
            continue
        text = re.sub(rf"'{re.escape(chat)}(?:[.\[][^']*)?'", f"'{asked}'", text)
    if isinstance(param, str) and param.startswith("messages["):
        for chat_kind, kind in _BLOCKS.items():  # (a content part refused by its chat type)
            text = text.replace(f" {chat_kind} ", f" {kind} ")
    return refused(text, status)


def _names(param: str, chat: str) -> bool:
    """Whether the error's ``param`` is the chat parameter ``chat`` or a part of it (``stop[1]``)."""
    return param == chat or param.startswith((chat + ".", chat + "["))


class MessagesError(InvalidRequest):
    """A Messages request this server refuses, already in Anthropic's words (a 400, or the 4xx given)."""

    __slots__ = ()

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(status, refused(message, status))


def field_path(*parts: str | int) -> str:
    """A field as Anthropic's errors name it: ``messages.1.content.0``."""
    return ".".join(str(part) for part in parts)


# pydantic's names of JSON's types, as Anthropic's errors say them ("Input should be a valid list").
_VALID = {
    "string": "a valid string",
    "integer": "a valid integer",
    "number": "a valid number",
    "boolean": "a valid boolean",
    "array": "a valid list",
    "object": "a valid dictionary",
}


_BOUNDS = {
    "minimum": "Input should be greater than or equal to {}",
    "maximum": "Input should be less than or equal to {}",
    "minItems": "List should have at least {} item{} after validation",
    "maxItems": "List should have at most {} item{} after validation",
}


def _input_should_be(error: ValidationError) -> str:
    """What a value that failed ``error``'s keyword should have been, in pydantic's words."""
    schema = error.schema if isinstance(error.schema, dict) else {}
    keyword = str(error.validator)
    limit: Any = error.validator_value
    if keyword in _BOUNDS:
        return _BOUNDS[keyword].format(limit, "" if limit == 1 else "s")
    if "x-expects" in schema:  # the schema's own words of what a value must be ("'user' or 'assistant'")
        return f"Input should be {schema['x-expects']}"
    if keyword == "type":
        kinds = [limit] if isinstance(limit, str) else list(limit)
        return "Input should be " + " or ".join(_VALID.get(kind, kind) for kind in kinds if kind != "null")
    if keyword == "enum":
        *others, last = [f"'{value}'" for value in limit]
        return "Input should be " + (f"{', '.join(others)} or {last}" if others else last)
    return "Input is not valid here"


def reject_field(error: ValidationError, path: list[Any], instance: Any) -> NoReturn:
    """The request schema's first error as Anthropic's 400 (a :data:`Rejecter` of the schema check)."""
    if error.validator == "required":
        required: Any = error.validator_value
        missing = next(name for name in required if name not in instance)
        raise MessagesError(f"{field_path(*path, missing)}: Field required")
    raise MessagesError(f"{field_path(*path) or 'body'}: {_input_should_be(error)}")
