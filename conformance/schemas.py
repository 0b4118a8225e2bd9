"""The JSON Schemas in ``schemas/``: loaded once from the installed package, compiled once, cached by shape.

Validation is the hot loop of ``conformant validate``: a stream is thousands of chunks that almost all
share one structure. Whether a chunk is valid depends only on its *shape* (keys, value types, and the
values of the few enum-typed keys), so the result of ``is_valid`` and the list of unknown keys are
cached per shape; only an invalid chunk pays for ``iter_errors``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from jsonschema import Draft202012Validator, SchemaError, ValidationError
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

__all__ = [
    "SCHEMA_NAMES",
    "SchemaCheck",
    "check",
    "load_schema",
    "pointer",
    "registry",
    "request_schema",
    "request_validator",
    "schema_error",
    "validator",
]

SCHEMA_NAMES = (
    "chat_completion",
    "chat_completion_chunk",
    "anthropic_error",
    "chat_completion_request",
    "completion_request",
    "error",
    "logprobs_chat",
    "logprobs_legacy",
    "message",
    "message_stream_event",
    "messages_request",
    "model_list",
    "response",
    "response_request",
    "response_stream_event",
    "text_completion",
    "text_completion_chunk",
    "usage",
)
# Keys whose schema is an enum or const: their values, not just their types, decide validity.
_ENUM_KEYS = frozenset({"object", "finish_reason", "stop_reason", "role", "type", "service_tier"})
_CACHE_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class SchemaCheck:
    errors: tuple[ValidationError, ...]
    """Schema violations, best first (empty when valid)."""
    extras: tuple[tuple[str, str], ...]
    """Keys the schema does not define, as (JSON pointer of the key, key)."""


@cache
def _documents() -> dict[str, dict[str, Any]]:
    package = files("schemas")
    docs: dict[str, dict[str, Any]] = {}
    for name in SCHEMA_NAMES:
        docs[name] = json.loads(package.joinpath(f"{name}.json").read_text(encoding="utf-8"))
    return docs


def load_schema(name: str) -> dict[str, Any]:
    """One schema document as shipped (a shared dict: do not mutate)."""
    return _documents()[name]


@cache
def registry() -> Registry[Any]:
    """All shipped schemas by ``$id``, so ``$ref`` between files resolves without network."""
    resources = [
        (doc["$id"], Resource.from_contents(doc, default_specification=DRAFT202012))
        for doc in _documents().values()
    ]
    return Registry().with_resources(resources)


def _root(name: str, *, absolute: bool = False) -> dict[str, Any]:
    """The schema ``name`` names: a document, or one definition of it (``response_stream_event#/$defs/error``:
    the Responses stream events are one file with one definition per event type). ``absolute`` refers to
    the definition by the document's ``$id``, as a validator resolves it."""
    document, _, fragment = name.partition("#")
    if not fragment:
        return load_schema(document)
    base = load_schema(document)["$id"] if absolute else f"{document}.json"
    return {"$ref": f"{base}#{fragment}"}


@cache
def validator(name: str) -> Draft202012Validator:
    """The compiled validator for one schema (or one definition of it), built once per process."""
    return Draft202012Validator(_root(name, absolute=True), registry=registry())


@cache
def request_schema(name: str) -> dict[str, Any]:
    """A request schema as the suite and the proxy apply it: OpenAI's, less its required ``model``.

    Local clients leave ``model`` out and one-model servers serve them; refusing that would break clients
    and keep none working, so neither the judge (``invalid-request-accepted``) nor the proxy holds it
    against a request."""
    schema = dict(load_schema(name))
    schema["required"] = [key for key in schema["required"] if key != "model"]
    return schema


@cache
def request_validator(name: str) -> Draft202012Validator:
    """The compiled validator for a request schema (the judge's and the proxy's), the schema itself checked
    against the metaschema first: a mistake in the file fails loudly instead of letting requests pass."""
    schema = request_schema(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=registry())


def pointer(path: Iterator[Any] | Any) -> str:
    """RFC 6901 pointer for a jsonschema path (a deque of keys and indices)."""
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in path]
    return "/" + "/".join(parts) if parts else ""


def _shape(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return tuple(
            (k, v if k in _ENUM_KEYS and type(v) is str else _shape(v))
            if k != "top_logprobs"
            else (k, _top_logprobs_shape(v))
            for k, v in value.items()
        )
    if kind is list:
        if not value:
            return ()
        first = type(value[0])
        if first in (str, int, float) and all(type(v) is first for v in value):
            return ("*", first.__name__)
        return ("[", *map(_shape, value))
    if kind is str:
        return "s"
    if value is None:
        return "n"
    return kind.__name__


def _top_logprobs_shape(value: Any) -> Any:
    # Legacy top_logprobs maps have tokens as keys; only their count and value types matter.
    if type(value) is list and all(
        type(m) is dict and all(type(x) is float or type(x) is int for x in m.values()) for m in value
    ):
        return ("map", len(value))
    return _shape(value)


class _Checker:
    def __init__(self, name: str) -> None:
        self.name = name
        self.validator = validator(name)
        self.cache: dict[Any, tuple[bool, tuple[tuple[str, str], ...]]] = {}

    def check(self, doc: Any) -> SchemaCheck:
        key = _shape(doc)
        hit = self.cache.get(key)
        if hit is None:
            if len(self.cache) >= _CACHE_LIMIT:
                self.cache.clear()
            root = self.name.partition("#")[0]
            hit = (self.validator.is_valid(doc), tuple(_extras(doc, _root(self.name), root, "")))
            self.cache[key] = hit
        valid, extras = hit
        if valid:
            return SchemaCheck((), extras)
        errors = sorted(self.validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        return SchemaCheck(tuple(errors), extras)


@cache
def _checker(name: str) -> _Checker:
    return _Checker(name)


def check(name: str, doc: Any) -> SchemaCheck:
    """Validate ``doc`` against schema ``name``; also list the keys the schema does not know."""
    return _checker(name).check(doc)


def _resolve(node: dict[str, Any], root: str) -> tuple[dict[str, Any], str]:
    ref = node.get("$ref")
    while isinstance(ref, str):
        target, _, fragment = ref.partition("#")
        if target:
            root = target.removesuffix(".json")
        node = load_schema(root)
        for part in fragment.strip("/").split("/") if fragment else ():
            node = node[part]
        ref = node.get("$ref")
    return node, root


def _extras(doc: Any, node: dict[str, Any], root: str, where: str) -> Iterator[tuple[str, str]]:
    node, root = _resolve(node, root)
    for branch in node.get("anyOf", ()):
        branch, branch_root = _resolve(branch, root)
        if _type_fits(doc, branch):
            yield from _extras(doc, branch, branch_root, where)
            return
    if isinstance(doc, dict):
        props = node.get("properties")
        if props is None:
            return
        for key, value in doc.items():
            here = f"{where}/{str(key).replace('~', '~0').replace('/', '~1')}"
            if key in props:
                yield from _extras(value, props[key], root, here)
            elif "additionalProperties" not in node:
                yield (here, str(key))
    elif isinstance(doc, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(doc):
            yield from _extras(item, node["items"], root, f"{where}/{i}")


def _type_fits(doc: Any, node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind is None:
        return "properties" in node and isinstance(doc, dict)
    kinds = kind if isinstance(kind, list) else [kind]
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    name = names.get(type(doc), "number")
    return name in kinds or (name == "number" and "integer" in kinds and isinstance(doc, int))


def schema_error(schema: Mapping[str, Any], value: Any) -> str | None:
    """Why ``value`` breaks the JSON ``schema`` (the best match's pointer and message), or None when it
    validates or the schema itself cannot be read (the request's fault, not the response's)."""
    document = dict(schema)
    try:
        cls = validator_for(document)
        cls.check_schema(document)
        error = best_match(cls(document).iter_errors(value))
    except (SchemaError, Unresolvable, RecursionError):  # a $ref to elsewhere is never fetched
        return None
    if error is None:
        return None
    where = "/" + "/".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message[:160]}"
