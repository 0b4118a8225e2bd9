"""The client's request checked before it is served: bad input is a 400 naming the parameter.

Local servers answer a wrong type with a 500 (llama-cpp-python, Q43), take ``temperature: 7`` or a
request without ``prompt`` as if nothing were wrong, and choke on ``NaN``. The proxy answers each the
way OpenAI does: 400 ``invalid_request_error`` with ``param`` set. The request schemas the judge uses
(``schemas/completion_request.json``, ``schemas/chat_completion_request.json``: openai-spec.md 2.2, 2.4,
2.10) state the standard parameters of both endpoints; parameters they do not name (``top_k``, ``min_p``,
``grammar``, ...) are the upstream's extensions and pass through untouched. ``model`` may be left out
here: many local clients omit it and one-model servers ignore it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from typing import Any, NamedTuple, NoReturn

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.exceptions import best_match

from conformance import json_steps, jsoncodec
from conformance.api_errors import InvalidRequest
from conformance.given_schemas import check_given_schemas
from conformance.schemas import load_schema, request_validator

__all__ = [
    "MAX_STOP_LENGTH",
    "Rejecter",
    "check_request",
    "parse_json_object",
    "parse_request",
    "unmatched_pattern",
    "validate_request",
]

MAX_STOP_LENGTH = 1000
"""Characters in one stop sequence; a request with a longer one is a 400 (``string_above_max_length``):
the proxy scans every chunk for them (proxy/normalizer/stop.py)."""


_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _param(path: Any) -> str | None:
    """OpenAI's spelling of a nested parameter: ``messages[0].role``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


def _expected(schema: dict[str, Any]) -> str:
    if "x-expects" in schema:
        return str(schema["x-expects"])
    kinds = [k for k in schema.get("type", ()) if k != "null"] if isinstance(schema.get("type"), list) else []
    if not kinds:
        kinds = [schema.get("type", "object")]
    return " or ".join(_TYPE_NAMES.get(k, k) for k in kinds)


def _words(error: ValidationError, param: str, value: Any) -> tuple[str, str]:
    """The message and code OpenAI gives for one failed keyword on ``value``."""
    keyword = error.validator
    limit: Any = error.validator_value
    if keyword in ("anyOf", "oneOf"):
        keyword, limit = _union_reading(limit, value)
    elif keyword == "type":
        limit = _expected(error.schema if isinstance(error.schema, dict) else {})
    if keyword == "type":  # (``limit``: what is expected, worded)
        return (
            f"Invalid type for '{param}': expected {limit}, but got {_kind(value)} instead.",
            "invalid_type",
        )
    if keyword in ("minimum", "maximum", "minItems", "maxItems"):
        return _bound_words(keyword, param, value, limit)
    if keyword == "pattern":
        return unmatched_pattern(param, limit), "invalid_value"
    if keyword == "enum":
        allowed = ", ".join(f"'{v}'" for v in limit)
        return f"Invalid value for '{param}': {value!r}. Supported values are: {allowed}.", "invalid_value"
    return f"Invalid value for '{param}'.", "invalid_value"


def _bound_words(keyword: str, param: str, value: Any, limit: Any) -> tuple[str, str]:
    """``_words`` of a number or an array's length past its bound."""
    if keyword in ("minimum", "maximum"):
        kind = "integer" if isinstance(value, int) else "decimal"
        bound, sign = ("below minimum", ">=") if keyword == "minimum" else ("above maximum", "<=")
        message = (
            f"Invalid '{param}': {kind} {bound} value. Expected a value {sign} {limit}, but got {value}."
        )
        return message, f"{kind}_{bound.replace(' ', '_')}_value"
    if keyword == "minItems" and not value:
        return f"Invalid '{param}': empty array. Expected an array with at least 1 item.", "empty_array"
    bound, code = ("at least", "array_below_min_length")
    if keyword == "maxItems":
        bound, code = ("at most", "array_above_max_length")
    return f"Invalid '{param}': expected an array with {bound} {limit} items, got {len(value)}.", code


def _union_reading(branches: Any, value: Any) -> tuple[str, Any]:
    """How a union (``anyOf``) that ``value`` fails is worded: as a type error where ``value`` is of none
    of its types (a function's ``parameters``: an object or null; "Invalid value" alone said nothing of
    what was wanted), as an enum's where it is a string and the union's only strings are an enum's
    (``tool_choice``: "none", "auto", "required", or an object); else as the union."""
    if kinds := _branch_types(branches, value):  # (what is expected, worded)
        return "type", " or ".join(_TYPE_NAMES.get(k, k) for k in kinds if k != "null")
    if isinstance(value, str):
        enums = [b["enum"] for b in branches if isinstance(b, dict) and "enum" in b]
        if len(enums) == 1 and not any(isinstance(b, dict) and b.get("type") == "string" for b in branches):
            return "enum", enums[0]
    return "anyOf", branches


def _branch_types(branches: Any, value: Any) -> list[str]:
    """The types of a union's branches where ``value`` is of none of them (each branch names its type,
    or is an enum of strings); empty where it is of one (what is wrong is within it) or a branch has no
    type."""
    kinds: list[str] = []
    for branch in branches if isinstance(branches, list) else ():
        kind = branch.get("type") if isinstance(branch, dict) else None
        enum = branch.get("enum") if isinstance(branch, dict) else None
        if kind is None and isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            kind = "string"
        if not isinstance(kind, str):
            return []
        kinds.append(kind)
    # (the request schemas' own type checker: what the validator found ``value`` to be)
    of_one = any(Draft202012Validator.TYPE_CHECKER.is_type(value, kind) for kind in kinds)
    return [] if of_one else list(dict.fromkeys(kinds))


def unmatched_pattern(param: str, pattern: str) -> str:
    """OpenAI's words for a string ``param`` that does not match ``pattern``."""
    return (
        f"Invalid '{param}': string does not match pattern. Expected a string that matches the pattern "
        f"'{pattern}'."
    )


Rejecter = Callable[[ValidationError, list[Any], Any], NoReturn]
"""How a protocol words the first schema error of a request: the jsonschema error, its path in the
client's body (keys and indices), and the value found there; it raises that protocol's 400."""


def _reject(error: ValidationError, path: list[Any], instance: Any) -> NoReturn:
    """One schema error (found at ``path``, on the client's ``instance``) as a 400 naming the parameter."""
    schema = error.schema if isinstance(error.schema, dict) else {}
    param = _param(path)
    if "x-message" in schema:
        raise InvalidRequest.make(
            str(schema["x-message"]), 400, code=schema.get("x-code"), param=schema.get("x-param", param)
        )
    if error.validator == "required":
        required: Any = error.validator_value
        given: Any = instance
        missing = next(name for name in required if name not in given)
        param = f"{param}.{missing}" if param else missing
        message = f"Missing required parameter: '{param}'."
        raise InvalidRequest.make(message, 400, code="missing_required_parameter", param=param)
    # An error on the body itself (not an object) has no parameter; the type check words it.
    message, code = _words(error, param or "body", instance)
    raise InvalidRequest.make(message, 400, code=code, param=param)


# Validity depends on a body's shape, not on its text: strings are checked for their type only (but those
# under a key the schema constrains by text, ``_exact_keys``: ``role``, ``type``, enums, a function's
# ``name`` pattern), numbers in objects by value, numbers in arrays only for sign (token ids), and array
# lengths only up to the schema's largest bound. ``_shape`` keeps exactly that, so bodies of one shape are
# alike valid: jsonschema (tens of microseconds per request, seconds for a 100k-token prompt) runs once per
# shape, on a body ``_reduce`` cut down to one item per distinct item shape, and a seen shape costs one walk
# of the body.
# A shape keeps an object's keys verbatim, so a free-form object (``metadata``, ``logit_bias``, unknown
# fields) puts the client's key strings in the cache: 40 requests, each with a 15,000-key object, held
# 200 MiB. The cache is bounded in bytes: a shape over ``_SHAPE_BYTES`` (some 1,500 keys; a usual body
# is a few hundred at most) is validated each time, uncached, and the whole cache holds ``_CACHE_BYTES``.
# Keep in step with the request schemas (test_request_validation checks the two agree).
_LENGTH_BOUND = 5
_CACHE_LIMIT = 4096
_SHAPE_BYTES = 256 << 10
_CACHE_BYTES = 16 << 20
_valid_shapes: dict[tuple[str, Any], int] = {}
_held_bytes = 0


_STRING_CONSTRAINTS = frozenset({"enum", "const", "pattern", "minLength", "maxLength", "format"})


def _constrains_strings(schema: Any, document: dict[str, Any], seen: frozenset[str] = frozenset()) -> bool:
    """Whether a string's text (not only its type) decides if ``schema`` takes it: an enum, a const, a
    pattern, a length or a format, here or in a branch or a local ``$ref`` it names."""
    if not isinstance(schema, dict):
        return False
    if _STRING_CONSTRAINTS & schema.keys():
        return True
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/") and ref not in seen:
        target: Any = document
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        if _constrains_strings(target, document, seen | {ref}):
            return True
    branches = [b for key in ("anyOf", "oneOf", "allOf") for b in schema.get(key) or ()]
    branches += [schema["items"]] if isinstance(schema.get("items"), dict) else []
    return any(_constrains_strings(b, document, seen) for b in branches)


@cache
def _exact_keys(schema: str) -> frozenset[str]:
    """The object keys whose string values the request schema constrains by their text (``role``,
    ``type``, ``truncation``, ``reasoning_effort``, a function's ``name``...): the shape keeps those
    strings as they are. Read off the schemas, so that a key a schema constrains later is kept too (the
    shape kept only ``role``, and a body with ``truncation: "middle"`` passed once one with ``"auto"``
    had been seen)."""
    document = load_schema(schema)
    return frozenset(
        key
        for node in _schema_objects(document)
        for key, sub in _properties(node)
        if _constrains_strings(sub, document)
    )


def _schema_objects(node: Any) -> Iterator[dict[str, Any]]:
    """Every object of a schema document, at any depth (schemas, and what holds them)."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _schema_objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from _schema_objects(value)


def _properties(node: dict[str, Any]) -> Iterable[tuple[str, Any]]:
    properties = node.get("properties")
    return properties.items() if isinstance(properties, dict) else ()


_OBJECT_CONSTRAINTS = frozenset(
    {
        "properties", "patternProperties", "additionalProperties", "propertyNames", "required",
        "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "unevaluatedProperties",
        "allOf", "oneOf", "not", "if", "enum", "const", "$ref",
    }
)  # fmt: skip


def _any_object(schema: Any) -> bool:
    """Whether ``schema`` takes every object: nothing in it reads an object's keys or values (an
    ``anyOf`` of such a branch and others, such as ``null``, too)."""
    if not isinstance(schema, dict) or _OBJECT_CONSTRAINTS & schema.keys():
        return False
    kinds = schema.get("type", "object")
    if "object" not in (kinds if isinstance(kinds, list) else [kinds]):
        return False
    branches = schema.get("anyOf")
    return branches is None or any(_any_object(branch) for branch in branches)


def _no_object(schema: Any) -> bool:
    """Whether ``schema`` refuses every object, whatever it holds (a ``logit_bias`` value's number)."""
    if not isinstance(schema, dict) or {"$ref", "allOf", "oneOf", "not", "if"} & schema.keys():
        return False
    kinds = schema.get("type")
    if kinds is None or "object" in (kinds if isinstance(kinds, list) else [kinds]):
        return False
    return all(_no_object(branch) for branch in schema.get("anyOf", ()))


@cache
def _opaque_keys(schema: str) -> frozenset[str]:
    """The object keys whose objects the request schema takes whatever they hold, wherever the key is
    named (a function's ``parameters``, a JSON Schema of the client's): such an object's shape is only
    that it is one. An agent's tools carry their schemas on every turn; walked key by key, they were
    most of the shape's cost (issue 35). None where a schema of the values of any key (a map's
    ``additionalProperties``) reads some objects' contents: a key of that name there would be judged
    by its contents."""
    free: dict[str, bool] = {}
    maps: list[Any] = []
    for node in _schema_objects(load_schema(schema)):
        for key, sub in _properties(node):
            free[key] = free.get(key, True) and _any_object(sub)
        maps.append(node.get("additionalProperties"))
        maps.extend((node.get("patternProperties") or {}).values())
    if not all(m is None or isinstance(m, bool) or _any_object(m) or _no_object(m) for m in maps):
        return frozenset()
    return frozenset(key for key, is_free in free.items() if is_free)


class _Keys(NamedTuple):
    """The keys a shape reads specially: ``exact`` (``_exact_keys``) and ``opaque`` (``_opaque_keys``)."""

    exact: frozenset[str]
    opaque: frozenset[str]


@cache
def _keys(schema: str) -> _Keys:
    return _Keys(_exact_keys(schema), _opaque_keys(schema))


_AN_OBJECT = ("{", "...")
"""The shape of an object under an ``opaque`` key."""


def _is_token_array(items: list[Any]) -> bool:
    return bool(items) and all(type(t) is int for t in items) and min(items) >= 0


def _shape(value: Any, keys: _Keys, *, in_array: bool = False, exact: bool = False) -> Any:
    """What of ``value`` its validity depends on (see above), as a hashable value; ``keys``: the keys
    whose strings count as they are, and those whose objects count only as objects."""
    kind = type(value)
    if kind is dict:
        opaque = keys.opaque
        return (
            "{",
            *[
                (
                    key,
                    _AN_OBJECT
                    if key in opaque and type(item) is dict
                    else _shape(item, keys, exact=key in keys.exact),
                )
                for key, item in value.items()
            ],
        )
    if kind is list:
        if _is_token_array(value):  # the common token prompt, without a walk
            return ("[", min(len(value), _LENGTH_BOUND), ("int", True))
        shapes = frozenset([_shape(item, keys, in_array=True, exact=exact) for item in value])
        return ("[", max(len(shapes), min(len(value), _LENGTH_BOUND)), shapes)
    if kind is str:
        return value if exact else "s"
    if kind is bool or value is None:
        return value
    return (kind.__name__, value >= 0 if in_array else value)


def _shape_bytes(shape: Any) -> int:
    """About the bytes ``shape`` holds: its tuples, sets and strings (small values are shared)."""
    kind = type(shape)
    if kind is tuple or kind is frozenset:
        return 64 + 8 * len(shape) + sum(_shape_bytes(item) for item in shape)
    if kind is str:
        return 49 + len(shape)
    return 0


def _remember(key: tuple[str, Any]) -> None:
    """Cache ``key`` as valid, within the cache's bounds in bytes and entries."""
    global _held_bytes
    size = _shape_bytes(key[1])
    if size > _SHAPE_BYTES:
        return
    if len(_valid_shapes) >= _CACHE_LIMIT or _held_bytes + size > _CACHE_BYTES:
        _valid_shapes.clear()
        _held_bytes = 0
    _valid_shapes[key] = size
    _held_bytes += size


def _reduce(value: Any, keys: _Keys, origins: dict[int, list[int]], exact: bool = False) -> Any:
    """``value`` with each array cut to its first item of each shape, padded to the length its shape
    counts; ``origins`` maps each cut array to the indexes its items had."""
    kind = type(value)
    if kind is dict:
        return {key: _reduce(item, keys, origins, key in keys.exact) for key, item in value.items()}
    if kind is not list:
        return value
    if _is_token_array(value):
        kept = value[:_LENGTH_BOUND]
        origins[id(kept)] = list(range(len(kept)))
        return kept
    first: set[Any] = set()
    reduced: list[tuple[int, Any]] = []
    for index, item in enumerate(value):
        item_shape = _shape(item, keys, in_array=True, exact=exact)
        if item_shape not in first:
            first.add(item_shape)
            reduced.append((index, _reduce(item, keys, origins, exact)))
    while len(reduced) < min(len(value), _LENGTH_BOUND):
        reduced.append(reduced[0])  # lengths count only up to the bound
    out = [item for _, item in reduced]
    origins[id(out)] = [index for index, _ in reduced]
    return out


def _client_path(reduced: Any, path: Any, origins: dict[int, list[int]]) -> list[Any]:
    """An error's path in the reduced body, as the path in the client's body."""
    out: list[Any] = []
    node = reduced
    for part in path:
        out.append(origins[id(node)][part] if isinstance(part, int) else part)
        node = node[part]
    return out


def validate_request(schema: str, body: dict[str, Any], reject: Rejecter = _reject) -> None:
    """Raise a 400 :class:`InvalidRequest` naming the first bad parameter of ``body`` against the request
    schema ``schema`` (schemas/); return when the body is fine. ``reject`` words the error (OpenAI's
    words by default; the Messages API's front-end gives Anthropic's)."""
    keys = _keys(schema)
    key = (schema, _shape(body, keys))
    if key in _valid_shapes:
        return
    origins: dict[int, list[int]] = {}
    reduced = _reduce(body, keys, origins)
    validator = request_validator(schema)
    if validator.is_valid(reduced):
        _remember(key)
        return
    error = best_match(validator.iter_errors(reduced))
    assert error is not None  # is_valid said there is one
    path = _client_path(reduced, error.absolute_path, origins)
    instance = body
    for part in path:
        instance = instance[part]
    reject(error, path, instance)


def _check_stop_lengths(stop: Any) -> None:
    """Each stop sequence within ``MAX_STOP_LENGTH`` characters (the proxy scans for them: a 2 MiB one
    was a denial of service before the scan was made linear). Checked here, not in the schema: the
    schema's validity is cached by the body's shape, in which a string has no length."""
    stops = [(None, stop)] if isinstance(stop, str) else list(enumerate(stop or ()))
    for index, value in stops:
        if isinstance(value, str) and len(value) > MAX_STOP_LENGTH:
            param = "stop" if index is None else f"stop[{index}]"
            raise InvalidRequest.make(
                f"Invalid '{param}': string too long. Expected a string with maximum length "
                f"{MAX_STOP_LENGTH}, but got a string with length {len(value)} instead.",
                400,
                code="string_above_max_length",
                param=param,
            )


def _check_tool_messages(messages: Any) -> None:
    """Each ``tool`` message answers a call an earlier assistant message made, and an assistant message's
    calls are answered by the tool messages right after it, before any other message (OpenAI's 400s): a
    chat template shows an answer to no call, or a call without its answer, as something else, or fails
    on it (a 500 from llama-server's Jinja templates). Checked for every upstream, and for a Messages
    request's ``tool_use`` and ``tool_result`` blocks, which become such messages
    (protocols/messages/translation.py, which words the same refusals as Anthropic). A conversation may
    end with calls not yet answered."""
    if not isinstance(messages, list):
        return
    made: set[str] = set()
    waiting: list[str] = []  # the last assistant message's calls not answered yet
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "tool":
            call_id = _answered_call(message, index)
            if call_id not in made:
                raise InvalidRequest.make(
                    f"Invalid parameter: messages with role 'tool' must be a response to a preceding "
                    f"message with 'tool_calls' (no call has id {call_id[:64]!r}).",
                    400,
                    code="invalid_value",
                    param=f"messages[{index}].role",
                )
            if call_id in waiting:
                waiting.remove(call_id)
            continue
        if waiting:
            raise _unanswered(waiting, index)
        if role == "assistant" and isinstance(calls := message.get("tool_calls"), list):
            ids = [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]
            made.update(ids)
            waiting = ids


def _unanswered(waiting: list[str], index: int) -> InvalidRequest:
    listed = ", ".join(call_id[:64] for call_id in waiting[:8])
    return InvalidRequest.make(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        f"'tool_call_id'. The following tool_call_ids did not have response messages: {listed}",
        400,
        code="invalid_value",
        param=f"messages[{index}].role",
    )


def _answered_call(message: dict[str, Any], index: int) -> str:
    """A ``tool`` message's ``tool_call_id``: a string that is not empty, else OpenAI's 400."""
    call_id = message.get("tool_call_id")
    param = f"messages[{index}].tool_call_id"
    if call_id is None:
        raise InvalidRequest.make(
            f"Missing required parameter: '{param}'.", 400, code="missing_required_parameter", param=param
        )
    if not isinstance(call_id, str) or not call_id:
        got = "an empty string" if call_id == "" else _kind(call_id)
        raise InvalidRequest.make(
            f"Invalid type for '{param}': expected a non-empty string, but got {got} instead.",
            400,
            code="invalid_type",
            param=param,
        )
    return call_id


def check_request(body: dict[str, Any]) -> None:
    """What a request schema cannot say of a valid body: each stop sequence's length, each tool
    message's call (above), and that each schema it gives is a JSON Schema (given_schemas.py); a 400
    :class:`InvalidRequest` for the first that fails."""
    _check_stop_lengths(body.get("stop"))
    _check_tool_messages(body.get("messages"))
    check_given_schemas(body)


def _no_constant(name: str) -> NoReturn:
    # NaN and Infinity are not JSON; Python's parser takes them, and the upstream would get them.
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def _parse_slowly(raw: str | bytes) -> Any:
    """What orjson may not read exactly or refused: valid JSON (an integer beyond 64 bits) or an error,
    worded with the line and column of the standard parser."""
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except ValueError as exc:  # UnicodeDecodeError included
        raise _not_json(exc) from None


def _parse_in_steps(raw: bytes) -> Any:
    """A body of many values, read so that the event loop runs meanwhile (conformance/json_steps.py)."""
    if json.detect_encoding(raw) != "utf-8":  # a BOM, or UTF-16/32: the standard parser reads those
        return jsoncodec.loads(raw, _parse_slowly)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return jsoncodec.loads(raw, _parse_slowly)  # the standard parser words the error
    try:
        return json_steps.loads_in_steps(text, _DECODER)
    except jsoncodec.TooDeep:
        raise
    except ValueError as exc:
        raise _not_json(exc) from None


def _not_json(exc: ValueError) -> InvalidRequest:
    where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
    return InvalidRequest.make(f"The request body is not valid JSON{where}.", 400, code="invalid_json")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The client's body as a JSON object, or a 400 :class:`InvalidRequest` saying why it is none."""
    try:
        body = _parse_in_steps(raw) if json_steps.worth_steps(raw) else jsoncodec.loads(raw, _parse_slowly)
    except (RecursionError, jsoncodec.TooDeep):
        raise _too_deep() from None
    if not isinstance(body, dict):
        raise InvalidRequest.make(
            f"The request body must be a JSON object, not {_kind(body)}.", 400, code="invalid_request"
        )
    # Asked only of a body with such an escape (as an emoji escaped as its pair also has): JSON's escapes
    # can write half a pair, Python's parser reads it, and the prompt's encoding failed with a 500.
    if (b"\\ud" in raw or b"\\uD" in raw) and jsoncodec.lone_surrogate(body):
        raise InvalidRequest.make(
            "The request body is not valid JSON: a string holds half of a UTF-16 surrogate pair "
            "(an escape from \\ud800 to \\udfff without its other half), which is no Unicode character.",
            400,
            code="invalid_json",
        )
    return body


def _too_deep() -> InvalidRequest:
    # Hundreds of nested arrays or objects: past what Python's parser and the shape walk can recurse
    # through. No real request is built so; a 400 says so instead of a 500.
    return InvalidRequest.make("The request body is nested too deeply.", 400, code="invalid_request")


def parse_request(schema: str, raw: bytes) -> dict[str, Any]:
    """The client's body as a JSON object valid against the request schema ``schema``, or a 400
    :class:`InvalidRequest` saying what is wrong."""
    body = parse_json_object(raw)
    try:
        validate_request(schema, body)
        check_request(body)
    except RecursionError:
        raise _too_deep() from None
    return body
