"""OpenAI error bodies, built in one place for the proxy, the backend and the suite."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "CONTEXT_OVERFLOW",
    "STATUS_INSTEAD",
    "UNSUPPORTED_PARAMETER",
    "error_body",
    "error_bytes",
    "error_type_for_status",
]

STATUS_INSTEAD = {402: 429, 422: 400, 424: 502}
"""Error statuses servers answer with where OpenAI answers another (Q45 TGI's 422 and 424, Q53
DeepSeek's 402 and 422): the proxy answers OpenAI's, the suite warns."""

CONTEXT_OVERFLOW = re.compile(
    r"context (size|length|window)|maximum context|exceeds? the available context|exceed_context_size"
    r"|context_length_exceeded|prompt is too long|too many tokens|input is too long|"
    r"inputs.{0,20}tokens.{0,40}must be <=",
    re.IGNORECASE,
)
"""How servers word a prompt longer than the model's context (seed 003, Q43-Q48): a client error, 400."""

UNSUPPORTED_PARAMETER = re.compile(
    r"unsupported param|only no \w+ is supported|cannot use tools with stream|tools param requires"
    r"|is not supported with tools|\binput should be '",
    re.IGNORECASE,
)
"""How llama.cpp words a parameter it refuses, which it answers with 500 (Q43, Q66, Q69, Q72, Q75):
the request's fault, which OpenAI answers 400 ``unsupported_parameter``. llama-cpp-python's FastAPI
answers a value outside a parameter's choices with 500 and pydantic's "Input should be 'text' or
'json_object'" (``response_format: json_schema``, conformance/corpus/llama-cpp-python)."""

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    408: "timeout_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_exceeded",
}


def error_type_for_status(status: int) -> str:
    """The ``type`` OpenAI uses for a status: client errors are requests, 5xx are the server's."""
    if status in _TYPE_BY_STATUS:
        return _TYPE_BY_STATUS[status]
    return "server_error" if status >= 500 else "invalid_request_error"


def error_body(
    message: str,
    status: int = 400,
    *,
    type: str | None = None,
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` with all four keys present (spec: all required)."""
    return {
        "error": {
            "message": message,
            "type": type or error_type_for_status(status),
            "param": param,
            "code": code,
        }
    }


def error_bytes(message: str, status: int = 400, **kwargs: Any) -> bytes:
    return json.dumps(error_body(message, status, **kwargs), separators=(",", ":")).encode()
