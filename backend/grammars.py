"""JSON Schema and JSON-object constraints as GBNF, reusing llama-cpp-python's converter.

A schema with a construct the converter would skip (see backend.schema_support) is refused with a 400
that names it and where it is, rather than answered with output the schema does not hold to.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from backend.request_errors import RequestError
from backend.schema_support import normalized, too_large, unsupported
from conformance.json_patterns import json_text_pattern

__all__ = ["converted", "grammar_for_schema", "json_grammar", "schema_gbnf"]

# llama-cpp-python's converter writes a JSON string's character as ``[^"\\]``, which lets a raw control
# character (a newline, a tab) into the string: invalid JSON that Python's json.loads refuses ("Invalid
# control character", measured on the bundled Gemma through /v1/responses). llama.cpp's own converter
# excludes them; so does this project's grammar.
_LOOSE_CHAR = 'char ::= [^"\\\\] |'
_STRICT_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'


# Its literals escape a quote and line breaks but not a backslash, so the JSON text it writes for a
# const, an enum value or a property name was read as GBNF's own escapes: "a\u0000b" as a NUL (llama.cpp
# then aborted the whole process, "Unexpected empty grammar stack"), "a\nb" as a raw newline (invalid
# JSON), 'a"b' as the literal's end (a grammar that did not parse). llama.cpp's converter escapes it.
_LITERAL_ESCAPE = re.compile(r'[\r\n"\\]')
_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\"}


@functools.cache
def _converter_class() -> Any:
    """llama-cpp-python's ``SchemaConverter`` with literals escaped whole (imported when first needed)."""
    from llama_cpp.llama_grammar import SchemaConverter

    class Converter(SchemaConverter):
        def _format_literal(self, literal: str) -> str:
            return '"' + _LITERAL_ESCAPE.sub(lambda m: _LITERAL_ESCAPES[m.group(0)], literal) + '"'

        def _visit_pattern(self, pattern: str, name: str) -> Any:
            return super()._visit_pattern(json_text_pattern(pattern), name)  # type: ignore[no-untyped-call]

        def visit(self, schema: Any, name: str) -> Any:
            # A value's rule is named after its property, and a property named "" of the top object got
            # the name "root" before the object did: the grammar's root was that value, not the object.
            if not name and getattr(self, "_root_visited", False):
                name = "empty-name"
            self._root_visited = True
            return super().visit(schema, name)  # type: ignore[no-untyped-call]

    return Converter


def schema_gbnf(schema: dict[str, Any]) -> str:
    """``schema`` as GBNF by llama-cpp-python's converter (as its ``json_schema_to_gbnf``), literals
    escaped whole and strings held to JSON's characters. Raises what the converter raises on a schema
    it cannot map."""
    converter = _converter_class()(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    resolved = converter.resolve_refs(json.loads(json.dumps(schema)), "stdin")
    converter.visit(resolved, "")
    return str(converter.format_grammar()).replace(_LOOSE_CHAR, _STRICT_CHAR)


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
    """:func:`schema_gbnf`, or a 400 naming ``param`` where the schema is too large to serve or the
    converter fails. Its exceptions are bare (a KeyError, an Exception quoting the whole schema): the
    message keeps their first words only."""
    if (size := too_large(schema)) is not None:
        raise RequestError(
            f"'{param}' holds {size} this server takes in a schema.",
            param,
            code="unsupported_schema",
        )
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
