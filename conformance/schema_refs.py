"""A JSON Schema's subschemas and its definitions, as schemas embedded in a larger one need them.

A tool's ``parameters`` are a document of their own: their ``$ref``s (``#/$defs/City``, the shape every
pydantic model with a nested model or an enum has) point at their own root. Embedded in the schema of a
tool call (``{"name": ..., "arguments": <parameters>}``), those refs would point at the call's root, where
nothing is: :func:`localized` renames a document's definitions with a prefix unique to it and rewrites
its refs, and :func:`hoisted` then moves every nested ``$defs`` to the root of the embedding schema. Both
the bundled backend's tool grammars (backend/tool_formats/) and the proxy's tool calls through JSON
output (proxy/adapters/tool_emulation.py) embed parameters so.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = [
    "DATA_KEYWORDS",
    "SUBSCHEMA_LISTS",
    "SUBSCHEMA_MAPS",
    "definitions_prefix",
    "hoisted",
    "localized",
    "with_children",
]

SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
"""Keywords whose values are data, where a key such as ``$ref`` or ``pattern`` is no schema's."""


def with_children(schema: dict[str, Any], change: Any) -> dict[str, Any]:
    """A copy of ``schema`` with ``change`` applied to each of its direct subschemas (other values,
    ``enum`` and ``const`` data among them, are kept as they are)."""
    out = dict(schema)
    for key in SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: change(sub) for name, sub in out[key].items()}
    for key in SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [change(sub) for sub in out[key]]
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), (dict, bool)):
            out[key] = change(out[key])
    return out


def definitions_prefix(owner: str) -> str:
    """A prefix for the definitions of one embedded document (a tool's parameters, a reply's schema):
    unique per owner, and letters, digits and ``-`` only, which schema-to-grammar converters take in
    rule names (a tool name's ``_`` or ``.`` made a recursive reference a rule name llama.cpp could not
    parse)."""
    return "d" + hashlib.sha256(owner.encode()).hexdigest()[:10] + "-"


_DEFS_KEYS = ("$defs", "definitions")


def localized(schema: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``schema`` (a document of its own: a tool's parameters) with its definitions renamed
    ``<prefix><name>`` (``<prefix>definitions-<name>`` for ``definitions``) under ``$defs`` and its
    references into them (``#/$defs/<name>``, ``#/$defs/<name>/properties/...``) rewritten to match,
    so that :func:`hoisted` can move them to the root of a schema that embeds it. ``prefix`` must be
    unique in that schema and made of letters, digits and ``-`` (the converter names rules after it)."""
    renames = {
        f"#/{key}/{name}": f"#/$defs/{prefix}{'' if key == '$defs' else key + '-'}{name}"
        for key in _DEFS_KEYS
        if isinstance(schema.get(key), dict)
        for name in schema[key]
    }
    if not renames:
        return schema

    def renamed(ref: str) -> str:
        for old, new in renames.items():
            if ref == old or ref.startswith(old + "/"):
                return new + ref[len(old) :]
        return ref

    def rewrite(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        out = with_children(node, rewrite)
        ref = out.get("$ref")
        if isinstance(ref, str):
            out["$ref"] = renamed(ref)
        return out

    out: dict[str, Any] = dict(rewrite(schema))
    defs: dict[str, Any] = {}
    for key in _DEFS_KEYS:
        for name, sub in (out.pop(key, None) or {}).items():
            defs[renamed(f"#/{key}/{name}").removeprefix("#/$defs/")] = sub
    out["$defs"] = defs
    return out


def hoisted(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every nested ``$defs`` (made unique by :func:`localized`) moved to its root."""
    found: dict[str, Any] = {}

    def lift(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        out = with_children(node, lift)
        if isinstance(out.get("$defs"), dict):
            found.update(out.pop("$defs"))
        return out

    out: dict[str, Any] = dict(lift(schema))
    if found:
        out["$defs"] = found
    return out
