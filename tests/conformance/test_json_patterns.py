"""A schema's ``pattern`` as llama.cpp's converter must read it to write the JSON text of a matching
string (conformance/json_patterns.py). Whether the grammars it makes hold is tested where a converter
runs: the bundled backend (tests/backend/test_hostile_grammars.py) and llama-server
(tests/proxy/test_llama_server_real.py)."""

from __future__ import annotations

import re

import pytest

from conformance.json_patterns import json_text_pattern, patterns_as_json_text


def _body(pattern: str) -> str:
    """The rewrite between its ``^(`` and ``)$`` (the body goes in a group of its own)."""
    rewritten = json_text_pattern(pattern)
    assert (rewritten[:2], rewritten[-2:]) == ("^(", ")$"), rewritten
    return rewritten[2:-2]


def test_what_json_escapes_becomes_its_escape_and_the_rest_a_class() -> None:
    # Two backslashes are the converter's escape of one; it escapes a quote itself.
    assert _body('^a"b$') == 'a(\\\\")b'
    assert _body("^a\\\\$") == "a(\\\\\\\\)"
    assert _body("^\\d+$") == "([\\x30-\\x39])+"
    assert _body("^\\.$") == "([\\x2E])"
    assert _body("^a|b{2,}c{,3}d{,}$") == "a|b{2,}c{,3}d{,}"  # (nothing to rewrite: in a group, the
    # Python port's '|' would otherwise split the string's quotes apart)
    # A lone ] or } (or a { that starts no count) is that character: the converter's port looped without
    # end on a bare one.
    assert _body("^a]}{x{}$") == "a(\\])(\\})(\\{)x(\\{)(\\})"
    # Each in a group: the converter joins the character an escape names to the literal before it.
    assert _body("^ab\\(+$") == "ab(\\()+"
    # A lazy quantifier's ? is dropped (the converter took it as "optional" of the repetition: ^a+?$
    # took ""), a group that captures nothing is a group, non-ASCII a class.
    assert _body("^a+?b{2}?(?:c)*?$") == "a+b{2}(c)*"
    assert _body("^é$") == "([\\xE9])"


def test_a_negated_set_is_ascii_alone() -> None:
    # Python's \d, \w, \s hold other scripts' digits, letters and spaces: their complement's
    # ASCII part alone is certain (^\S$ took a no-break space, which \s holds).
    for pattern in ("^\\S$", "^\\D$", "^\\W$", "^[^\\d]$", "^[^\\sa]$"):
        assert re.search(r"\\x[89A-F]|\\[uU]", _body(pattern)) is None, pattern  # (nothing past 0x7F)
    assert "\\x80-\\U0010FFFF" in _body("^[^a]$")  # (no set in it: the whole complement)


def test_a_class_that_spans_a_quote_keeps_it_as_an_escape_and_drops_bare_controls() -> None:
    group = _body("^[ -#]$")
    assert group == '([\\x20-\\x21\\x23]|\\\\")'
    dot = _body("^.$")
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
        ("^a{0,30000}$", "repeating more than 1000 times"),
        ("^a*+$", "possessive"),
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
    assert out["properties"]["a"]["pattern"] == json_text_pattern('^"$')
    assert out["properties"]["pattern"] == {"type": "string"}
    assert out["items"]["anyOf"][0]["pattern"] == json_text_pattern("^\\d$")
    assert out["$defs"]["d"]["pattern"] == "^(x)$"
    assert (out["const"], out["enum"]) == (schema["const"], schema["enum"])
    assert schema["properties"]["a"]["pattern"] == '^"$'  # (a copy: the client's schema is not changed)


def test_an_unenforceable_pattern_raises_or_is_dropped_as_the_caller_asks() -> None:
    schema = {"properties": {"a": {"type": "string", "pattern": "^(?!x)$"}}}
    with pytest.raises(ValueError, match="group syntax"):
        patterns_as_json_text(schema)
    assert patterns_as_json_text(schema, drop_unenforceable=True) == {"properties": {"a": {"type": "string"}}}
