"""Schema validation of each payload, mapped to rule ids, and unknown keys reported as warnings.

The schemas (``schemas/*.json``) allow extra keys, as OpenAI's spec does; the rules name each one once
per response with the quirk that explains where it comes from (Q35-Q41).
"""

from __future__ import annotations

import re
from typing import Any

from jsonschema import ValidationError

from conformance import schemas
from conformance.rules.context import Context
from conformance.rules.reasoning import REASONING_KEYS

__all__ = ["schema_findings", "unknown_fields"]

_REQUIRED_QUIRK = {
    "id": "Q06",
    "created": "Q06",
    "object": "Q11",
    "model": "Q11",
    "index": "Q61",
    "finish_reason": "Q16",
    "logprobs": "Q61",
    "refusal": "Q61",
}
_FINISH_QUIRK = {
    "": "Q15",
    "null": "Q21",
    "error": "Q21",
    "abort": "Q20",
    "eos_token": "Q18",
    "stop_sequence": "Q18",
    "Generated": "Q19",
    "insufficient_system_resource": "Q24",
}
_EXTRA_QUIRK = {
    "timings": "Q35",
    "__verbose": "Q35",
    "prompt_progress": "Q36",
    "stop_reason": "Q37",
    "prompt_logprobs": "Q37",
    "kv_transfer_params": "Q37",
    "prompt_token_ids": "Q37",
    "matched_stop": "Q38",
    "model_name": "Q11",
    "stop_str": "Q19",
    "eos_reason": "Q19",
    "prompt_time": "Q32",
    "prompt_tokens_per_sec": "Q32",
    "completion_time": "Q32",
    "completion_tokens_per_sec": "Q32",
    "total_time": "Q32",
    "prompt_cache_hit_tokens": "Q41",
    "prompt_cache_miss_tokens": "Q41",
}
DEFAULTED_KEYS = frozenset(
    {
        ("choices", "*", "message", "refusal"),
        ("choices", "*", "logprobs"),
        ("choices", "*", "logprobs", "refusal"),
    }
)
"""Required keys of a chat or completion answer whose absence every strict client reads as null:
openai-python's types make ``message.refusal``, ``choices[].logprobs`` and the logprobs' ``refusal``
list optional, and the AI SDK's openai-compatible schemas do not require them (ik_llama.cpp omits the
first two, Q61; llama-server b11434 the last, its logprobs carrying ``content`` alone). Missing, they are a
warning (docs/validate.md, severity policy); any other missing key is an error."""
_INDICES = re.compile(r"/\d+(?=/|$)")
_NULL_BRANCH = {"type": "null"}


def schema_findings(
    ctx: Context, event: int | None, doc: Any, name: str, *, judged_elsewhere: frozenset[str] = frozenset()
) -> None:
    """Validate ``doc`` against schema ``name``; each violation becomes one finding, except at the
    pointers of ``judged_elsewhere``, whose values a more specific rule of the caller judges."""
    result = schemas.check(name, doc)
    for error in result.errors:
        deepest = _deepest(error)
        if schemas.pointer(deepest.absolute_path) not in judged_elsewhere:
            _report(ctx, event, deepest)
    unknown_fields(ctx, event, result.extras)


def unknown_fields(ctx: Context, event: int | None, extras: tuple[tuple[str, str], ...]) -> None:
    for where, key in extras:
        if key in REASONING_KEYS:
            continue  # the reasoning rules judge the name (Q39)
        general = _INDICES.sub("/*", where)
        if general in ctx.unknown_seen:
            continue
        ctx.unknown_seen.add(general)
        ctx.warn(
            "unknown-field",
            f"non-OpenAI key {key!r} at {general}",
            event=event,
            pointer=where,
            quirk=_EXTRA_QUIRK.get(key, "N4"),
        )


def _deepest(error: ValidationError) -> ValidationError:
    """For a failed anyOf (a nullable value), the error inside the non-null branch says what is wrong."""
    while error.validator in ("anyOf", "oneOf") and error.context:
        inner = [e for e in error.context if e.schema != _NULL_BRANCH]
        if not inner:
            break
        error = max(inner, key=lambda e: len(e.absolute_path))
    return error


def _report(ctx: Context, event: int | None, error: ValidationError) -> None:
    where = schemas.pointer(error.absolute_path)
    last = error.absolute_path[-1] if error.absolute_path else None
    if error.validator == "required" and isinstance(error.instance, dict):
        _missing_keys(ctx, event, error, where)
        return
    if error.validator in ("enum", "const") and last == "finish_reason":
        value = error.instance
        ctx.error(
            "finish-reason-value",
            f"finish_reason {_short(value)} is not one of the endpoint's values or null",
            event=event,
            pointer=where,
            quirk=_FINISH_QUIRK.get(value, "spec") if isinstance(value, str) else "spec",
        )
        return
    if error.validator in ("enum", "const") and last == "object":
        ctx.error(
            "object-value",
            f"'object' is {_short(error.instance)}, expected {_short(error.validator_value)}",
            event=event,
            pointer=where,
            quirk="Q12",
        )
        return
    ctx.error("schema", f"{where or '/'}: {_describe(error)}", event=event, pointer=where, quirk="spec")


def _missing_keys(ctx: Context, event: int | None, error: ValidationError, where: str) -> None:
    """``required-key`` for the key a ``required`` violation names: a warning for a key every strict
    client reads as null (:data:`DEFAULTED_KEYS`), an error for any other."""
    required: Any = error.validator_value
    # jsonschema gives one error per missing key, each holding the whole list: this one's key is the
    # one its message names.
    instance: Any = error.instance  # a dict: _report checked it
    missing = [key for key in required if key not in instance]
    named = [key for key in missing if error.message.startswith(f"{key!r} ")]
    general = tuple("*" if isinstance(step, int) else step for step in error.absolute_path)
    for key in named or missing[:1]:
        quirk = (  # a tool-call fragment's index is Q64; a choice's, Q61
            "Q64" if key == "index" and "tool_calls" in general else _REQUIRED_QUIRK.get(key, "spec")
        )
        message = f"required key {key!r} missing (required even when its value is null)"
        if (*general, key) in DEFAULTED_KEYS:
            ctx.warn("required-key", message, event=event, pointer=f"{where}/{key}", quirk=quirk)
        else:
            ctx.error("required-key", message, event=event, pointer=f"{where}/{key}", quirk=quirk)


def _describe(error: ValidationError) -> str:
    if error.validator == "type":
        return f"must be {error.validator_value}, got {_json_type(error.instance)}"
    if error.validator in ("enum", "const"):
        return f"{_short(error.instance)} is not {_short(error.validator_value)}"
    return error.message[:200]


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
