"""Whether OpenAI would accept the recorded request, and whether the server answered it as OpenAI would.

Judged from the request and the status alone, in ``validate`` as in ``check``:

- a request OpenAI refuses (not JSON, a schema violation of ``schemas/*_request.json``, or
  ``max_tokens`` with ``max_completion_tokens``; a missing ``model`` is let pass, see
  :func:`conformance.schemas.request_schema`) must get a 4xx; a 2xx is ``invalid-request-accepted``
  (llama-cpp-python answers a completion without ``prompt`` or ``temperature: 7`` with 200 and text);
  any other status is ``invalid-request-status`` (its 500 for ``max_tokens: "eight"``, Q43);
- a server without ``/v1/responses`` (404, 405 or 501 there: most local servers, issue 21), or the
  route of another protocol served by translation, does not support it: ``feature-unsupported``, and
  its 404 body (FastAPI's ``{"detail": ...}``) is not judged as an OpenAI error;
- a request OpenAI accepts that uses an optional feature (``n`` > 1, a prompt array, token ids,
  logprobs, echo, tools, ...) must never get a 5xx (``feature-server-error``: llama-cpp-python's 500 for a
  prompt array, Q73); a server that declines the feature with a clean 4xx is reported as
  ``feature-unsupported``, a warning, as ``check`` always reported it.
"""

from __future__ import annotations

from jsonschema.exceptions import best_match

from conformance import schemas
from conformance.request import Request
from conformance.rules.context import Context

__all__ = [
    "FEATURE_QUIRK",
    "ROUTE_MISSING",
    "declined_feature",
    "refusal",
    "request_acceptance",
    "route_missing",
]

ROUTE_MISSING = frozenset({404, 405, 501})
"""What a server answers on a path it has no route for."""

# The catalogue row of servers that answer a feature with a 5xx, where one names the feature: a prompt
# array (Q73: llama-cpp-python's `assert len(prompt) <= 1`), `n` (Q70), a token-id prompt (Q74), echo,
# best_of and suffix (Q72); Q43 (an unsupported parameter answered 500) for the rest. The one table
# check and validate cite from: check's probes carry no quirk of their own.
FEATURE_QUIRK = {
    "prompt array": "Q73",
    "n": "Q70",
    "token-id prompt": "Q74",
    "echo": "Q72",
    "best_of": "Q72",
    "suffix": "Q72",
}


def refusal(request: Request) -> str | None:
    """Why OpenAI refuses ``request`` with a 400, or None when it accepts it (or cannot be told)."""
    if not request.known or request.schema is None:
        return None
    if request.body is None:
        return "the body is not a JSON object" if request.raw is not None else None
    error = best_match(schemas.request_validator(request.schema).iter_errors(request.body))
    if error is not None:
        where = schemas.pointer(error.absolute_path)
        return f"{where or 'the body'}: {error.message[:160]}"
    if request.limit_conflict and request.endpoint == "chat":
        return "max_tokens and max_completion_tokens are both set (OpenAI: invalid_parameter_combination)"
    return None


def _only_below_output_floor(request: Request) -> bool:
    """OpenAI's one refusal is ``max_output_tokens`` below 16 (schemas/response_request.json): a floor of
    its own that the spec does not state, and that a server serving 8 tokens breaks for no client."""
    if request.schema is None or request.body is None or request.limit_conflict:
        return False
    errors = list(schemas.request_validator(request.schema).iter_errors(request.body))
    return bool(errors) and all(
        list(e.absolute_path) == ["max_output_tokens"] and e.validator == "minimum" for e in errors
    )


def _clean_client_error(ctx: Context) -> bool:
    return ctx.status is not None and 400 <= ctx.status < 500


_PATH_SHOWN = 80
"""The most of a recorded request path a finding names."""


def route_missing(ctx: Context) -> bool:
    """A request of a protocol served by translation (the Responses API) answered as a path the server
    has no route for: a server need not speak it."""
    return ctx.protocol is not None and ctx.request.known and ctx.status in ROUTE_MISSING


def declined_feature(ctx: Context) -> bool:
    """A valid request using an optional feature got a 4xx, or the server has no Responses API."""
    if route_missing(ctx):
        return True
    return bool(ctx.request.features) and _clean_client_error(ctx) and refusal(ctx.request) is None


def request_acceptance(ctx: Context) -> None:
    """The four acceptance rules; quiet without a recorded request or status."""
    request, status = ctx.request, ctx.status
    if not request.known or status is None:
        return
    if route_missing(ctx):
        assert ctx.protocol is not None
        # The path asked for (``/v1/messages/count_tokens``), not the protocol's main route.
        path = ctx.path.split("?", 1)[0] if ctx.path else ctx.protocol.route
        path = path if len(path) <= _PATH_SHOWN else f"{path[:_PATH_SHOWN]}..."
        ctx.warn("feature-unsupported", f"the server has no {path} (HTTP {status})")
        return
    why = refusal(request)
    if why is not None:
        if 200 <= status < 300:
            message = f"OpenAI refuses this request with 400 ({why}); the server answered HTTP {status}"
            if _only_below_output_floor(request):
                # No client fails on a limit below OpenAI's pedantic floor being served (policy,
                # docs/validate.md: a warning is what works but differs).
                ctx.warn("invalid-request-accepted", message, quirk="spec")
            else:
                ctx.error("invalid-request-accepted", message, quirk="spec")
        elif not _clean_client_error(ctx):
            ctx.error(
                "invalid-request-status",
                f"an invalid request ({why}) got HTTP {status}; OpenAI answers 400 with an error object",
                quirk="Q43",
            )
        return
    features = request.features
    if not features:
        return
    used = ", ".join(features)
    if status >= 500:
        quirk = next((FEATURE_QUIRK[f] for f in features if f in FEATURE_QUIRK), "Q43")
        ctx.error(
            "feature-server-error",
            f"a valid request using {used} got HTTP {status}; a feature is declined with a 400 error object",
            quirk=quirk,
        )
    elif _clean_client_error(ctx):
        ctx.warn("feature-unsupported", f"the server declined {used} with HTTP {status}")
