"""Structured outputs: content that is the JSON the request's ``response_format`` asked for.

OpenAI: ``json_object`` "ensures the message the model generates is valid JSON"; ``json_schema`` makes it
match the supplied schema (Structured Outputs). openai-python's ``chat.completions.parse()`` loads the
content into the caller's Pydantic model and fails on anything else, and servers answer such requests
200 without enforcing them (issue 20: ``response_format: json_schema`` answered but not enforced), so a
200 is judged by what it carries:

- ``json-object-invalid``: with either format the content (joined over a stream) is not one JSON object;
  a Markdown fence around it counts as not JSON, since ``json.loads`` fails on it.
- ``json-schema-invalid``: with ``json_schema`` the object breaks the schema.

A choice cut off by its token limit (``finish_reason: "length"``) is let pass: OpenAI's JSON is cut there
too, and openai-python raises ``LengthFinishReasonError`` before it parses; so is one whose usage shows
the limit reached under ``stop`` (``finish-stop-at-limit`` reports that cut: ik_llama.cpp, issue 33).
So is a choice that called tools instead of answering, and one that never finished (a stream cut short).
"""

from __future__ import annotations

import json

from conformance.rules.context import Context, clipped
from conformance.schemas import schema_error

__all__ = ["json_content"]


def json_content(ctx: Context) -> None:
    """Each finished choice's content is the JSON object (and, with a schema, the shape) asked for."""
    kind = ctx.request.response_format_type
    if kind not in ("json_object", "json_schema") or ctx.sink.fired("finish-stop-at-limit"):
        return  # JSON cut by the limit, reported 'stop': the cut is that rule's fact, not the JSON's
    for state in ctx.choices.values():
        if state.finish_reason in (None, "length") or state.tool_calls:
            continue  # unfinished, cut off by the limit, or a call instead of an answer
        text = "".join(state.content)
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            value = None
        pointer = f"/choices/{state.index}/{'delta' if ctx.stream else 'message'}/content"
        if not isinstance(value, dict):
            ctx.error(
                "json-object-invalid",
                f"response_format {kind} asks for a JSON object; choice {state.index}'s content is"
                f" {clipped(text, 80)}",
                event=state.finished_event,
                pointer=pointer,
                quirk="spec",
            )
            continue
        schema = ctx.request.output_schema
        why = schema_error(schema, value) if schema is not None else None
        if why is not None:
            ctx.error(
                "json-schema-invalid",
                f"choice {state.index}'s content breaks the response_format schema at {why}",
                event=state.finished_event,
                pointer=pointer,
                quirk="spec",
            )
