"""Which JSON Schema keywords llama-cpp-python's schema-to-grammar converter enforces, and which it drops.

``llama_cpp.llama_grammar.json_schema_to_gbnf`` (a port of llama.cpp's json_schema_to_grammar.py) turns
``type``, ``properties``/``required``/``additionalProperties``, ``enum``, ``const``, ``anyOf``/``oneOf``,
``allOf`` of objects, ``$ref``/``$defs``, ``items``/``prefixItems`` with ``minItems``/``maxItems``,
``minLength``/``maxLength``, ``pattern`` and the ``date``/``time``/``date-time``/``uuid`` formats into
grammar rules. Everything else it reads past without a word (``minimum``, ``maximum``, ``multipleOf``,
``uniqueItems``, ``not``, ``if``, ``minProperties``, an ``email`` format...), so a grammar built from
such a schema would let through values the schema forbids: a ``response_format`` answered 200 but not
enforced, the failure issue 20 names. :func:`unsupported` finds the first such construct so the request
is refused with a 400 that names it; :func:`enforceable` drops them instead, for non-strict tool
parameters, whose schemas agents fill with bounds the model is only asked to respect.

Two shapes clients send often reach the converter changed: :func:`normalized` writes ``true`` and ``{}``
subschemas as a union of every JSON type (an ``items: {}`` from pydantic's ``list[Any]`` or zod's
``z.array(z.any())`` failed the converter with a bare ``'prefixItems'``); and
:func:`localized` / :func:`hoisted` move a schema's ``$defs`` to the root of the grammar's schema, which
wraps a tool's parameters (and a reply's schema) in a call object: a ``#/$defs/...`` reference is read
from that root, so pydantic's nested models and enums (openai-python's ``pydantic_function_tool``, MCP
tools) were all refused.
"""

from __future__ import annotations

import re
from typing import Any

from conformance.schema_refs import SUBSCHEMA_LISTS, SUBSCHEMA_MAPS, hoisted, localized, with_children

__all__ = [
    "MAX_REPETITION",
    "enforceable",
    "gbnf_problem",
    "hoisted",
    "localized",
    "normalized",
    "too_large",
    "unsupported",
]

_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "example",
        "$schema",
        "$id",
        "$comment",
        "readOnly",
        "writeOnly",
        "deprecated",
        "strict",
        "nullable",
    }
)
_ENFORCED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "$defs",
        "definitions",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "pattern",
        "format",
    }
)
_FORMATS = frozenset({"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"})
MAX_REPETITION = 1000
"""The largest count a grammar repeats an item (``maxLength``, ``maxItems``, a pattern's ``{m,n}``): the
converter writes each as that many nested rules, and llama.cpp's parser refused a string of
``maxLength`` 1,100 (1,000 parsed, measured) and overflowed its stack at 20,000, which killed the
backend: Claude Code 2.1's ``Workflow`` tool has ``maxLength`` 524,288 in every request it sends."""
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems")
_QUANTIFIER = re.compile(r"\{(\d+)(?:,(\d*))?\}")


def _too_many(schema: dict[str, Any]) -> str | None:
    """The count keyword of this schema object over :data:`MAX_REPETITION`, if any."""
    for key in _COUNTS:
        value = schema.get(key)
        if isinstance(value, int) and value > MAX_REPETITION:
            return f"{key} above {MAX_REPETITION}"
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and _repeats_too_often(pattern):
        return f"a pattern repeating more than {MAX_REPETITION} times"
    return None


def _repeats_too_often(pattern: str) -> bool:
    return any(int(n) > MAX_REPETITION for m in _QUANTIFIER.finditer(pattern) for n in m.groups() if n)


_GBNF_LITERALS = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')


MAX_NESTING = 1000
"""Groups a client's GBNF may nest: llama.cpp's parser recurses into each, and 20,000 overflowed its
stack and killed the process (10,000 did not, found by black-box testing)."""

MAX_PROPERTIES = 5000
MAX_ENUM_VALUES = 1000
"""OpenAI's bounds on a Structured Outputs schema (its guide's "Supported schemas": 5,000 object
properties and 1,000 enum values in all), which clients written for it keep to. Past them a grammar costs
the engine seconds a token, and every other request's tokens wait (one step decodes every slot): 1,000
enum values took 0.4 s a token on the bundled Gemma on 2 cores, a 10,000-value grammar about 30 s
(measured, black-box testing); 100,000 optional properties took the converter 12.5 s to refuse."""

MAX_OPTIONAL_PROPERTIES = 500
"""Properties one object may leave optional: the converter chains them, its grammar growing with their
square (500: 56 KB in 0.9 s, 900: 101 KB in 3 s) and its recursion with their number (about 1,000
passed Python's limit, whose message was the 400, found by black-box testing). OpenAI's strict schemas
make every property required."""

MAX_ALTERNATIVES = MAX_ENUM_VALUES
"""Alternatives (``|``) a client's GBNF may hold: the same bound as a schema's enum values, the
alternatives they become."""

_NUL_ESCAPE = re.compile(r"\\(?:x00|u0000|U00000000)")
_COMMENT = re.compile(r"#[^\n]*")
_TOO_MUCH = "more than this server's grammar engine takes"


def gbnf_problem(gbnf: str) -> str | None:
    """What in a client's GBNF llama.cpp's grammar engine cannot take, or None: an item repeated more than
    :data:`MAX_REPETITION` times (``x{0,20000}`` overflowed its parser's stack), groups nested past
    :data:`MAX_NESTING`, a NUL character asked for (the grammar is handed over as a C string, which a
    raw NUL cuts short, and no token's text holds one: llama.cpp aborted the process, "Unexpected empty
    grammar stack"). Its strings and character classes are not read as counts or groups."""
    if "\x00" in gbnf or any(
        _NUL_ESCAPE.search(item) for item in _GBNF_LITERALS.findall(gbnf) if not item.startswith("[^")
    ):
        return "asks for a NUL character, which no token's text holds"
    rules = _COMMENT.sub("", _GBNF_LITERALS.sub("", gbnf))
    if _repeats_too_often(rules):
        return f"repeats an item more than {MAX_REPETITION} times ({{m,n}}), {_TOO_MUCH}"
    depth = deepest = 0
    for char in rules:
        depth += (char == "(") - (char == ")")
        deepest = max(deepest, depth)
    if deepest > MAX_NESTING:
        return f"nests groups deeper than {MAX_NESTING}, {_TOO_MUCH}"
    if rules.count("|") >= MAX_ALTERNATIVES:  # (n alternatives, n - 1 bars)
        return f"holds more than {MAX_ALTERNATIVES} alternatives, {_TOO_MUCH}"
    return None


def too_large(schema: Any) -> str | None:
    """Which of :data:`MAX_PROPERTIES`, :data:`MAX_ENUM_VALUES` and :data:`MAX_OPTIONAL_PROPERTIES`
    ``schema`` passes, or None (its subschemas walked without recursion, however deep they nest)."""
    properties = values = optional = 0
    pending = [schema]
    while pending:
        node = pending.pop()
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("properties"), dict):
            properties += len(node["properties"])
            optional = max(optional, _optional(node))
        if isinstance(node.get("enum"), list):
            values += len(node["enum"])
        pending += [sub for _, sub in _children(node)]
    if properties > MAX_PROPERTIES:
        return f"{properties} object properties in all, more than the {MAX_PROPERTIES}"
    if values > MAX_ENUM_VALUES:
        return f"{values} enum values in all, more than the {MAX_ENUM_VALUES}"
    if optional > MAX_OPTIONAL_PROPERTIES:
        return f"an object of {optional} optional properties, more than the {MAX_OPTIONAL_PROPERTIES}"
    return None


def _optional(node: dict[str, Any]) -> int:
    required = node.get("required")
    given = {name for name in required if isinstance(name, str)} if isinstance(required, list) else set()
    return len(set(node["properties"]) - given)


def _unknown_keyword(schema: dict[str, Any]) -> str | None:
    for key in schema:
        if key not in _ENFORCED and key not in _ANNOTATIONS:
            return key
    fmt = schema.get("format")
    return f"format: {fmt}" if fmt is not None and fmt not in _FORMATS else None


def _lengths(schema: dict[str, Any]) -> str | None:
    if "pattern" in schema and ("minLength" in schema or "maxLength" in schema):
        return "minLength/maxLength with pattern"
    if ("minLength" in schema or "maxLength" in schema) and schema.get("type") != "string":
        return "minLength/maxLength without type: string"
    return None


def _unanchored(schema: dict[str, Any]) -> str | None:
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and not (pattern.startswith("^") and pattern.endswith("$")):
        return "pattern not anchored with ^...$"
    return None


def _lone_keywords(schema: dict[str, Any]) -> str | None:
    if "required" in schema and "properties" not in schema and "allOf" not in schema:
        return "required without properties"
    if isinstance(schema.get("items"), dict) and "prefixItems" in schema:
        return "items with prefixItems"
    return None


_CHECKS = (_unknown_keyword, _too_many, _lengths, _unanchored, _lone_keywords)
"""One check per way the converter would not enforce a schema object, in the order they are reported."""


def _problem(schema: dict[str, Any]) -> str | None:
    """The first keyword of this one schema object (not its children) the converter would not enforce."""
    return next((found for check in _CHECKS if (found := check(schema)) is not None), None)


def _children(schema: dict[str, Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key in SUBSCHEMA_MAPS:
        value = schema.get(key)
        if isinstance(value, dict):
            out += [(f"{key}/{name}", sub) for name, sub in value.items()]
    for key in SUBSCHEMA_LISTS:
        value = schema.get(key)
        if isinstance(value, list):
            out += [(f"{key}/{i}", sub) for i, sub in enumerate(value)]
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out.append((key, schema[key]))
    return out


def unsupported(schema: Any, path: str = "") -> str | None:
    """``"<keyword> at <JSON pointer>"`` for the first construct a grammar would not enforce, or None."""
    if isinstance(schema, bool):
        return None if schema else f"false schema at {path or '/'}"
    if not isinstance(schema, dict):
        return f"a non-object schema at {path or '/'}"
    problem = _problem(schema)
    if problem is not None:
        return f"'{problem}' at {path or '/'}"
    for key, sub in _children(schema):
        found = unsupported(sub, f"{path}/{key}")
        if found is not None:
            return found
    return None


def enforceable(schema: Any) -> Any:
    """A copy of ``schema`` without the keywords the converter would drop anyway (stated, not implied)."""
    if not isinstance(schema, dict):
        return schema
    kept = {
        key: value
        for key, value in schema.items()
        if (key in _ENFORCED or key in _ANNOTATIONS) and not (key == "format" and value not in _FORMATS)
    }
    out = with_children(kept, enforceable)
    for key in _COUNTS:
        if isinstance(out.get(key), int) and out[key] > MAX_REPETITION:
            del out[key]
    if "pattern" in out and isinstance(out["pattern"], str):
        anchored = out["pattern"].startswith("^") and out["pattern"].endswith("$")
        if not anchored or _repeats_too_often(out["pattern"]):
            del out["pattern"]
        else:
            out.pop("minLength", None)
            out.pop("maxLength", None)
    if ("minLength" in out or "maxLength" in out) and out.get("type") != "string":
        out.pop("minLength", None)
        out.pop("maxLength", None)
    return out


ANY_VALUE: dict[str, Any] = {"type": ["string", "number", "boolean", "object", "array", "null"]}
"""A schema any JSON value holds to, as the converter reads it (it writes ``{}`` and ``true`` as an
object only)."""


def normalized(schema: Any) -> Any:
    """``schema`` with ``true`` and ``{}`` subschemas written as :data:`ANY_VALUE` (an ``items: {}``
    failed the converter with a bare ``'prefixItems'``, and ``{}`` elsewhere allowed objects only), and
    so is one of annotations alone, which allows any value as ``{}`` does: Claude Code 2.1's
    ``Workflow`` tool has ``args: {"description": ...}``, which the converter refused ("Unrecognized
    schema"), and with it every request of Claude Code's."""
    if schema is True or schema == {}:
        return dict(ANY_VALUE)
    if isinstance(schema, dict) and schema.keys() <= _ANNOTATIONS:
        return {**schema, **ANY_VALUE}
    if not isinstance(schema, dict):
        return schema
    out = with_children(schema, normalized)
    if out.get("additionalProperties") == ANY_VALUE:
        out["additionalProperties"] = True
    return out
