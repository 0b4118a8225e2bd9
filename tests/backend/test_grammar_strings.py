"""Strings in a schema's grammar hold to JSON's characters: llama-cpp-python's converter lets a raw
control character into them (``[^"\\]``), and a bundled-backend answer to a ``json_schema`` request came
back as text Python's json.loads refuses ("Invalid control character")."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.backend

pytest.importorskip("llama_cpp")

from backend.grammars import schema_gbnf  # noqa: E402 - after the importorskip that guards the extra
from backend.tool_formats.grammar import schema_rules  # noqa: E402

SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}


@pytest.mark.parametrize("gbnf", [schema_gbnf(SCHEMA), schema_rules(SCHEMA)], ids=["json_schema", "tools"])
def test_a_string_character_excludes_control_characters(gbnf: str) -> None:
    (char,) = [line for line in gbnf.splitlines() if line.startswith("char ::=")]
    assert char.startswith('char ::= [^"\\\\\\x7F\\x00-\\x1F] |'), char
