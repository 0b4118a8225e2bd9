"""JSON Schema and JSON-object constraints as GBNF, reusing llama-cpp-python's converter.

A schema with a construct the converter would skip (see backend.schema_support) is refused with a 400
that names it and where it is, rather than answered with output the schema does not hold to.
"""

from __future__ import annotations

import json
from typing import Any

from backend.request_errors import RequestError
from backend.schema_support import normalized, unsupported

__all__ = ["converted", "grammar_for_schema", "json_grammar", "schema_gbnf"]

# llama-cpp-python's converter writes a JSON string's character as ``[^"\\]``, which lets a raw control
# character (a newline, a tab) into the string: invalid JSON that Python's json.loads refuses ("Invalid
# control character", measured on the bundled Gemma through /v1/responses). llama.cpp's own converter
# excludes them; so does this project's grammar.
_LOOSE_CHAR = 'char ::= [^"\\\\] |'
_STRICT_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'


def schema_gbnf(schema: dict[str, Any]) -> str:
    """``schema`` as GBNF by llama-cpp-python's converter, strings held to JSON's characters. Raises what
    the converter raises on a schema it cannot map."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    return str(json_schema_to_gbnf(json.dumps(schema))).replace(_LOOSE_CHAR, _STRICT_CHAR)


def grammar_for_schema(schema: dict[str, Any], param: str) -> str:
    schema = normalized(schema)
    problem = unsupported(schema)
    if problem is not None:
        raise RequestError(
            f"'{param}' holds a JSON Schema construct this server cannot enforce: {problem}",
            param,
            code="unsupported_schema",
        )
    return converted(schema, param)


def converted(schema: dict[str, Any], param: str) -> str:
    """:func:`schema_gbnf`, or a 400 naming ``param`` where the converter fails. Its exceptions are bare
    (a KeyError, an Exception quoting the whole schema): the message keeps their first words only."""
    try:
        return schema_gbnf(schema)
    except Exception as exc:
        reason = " ".join(str(exc).split())
        reason = reason if len(reason) <= 120 else reason[:117] + "..."
        raise RequestError(
            f"'{param}' holds a JSON Schema this server cannot turn into a grammar ({reason}).",
            param,
            code="unsupported_schema",
        ) from None


def json_grammar() -> str:
    from llama_cpp.llama_grammar import JSON_GBNF

    return str(JSON_GBNF)
