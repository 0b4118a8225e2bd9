"""The Responses API's Response object: what a body and a stream's terminal event must say about the answer.

Spec facts (openapi.yaml ``Response``, ``ResponseUsage``; openai-python ``types/responses``):

- ids: a Response is ``resp_...``; its output items ``msg_...`` (message), ``fc_...`` (function_call),
  ``rs_...`` (reasoning), as every example of the spec and every OpenAI answer show them; a function call's
  ``call_id`` is what the client sends back in ``function_call_output``, so it must not be empty;
- ``status`` ``completed`` carries no ``error`` and no ``incomplete_details``; ``incomplete`` carries
  ``incomplete_details.reason`` (``max_output_tokens`` when the limit cut the answer); ``failed`` carries
  ``error``. llama-server's own ``/v1/responses`` said ``completed`` when ``max_output_tokens`` cut the
  answer (clients.md): a client that trusts ``completed`` takes a cut answer for a whole one;
- ``usage`` (``input_tokens``, ``output_tokens``, ``total_tokens`` = their sum) is present once the
  response finished (``completed`` or ``incomplete``; the spec's examples show it on both), and
  ``output_tokens`` never exceeds ``max_output_tokens``;
- a function call's ``arguments`` is "a JSON string of the arguments to pass to the function": a JSON
  object valid against the tool's ``parameters``, naming a function the request offered;
- ``text.format`` ``json_schema``: the output text is JSON valid against the schema (once completed);
- ``model`` names the served model, never a file path (Q09; llama-server named it by its path);
- ``include: ["message.output_text.logprobs"]`` asks for the text's token logprobs, each token with at
  most ``top_logprobs`` alternatives: an ``output_text`` part with text and no logprobs lost them (the
  proxy's translation gave ``[]`` until it passed them on).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from conformance.request import integer
from conformance.rules.context import Context, clipped
from conformance.rules.leaks import model_path
from conformance.rules.logprobs import top_count
from conformance.schemas import schema_error

from .open_responses import response_fields
from .tool_choice import tool_choice_rules

__all__ = [
    "ITEM_PREFIX",
    "RESPONSE_PREFIX",
    "function_call_arguments",
    "item_id_prefix",
    "judge_response",
    "logprobs_on_text",
    "output_schema_valid",
    "output_text",
    "response_id",
    "status_details",
    "usage_limit",
    "usage_present",
]

RESPONSE_PREFIX = "resp_"
ITEM_PREFIX = {"message": "msg_", "function_call": "fc_", "reasoning": "rs_"}
_FINISHED = frozenset({"completed", "incomplete"})


def judge_response(ctx: Context, event: int | None, response: Mapping[str, Any], where: str) -> None:
    """Every rule on a finished Response (a body, or a stream's terminal event's ``response``)."""
    response_id(ctx, event, response, where)
    response_fields(ctx, event, response, where)
    model_path(ctx, event, response.get("model"), f"{where}/model")
    status_details(ctx, event, response, where)
    usage_present(ctx, event, response, where)
    usage_limit(ctx, event, response, where)
    output = response.get("output")
    items = [item for item in output if isinstance(item, Mapping)] if isinstance(output, list) else []
    for index, item in enumerate(items):
        item_id_prefix(ctx, event, item, f"{where}/output/{index}")
        function_call_arguments(ctx, event, item, f"{where}/output/{index}")
        if response.get("status") != "failed":  # a broken-off answer's text may lack its last tokens'
            logprobs_on_text(ctx, event, item, f"{where}/output/{index}")
    output_schema_valid(ctx, event, response, where)
    tool_choice_rules(ctx, event, response, output_text(response))


def response_id(ctx: Context, event: int | None, response: Mapping[str, Any], where: str) -> None:
    """A Response's id is non-empty and starts ``resp_``; a stream's events all name the same one."""
    value = response.get("id")
    if not isinstance(value, str):
        return  # a schema finding
    if not value:
        ctx.error("responses-id-empty", "the response's id is empty", event=event, pointer=f"{where}/id")
        return
    if not value.startswith(RESPONSE_PREFIX):
        ctx.warn(
            "responses-id-prefix",
            f"response id {clipped(value, 60)} does not start with {RESPONSE_PREFIX!r}",
            event=event,
            pointer=f"{where}/id",
            quirk="spec",
        )
    if ctx.unset(ctx.id):
        ctx.id = value
    elif value != ctx.id:
        ctx.error(
            "responses-id-changed",
            f"the response id changed from {clipped(str(ctx.id), 60)} to {clipped(value, 60)} within"
            " one stream",
            event=event,
            pointer=f"{where}/id",
            quirk="spec",
        )


def item_id_prefix(ctx: Context, event: int | None, item: Mapping[str, Any], where: str) -> None:
    """An output item has a non-empty id with its type's prefix; a function call a non-empty call_id."""
    kind, value = item.get("type"), item.get("id")
    prefix = ITEM_PREFIX.get(kind) if isinstance(kind, str) else None
    if prefix is None:
        return
    if isinstance(value, str) and not value:
        ctx.error(
            "responses-item-id-empty", f"a {kind} item with an empty id", event=event, pointer=f"{where}/id"
        )
    elif isinstance(value, str) and not value.startswith(prefix):
        ctx.warn(
            "responses-item-id-prefix",
            f"{kind} item id {clipped(value, 60)} does not start with {prefix!r}",
            event=event,
            pointer=f"{where}/id",
            quirk="spec",
        )
    call_id = item.get("call_id")
    if kind == "function_call" and isinstance(call_id, str) and not call_id:
        ctx.error(
            "responses-call-id-empty",
            "a function_call with an empty call_id: the client cannot send its output back",
            event=event,
            pointer=f"{where}/call_id",
            quirk="spec",
        )


def logprobs_on_text(ctx: Context, event: int | None, item: Mapping[str, Any], where: str) -> None:
    """Asked-for logprobs are on every ``output_text`` part with text, with at most ``top_logprobs``
    alternatives a token."""
    if not (ctx.request.known and ctx.request.logprobs) or item.get("type") != "message":
        return
    content = item.get("content")
    for index, part in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(part, Mapping) or part.get("type") != "output_text" or not part.get("text"):
            continue
        logprobs, at = part.get("logprobs"), f"{where}/content/{index}/logprobs"
        if not logprobs:
            ctx.error(
                "responses-logprobs-missing",
                "the request included message.output_text.logprobs but this text carries none",
                event=event,
                pointer=at,
                quirk="spec",
            )
            continue
        top_count(ctx, event, logprobs, ctx.request.top_logprobs or 0, at)


def status_details(ctx: Context, event: int | None, response: Mapping[str, Any], where: str) -> None:
    """``status`` agrees with ``incomplete_details`` and ``error``."""
    status, details, error = response.get("status"), response.get("incomplete_details"), response.get("error")
    if status == "incomplete" and not (isinstance(details, Mapping) and details.get("reason")):
        ctx.error(
            "responses-incomplete-reason",
            "status 'incomplete' without incomplete_details.reason: the client cannot tell why",
            event=event,
            pointer=f"{where}/incomplete_details",
            quirk="spec",
        )
    elif status == "completed" and (details is not None or error is not None):
        key = "incomplete_details" if details is not None else "error"
        ctx.error(
            "responses-status-details",
            f"status 'completed' with a non-null {key}",
            event=event,
            pointer=f"{where}/{key}",
            quirk="spec",
        )
    elif status == "failed" and not isinstance(error, Mapping):
        ctx.error(
            "responses-failed-error",
            "status 'failed' without an error object saying why",
            event=event,
            pointer=f"{where}/error",
            quirk="spec",
        )


def usage_present(ctx: Context, event: int | None, response: Mapping[str, Any], where: str) -> None:
    """A finished response carries usage, and ``total_tokens`` is ``input_tokens + output_tokens``."""
    usage = response.get("usage")
    if response.get("status") not in _FINISHED:
        return
    if not isinstance(usage, Mapping):
        ctx.error(
            "responses-usage-missing",
            f"a {response.get('status')} response without usage",
            event=event,
            pointer=f"{where}/usage",
            quirk="spec",
        )
        return
    ctx.usage = {**usage, "completion_tokens": usage.get("output_tokens")}  # what ctx.completion_tokens reads
    counts = [integer(usage.get(key)) for key in ("input_tokens", "output_tokens", "total_tokens")]
    if None in counts:
        return  # a schema finding
    given, generated, total = (count or 0 for count in counts)
    if given + generated != total:
        ctx.error(
            "responses-usage-arithmetic",
            f"input_tokens {given} + output_tokens {generated} != total_tokens {total}",
            event=event,
            pointer=f"{where}/usage/total_tokens",
            quirk="spec",
        )


def usage_limit(ctx: Context, event: int | None, response: Mapping[str, Any], where: str) -> None:
    """``max_output_tokens`` reached is ``incomplete`` with reason ``max_output_tokens``, not ``completed``
    (llama-server's native endpoint, clients.md); more output tokens than the limit is a broken limit."""
    limit = ctx.request.max_tokens if ctx.request.known else None
    usage = response.get("usage")
    generated = integer(usage.get("output_tokens")) if isinstance(usage, Mapping) else None
    if limit is None or generated is None:
        return
    if generated > limit:
        ctx.error(
            "responses-usage-over-limit",
            f"output_tokens {generated} over max_output_tokens {limit}",
            event=event,
            pointer=f"{where}/usage/output_tokens",
            quirk="spec",
        )
    if generated >= limit and response.get("status") == "completed":
        ctx.error(
            "responses-limit-completed",
            f"max_output_tokens {limit} was reached ({generated} output tokens) but the status is "
            "'completed', not 'incomplete' with incomplete_details.reason 'max_output_tokens'",
            event=event,
            pointer=f"{where}/status",
            quirk="spec",
        )


def _as_object(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at {exc.pos})"
    except ValueError:
        return None, "not JSON"
    except RecursionError:
        return None, "nested too deeply"


def function_call_arguments(ctx: Context, event: int | None, item: Mapping[str, Any], where: str) -> None:
    """A function call names a function the request offered, with arguments that are a JSON object valid
    against its ``parameters``."""
    if item.get("type") != "function_call" or not isinstance(item.get("arguments"), str):
        return
    name, functions = item.get("name"), ctx.request.tool_schemas
    if ctx.request.known and functions and name not in functions:
        ctx.error(
            "responses-function-unknown",
            f"a call to {clipped(str(name), 60)}, not one of the request's functions"
            f" ({', '.join(functions)})",
            event=event,
            pointer=f"{where}/name",
            quirk="spec",
        )
        return
    if item.get("status") == "incomplete":
        return  # cut by the token limit: its arguments may stop mid-JSON
    value, problem = _as_object(item["arguments"])
    if problem is None and not isinstance(value, dict):
        problem = "a JSON value, not an object"
    if problem is None:
        schema = functions.get(name) if isinstance(name, str) else None
        why = schema_error(schema, value) if isinstance(schema, Mapping) else None
        problem = f"invalid at {why}" if why else None
    if problem is not None:
        ctx.error(
            "responses-function-arguments",
            f"the arguments of {clipped(str(name), 60)} are {problem}",
            event=event,
            pointer=f"{where}/arguments",
            quirk="spec",
        )


def output_text(response: Mapping[str, Any]) -> str:
    """The text of every ``output_text`` part, joined: what openai-python's ``response.output_text`` gives."""
    texts: list[str] = []
    output = response.get("output")
    for item in output if isinstance(output, list) else ():
        content = item.get("content") if isinstance(item, Mapping) and item.get("type") == "message" else None
        for part in content if isinstance(content, list) else ():
            if (
                isinstance(part, Mapping)
                and part.get("type") == "output_text"
                and isinstance(part.get("text"), str)
            ):
                texts.append(part["text"])
    return "".join(texts)


def output_schema_valid(ctx: Context, event: int | None, response: Mapping[str, Any], where: str) -> None:
    """``text.format`` ``json_schema``: a completed answer's text is JSON valid against the schema."""
    schema = ctx.request.output_schema if ctx.request.known else None
    if schema is None or response.get("status") != "completed":
        return
    output = response.get("output")
    if isinstance(output, list) and any(
        isinstance(i, Mapping) and i.get("type") == "function_call" for i in output
    ):
        return  # the model called a tool instead of answering
    value, problem = _as_object(output_text(response))
    if problem is None and (why := schema_error(schema, value)):
        problem = f"invalid at {why}"
    if problem is not None:
        ctx.error(
            "responses-output-schema",
            f"text.format asked for JSON matching its schema; the output text is {problem}",
            event=event,
            pointer=f"{where}/output",
            quirk="spec",
        )
