"""The error hierarchy: the trees conformance/api_errors.py and proxy/errors.py document are the ones
the classes form, each class gives its own status and code, and upstream error bodies come back as the
class they describe."""

from __future__ import annotations

import re
from types import ModuleType

import pytest

from conformance import api_errors
from proxy import errors

_TREE_LINE = re.compile(r"^(?P<indent>[│ ]*)(?:[├└]── )?(?P<name>[A-Z]\w+)\s{2,}")


def _documented_tree(module: ModuleType) -> dict[str, str | None]:
    """Each class named in the module docstring's tree, with the class it hangs from."""
    doc = module.__doc__ or ""
    block = doc.split("::", 1)[1].split("\n\n", 2)[1]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        match = _TREE_LINE.match(line.strip("\n")[4:])
        assert match, line
        depth = len(match["indent"]) + (4 if "──" in line else 0)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match["name"]] = stack[-1][1] if stack else None
        stack.append((depth, match["name"]))
    return parents


def _subclasses(cls: type[api_errors.APIError]) -> list[type[api_errors.APIError]]:
    found = [cls]
    for sub in cls.__subclasses__():
        found.extend(_subclasses(sub))
    return found


@pytest.mark.parametrize("module", [api_errors, errors], ids=lambda m: m.__name__)
def test_the_documented_tree_is_the_class_tree(module: ModuleType) -> None:
    actual = {
        cls.__name__: None if cls is api_errors.APIError else cls.__bases__[0].__name__
        for cls in _subclasses(api_errors.APIError)
        if cls.__module__ == module.__name__
    }
    documented = {name: parent for name, parent in _documented_tree(module).items() if name in actual}
    assert documented == actual
    assert set(actual) <= set(module.__all__)


@pytest.mark.parametrize(
    ("cls", "status", "etype", "code"),
    [
        (api_errors.InvalidRequest, 400, "invalid_request_error", None),
        (api_errors.ContextOverflow, 400, "invalid_request_error", "context_length_exceeded"),
        (api_errors.UnsupportedParameter, 400, "invalid_request_error", "unsupported_parameter"),
        (errors.UpstreamError, 502, "server_error", None),
        (errors.UpstreamRefused, 502, "server_error", None),
        (errors.UpstreamTimeout, 504, "server_error", "upstream_timeout"),
        (errors.UpstreamBroke, 502, "server_error", None),
        (errors.UpstreamInvalidData, 502, "server_error", None),
        (errors.UpstreamRedirect, 502, "server_error", None),
    ],
)
def test_each_class_gives_its_status_type_and_code(
    cls: type[api_errors.APIError], status: int, etype: str, code: str | None
) -> None:
    error = cls.of("words", param="messages")
    assert type(error) is cls
    assert error.status == status
    assert error.body == {"error": {"message": "words", "type": etype, "param": "messages", "code": code}}


def test_the_timeouts_are_upstream_timeouts() -> None:
    for error in (errors.upstream_timeout("slow"), errors.first_byte_timeout_error()):
        assert type(error) is errors.UpstreamTimeout
        assert (error.status, error.body["error"]["code"]) == (504, "upstream_timeout")


@pytest.mark.parametrize(
    ("payload", "status", "cls", "final", "code"),
    [
        (  # llama.cpp's 400 (Q44)
            {
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size",
                    "type": "x",
                }
            },
            400,
            api_errors.ContextOverflow,
            400,
            "context_length_exceeded",
        ),
        (  # an overflow reported as a 500 is still the client's (seed 003)
            {"error": "Requested tokens (900) exceed context window of 512"},
            500,
            api_errors.ContextOverflow,
            400,
            "context_length_exceeded",
        ),
        (  # a 500 for a parameter the upstream lacks (Q43)
            {"detail": "Unsupported param: logit_bias"},
            500,
            api_errors.UnsupportedParameter,
            400,
            "unsupported_parameter",
        ),
        (  # llama-cpp-python's 500 for a value outside a parameter's choices (response_format json_schema)
            {
                "error": {
                    "message": "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
                    "'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}",
                    "type": "internal_server_error",
                }
            },
            500,
            api_errors.UnsupportedParameter,
            400,
            "unsupported_parameter",
        ),
        (
            {"object": "error", "message": "model is busy", "code": 503},
            200,
            errors.UpstreamReported,
            503,
            None,
        ),
        (
            {"error": {"message": "bad key", "type": "invalid_request_error", "code": "invalid_api_key"}},
            401,
            errors.UpstreamReported,
            401,
            "invalid_api_key",
        ),
    ],
)
def test_an_upstream_error_payload_is_the_class_it_describes(
    payload: dict[str, object], status: int, cls: type[api_errors.APIError], final: int, code: str | None
) -> None:
    error = errors.error_from_payload(payload, status)
    assert type(error) is cls
    assert (error.status, error.body["error"]["code"]) == (final, code)


def test_an_upstream_error_page_is_reported_at_its_status() -> None:
    page = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
    error = errors.error_from_http(503, "text/html", page)
    assert type(error) is errors.UpstreamReported
    assert error.status == 503
    assert error.message == "upstream error (HTTP 503): 502 Bad Gateway"


def test_an_overflow_in_an_error_page_is_a_context_overflow() -> None:
    error = errors.error_from_http(500, "text/plain", b"prompt is too long for this model\n")
    assert type(error) is api_errors.ContextOverflow
    assert error.status == 400


def test_redacting_keeps_the_class() -> None:
    key = "sk-upstream-0123456789"
    error = errors.UpstreamTimeout.of(f"slow with key {key}")
    error.headers = [(b"retry-after", b"1")]
    redacted = error.redacted(key)
    assert type(redacted) is errors.UpstreamTimeout
    assert redacted.message == f"slow with key {api_errors.REDACTED}"
    assert (redacted.status, redacted.headers) == (504, [(b"retry-after", b"1")])
