"""The JSON Schemas a client gives in a request, checked as JSON Schemas before the request is served.

A function's ``parameters`` and a structured output's schema are handed to the upstream, which turns
them into a grammar. One that is not a JSON Schema (``{"type": "nonsense"}``, ``"required": true``)
got llama-server's 400 with ``param: null`` and its converter's words ("Unable to generate parser for
this template... JSON schema error at #: unrecognized type nonsense"), llama-cpp-python's 500, or, from
a server that ignores what it cannot read, an answer under no constraint at all. OpenAI checks them
against the JSON Schema meta-schema and answers 400 "Invalid schema for function 'f': ..." naming the
function; Anthropic "tools.0.custom.input_schema: JSON schema is invalid. It must match JSON Schema draft
2020-12". So does the proxy, with the parameter that holds the schema (each front-end words it in its
client's names).

The meta-schema is draft 7's: it holds what a grammar is built from (``type``, ``properties``,
``required``, ``items``, ``enum``, the combinators) as 2020-12's does, at a fifth of the cost (59 us per
property against 326, measured on 5,000 properties; 2020-12's meta-schema resolves ``$dynamicRef`` at
every node), with 2020-12's keywords that hold subschemas added to it (``$defs``, ``prefixItems``...,
which it would leave unchecked as it does any keyword it does not know); and a ``$ref`` within the schema
must point at something in it. An agent sends the same tools on every turn: a schema's verdict is kept by
its digest (bounded), so a seen schema costs its serialization (7 us for a shell tool's), not a check
(1.7 ms); a body with many new ones is read off the event loop (front_end.py ``is_large``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jsonschema import Draft7Validator
from jsonschema.exceptions import best_match

from conformance import jsoncodec
from conformance.api_errors import MAX_MESSAGE, InvalidRequest, quoted
from conformance.schema_refs import DATA_KEYWORDS

__all__ = ["check_given_schemas", "schema_problem"]

_SUBSCHEMA_KEYWORDS_SINCE_DRAFT_7 = {
    "$defs": {"type": "object", "additionalProperties": {"$ref": "#"}},
    "prefixItems": {"type": "array", "items": {"$ref": "#"}},
    "dependentSchemas": {"type": "object", "additionalProperties": {"$ref": "#"}},
    "unevaluatedItems": {"$ref": "#"},
    "unevaluatedProperties": {"$ref": "#"},
}
"""2020-12's keywords that hold subschemas, which draft 7's meta-schema would leave unchecked:
``$defs`` is where pydantic and zod put every nested model, and a bad one there reached llama-server
(black-box testing)."""
_META = Draft7Validator(
    {
        # (no ``$id``: its ``#`` refs are this document's, not the registry's draft 7)
        **{key: value for key, value in Draft7Validator.META_SCHEMA.items() if key != "$id"},
        "properties": {**Draft7Validator.META_SCHEMA["properties"], **_SUBSCHEMA_KEYWORDS_SINCE_DRAFT_7},
    }
)
_VERDICTS_LIMIT = 4096
_verdicts: dict[bytes, str | None] = {}
"""Digest of a schema's JSON -> why it is not a JSON Schema, or None where it is one. Read and written
from the event loop and from the worker threads of large bodies: a lookup is one ``get``, never a test
then a read that a ``clear`` between the two would break."""
_UNSEEN = "unseen"


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` is not a JSON Schema, in OpenAI's manner, or None."""
    digest = hashlib.blake2b(jsoncodec.dumps(schema), digest_size=16).digest()
    if (known := _verdicts.get(digest, _UNSEEN)) is not _UNSEEN:
        return known
    why = _checked(schema)
    if len(_verdicts) >= _VERDICTS_LIMIT:
        _verdicts.clear()
    _verdicts[digest] = why
    return why


def _checked(schema: Mapping[str, Any]) -> str | None:
    """The meta-schema's verdict on ``schema``, its words bounded: the path and the message quote the
    client's keys and values, which may be megabytes."""
    try:
        error = best_match(_META.iter_errors(schema))
        dangling = None if error is not None else _dangling_ref(schema)
    except RecursionError:  # (nested past what the validator recurses through; the body parser takes it)
        return "the schema is nested too deeply"
    if error is None:
        return dangling
    return _verdict(error.absolute_path, quoted(error.message))


def _verdict(path: Iterable[Any], why: str) -> str:
    """OpenAI's words of what is wrong where (``In context=('properties', 'city'), ...``), bounded."""
    where = ", ".join(repr(quoted(str(part))) for part in path)
    return f"In context=({where}), {why}"[:MAX_MESSAGE]


def _dangling_ref(schema: Mapping[str, Any]) -> str | None:
    """Where a ``$ref`` within the schema (``#/$defs/City``) points at nothing in it, in the words of a
    verdict, or None; a ref elsewhere (a URL, an anchor) is the upstream's to read."""
    for path, ref in _refs(schema, ()):
        if ref.startswith("#") and not _resolves(schema, ref):
            return _verdict(path, f"the $ref {quoted(ref)!r} points at nothing in the schema")
    return None


_NAMED_SUBSCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def _refs(node: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    """Each ``$ref`` of the schema ``node`` and its subschemas, with its path; not in data (``enum``)."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from _refs(item, (*path, str(index)))
        return
    if not isinstance(node, Mapping):
        return
    if isinstance(node.get("$ref"), str):
        yield path, node["$ref"]
    for key, value in node.items():
        if key in _NAMED_SUBSCHEMAS and isinstance(value, Mapping):  # names there, schemas below them
            for name, sub in value.items():
                yield from _refs(sub, (*path, key, str(name)))
        elif key not in DATA_KEYWORDS:
            yield from _refs(value, (*path, str(key)))


def _resolves(root: Any, ref: str) -> bool:
    """Whether the JSON pointer of ``ref`` (``#/a/b``, ``~1`` for ``/``, ``~0`` for ``~``) names a
    value in ``root``; a fragment that is no pointer (an anchor) is taken to."""
    if not ref.startswith("#/"):
        return True
    node = root
    for part in ref[2:].split("/"):
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return False
    return True


def _given(body: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """Each schema of a chat request: (its parameter, what it is the schema of, the schema)."""
    tools = body.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and "parameters" in function:
            name = quoted(str(function.get("name")))
            yield f"tools[{index}].function.parameters", f"function '{name}'", function["parameters"]
    response_format = body.get("response_format")
    json_schema = response_format.get("json_schema") if isinstance(response_format, Mapping) else None
    if isinstance(json_schema, Mapping) and "schema" in json_schema:
        name = quoted(str(json_schema.get("name")))
        yield "response_format.json_schema.schema", f"response_format '{name}'", json_schema["schema"]


def check_given_schemas(body: Mapping[str, Any]) -> None:
    """A 400 :class:`InvalidRequest` for the first schema of chat request ``body`` (a function's
    ``parameters``, ``response_format``'s schema) that is not a JSON Schema; the request schema has
    already said each is an object."""
    for param, owner, schema in _given(body):
        if not isinstance(schema, Mapping):
            continue  # (a wrong type is the request schema's to word)
        why = schema_problem(schema)
        if why is not None:
            message = f"Invalid schema for {owner}: {why}."
            raise InvalidRequest.make(message, 400, code="invalid_json_schema", param=param)
