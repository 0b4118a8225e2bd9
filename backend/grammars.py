"""JSON Schema and JSON-object constraints as GBNF, reusing llama-cpp-python's converter."""

from __future__ import annotations

import json
from typing import Any

from backend.requests import RequestError

__all__ = ["grammar_for_schema", "json_grammar"]


def grammar_for_schema(schema: dict[str, Any], param: str) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        return str(json_schema_to_gbnf(json.dumps(schema)))
    except Exception as exc:  # the converter raises bare Exceptions/KeyErrors on schemas it cannot map
        raise RequestError(
            f"'{param}' holds a JSON Schema this server cannot turn into a grammar: {exc}", param
        ) from None


def json_grammar() -> str:
    from llama_cpp.llama_grammar import JSON_GBNF

    return str(JSON_GBNF)
