"""A schema's ``pattern`` as llama.cpp's converter must read it to write the JSON text of a matching
string (conformance/json_patterns.py). Whether the grammars it makes hold is tested where a converter
runs: the bundled backend (tests/backend/test_hostile_grammars.py) and llama-server
(tests/proxy/test_llama_server_real.py)."""

from __future__ import annotations

import re

import pytest

from conformance.json_patterns import json_text_pattern, patterns_as_json_text


def test_what_json_escapes_becomes_its_escape_and_the_rest_a_class() -> None:
    # Two backslashes are the converter's escape of one; it escapes a quote itself.
    assert json_text_pattern('^a"b$') == '^a(\\\\")b$'
    assert json_text_pattern("^a\\\\$") == "^a(\\\\\\\\)$"
    assert json_text_pattern("^\\d+$") == "^([\\x30-\\x39])+$"
    assert json_text_pattern("^\\.$") == "^([\\x2E])$"
    assert json_text_pattern("^a|b{2,}c{,3}$") == "^a|b{2,}c{,3}$"  # (nothing to rewrite)
    # A lone ] or } (or a { that starts no count) is that character: the converter's port looped without
    # end on a bare one.
    assert json_text_pattern("^a]}{x$") == "^a(\\])(\\})(\\{)x$"
    # Each in a group: the converter joins the character an escape names to the literal before it.
    assert json_text_pattern("^ab\\(+$") == "^ab(\\()+$"


def test_a_class_that_spans_a_quote_keeps_it_as_an_escape_and_drops_bare_controls() -> None:
    group = json_text_pattern("^[ -#]$")[1:-1]
    assert group == '([\\x20-\\x21\\x23]|\\\\")'
    dot = json_text_pattern("^.$")[1:-1]
    assert "\\\\n" not in dot  # (. excludes a newline, as a regex's dot does)
    assert all(escape in dot for escape in ("\\\\t", '\\\\"', "\\\\\\\\"))


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("^(a$", "not a valid regular expression"),
        ("a$", "must start with"),
        ("^a$|^b$", "anchor inside"),
        ("^(?=a)$", "group syntax"),
        ("^\\bx$", "escape \\b"),
        ("^[\\x01]$", "only characters JSON cannot write"),
        ("^" + "(" * 101 + "a" + ")" * 101 + "$", "groups nested deeper than 100"),
        ("^" + "(" * 5000 + "a" + ")" * 5000 + "$", "groups nested deeper than 100"),
    ],
)
def test_what_cannot_be_carried_is_a_value_error(pattern: str, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        json_text_pattern(pattern)


def test_every_subschemas_pattern_is_rewritten_and_data_is_not() -> None:
    schema = {
        "properties": {"a": {"pattern": '^"$'}, "pattern": {"type": "string"}},
        "items": {"anyOf": [{"pattern": "^\\d$"}]},
        "$defs": {"d": {"pattern": "^x$"}},
        "const": {"pattern": '^"$'},
        "enum": [{"pattern": '^"$'}],
    }
    out = patterns_as_json_text(schema)
    assert out["properties"]["a"]["pattern"] == '^(\\\\")$'
    assert out["properties"]["pattern"] == {"type": "string"}
    assert out["items"]["anyOf"][0]["pattern"] == "^([\\x30-\\x39])$"
    assert out["$defs"]["d"]["pattern"] == "^x$"
    assert (out["const"], out["enum"]) == (schema["const"], schema["enum"])
    assert schema["properties"]["a"]["pattern"] == '^"$'  # (a copy: the client's schema is not changed)


def test_an_unenforceable_pattern_raises_or_is_dropped_as_the_caller_asks() -> None:
    schema = {"properties": {"a": {"type": "string", "pattern": "^(?!x)$"}}}
    with pytest.raises(ValueError, match="group syntax"):
        patterns_as_json_text(schema)
    assert patterns_as_json_text(schema, drop_unenforceable=True) == {"properties": {"a": {"type": "string"}}}
