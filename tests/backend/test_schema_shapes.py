"""Schemas as clients build them reach the grammar converter: definitions of a tool's parameters (or of
a reply's schema) referenced with ``$ref``, ``items: {}`` and ``true`` subschemas. Each was a 400
before (backend/schema_support.py says why); here the grammar is built and the schema it was built from
still means what the client's schema means (checked with jsonschema on answers it must take and refuse).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from backend.grammars import converted
from backend.request_errors import RequestError
from backend.requests import parse_chat_request
from backend.schema_support import (
    ANY_VALUE,
    MAX_REPETITION,
    enforceable,
    gbnf_problem,
    hoisted,
    localized,
    normalized,
    too_large,
    unsupported,
)
from backend.tool_formats.generic import Generic
from backend.tool_formats.grammar import definitions_prefix
from backend.tool_formats.hermes import Hermes

PLACE = {
    "$defs": {
        "Place": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/Unit"}},
            "required": ["city", "unit"],
        },
        "Unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "type": "object",
    "properties": {"place": {"$ref": "#/$defs/Place"}, "notes": {"type": "array", "items": {}}, "any": True},
    "required": ["place"],
}
OLD_STYLE = {
    "definitions": {"Unit": {"enum": ["celsius"]}},
    "type": "object",
    "properties": {"unit": {"$ref": "#/definitions/Unit"}},
    "required": ["unit"],
    "additionalProperties": False,
}


def _tool(name: str, parameters: dict[str, Any], strict: bool) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters, "strict": strict}}


def _request(strict: bool, reply: dict[str, Any] | None = None) -> Any:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [_tool("get_weather", PLACE, strict), _tool("get_unit", OLD_STYLE, strict)],
    }
    if reply is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "r", "schema": reply}}
    return parse_chat_request(body)


@pytest.mark.parametrize("strict", [False, True], ids=["loose", "strict"])
@pytest.mark.parametrize("fmt", [Generic(), Hermes()], ids=["generic", "hermes"])
def test_tools_with_definitions_get_a_grammar(fmt: Any, strict: bool) -> None:
    req = _request(strict, reply=PLACE if isinstance(fmt, Generic) else None)
    plan = fmt.grammar(req.tools, req.tool_choice, True, req.response_schema)
    assert plan is not None
    assert '"\\"celsius\\"" | "\\"fahrenheit\\""' in plan.gbnf  # the referenced enum became a rule


def test_the_wrapped_schema_means_what_the_tools_said() -> None:
    req = _request(True, reply=PLACE)
    schema = hoisted(Generic().schema(req.tools, req.tool_choice, True, req.response_schema))
    weather, unit, reply = (definitions_prefix(owner) for owner in ("get_weather", "get_unit", ""))
    names = [f"{weather}Place", f"{weather}Unit", f"{unit}definitions-Unit", f"{reply}Place", f"{reply}Unit"]
    assert sorted(schema["$defs"]) == sorted(names)
    place = {"place": {"city": "Paris", "unit": "celsius"}, "notes": [1, "x"], "any": None}
    jsonschema.validate({"tool_calls": [{"name": "get_weather", "arguments": place}]}, schema)
    jsonschema.validate({"tool_calls": [{"name": "get_unit", "arguments": {"unit": "celsius"}}]}, schema)
    jsonschema.validate({"response": place}, schema)
    wrong = {"place": {"city": "Paris", "unit": "kelvin"}}
    for answer in ({"tool_calls": [{"name": "get_weather", "arguments": wrong}]}, {"response": wrong}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(answer, schema)


def test_normalized_keeps_data_that_looks_like_schemas() -> None:
    schema = {"type": "array", "items": True, "properties": {"x": {"const": True, "enum": [True, {}]}}}
    assert normalized(schema) == {
        "type": "array",
        "items": ANY_VALUE,
        "properties": {"x": {"const": True, "enum": [True, {}]}},
    }


def test_a_property_of_annotations_alone_allows_any_value() -> None:
    """Claude Code 2.1's ``Workflow`` tool: ``args: {"description": ...}``, refused by the converter
    before, and with it every request Claude Code sends."""
    schema = {"type": "object", "properties": {"args": {"description": "any JSON value"}}}
    assert normalized(schema)["properties"]["args"] == {"description": "any JSON value", **ANY_VALUE}
    gbnf = converted(normalized(schema), "tools")
    assert "args" in gbnf


def test_counts_past_what_a_grammar_repeats_are_dropped_from_tools_and_refused_where_strict() -> None:
    """Claude Code 2.1's ``Workflow`` tool: ``script`` has ``maxLength`` 524,288, which written as a
    grammar overflowed llama.cpp's parser's stack and killed the backend."""
    script = {"type": "string", "maxLength": 524288, "pattern": "^a{0,5000}$"}
    schema = {"type": "object", "properties": {"script": script, "id": {"type": "string", "maxLength": 64}}}
    cleaned = enforceable(schema)
    assert cleaned["properties"] == {"script": {"type": "string"}, "id": {"type": "string", "maxLength": 64}}
    assert "script" in converted(normalized(cleaned), "tools")
    assert unsupported(schema) == f"'maxLength above {MAX_REPETITION}' at /properties/script"
    assert "repeats an item more than 1000 times" in str(gbnf_problem("root ::= x{2,20000}"))
    assert gbnf_problem('root ::= "{0,20000}" [{9999}] x{0,1000}') is None


def test_a_grammar_asking_for_a_nul_or_nested_past_the_parsers_stack_is_a_problem() -> None:
    # Each killed the backend's process (found by black-box testing): llama.cpp aborted on a literal
    # holding a NUL, and its parser overflowed its stack on 20,000 nested groups.
    for nul in ('root ::= "a\\x00b"', "root ::= [\\u0000]", 'root ::= "a\x00"'):
        assert "NUL" in str(gbnf_problem(nul)), nul
    assert gbnf_problem('root ::= [^"\\\\\\x7F\\x00-\\x1F]') is None  # (JSON's strings: NUL excluded)
    deep = "root ::= " + "(" * 1001 + '"a"' + ")" * 1001
    assert "nests groups deeper than 1000" in str(gbnf_problem(deep))
    assert gbnf_problem("root ::= " + "(" * 1000 + '"(((("' + ")" * 1000 + " # ((((") is None


def test_openais_bounds_are_taken_whole_and_passed_by_one() -> None:
    enums = {"anyOf": [{"enum": list(range(500))}, {"items": {"enum": list(range(500))}}]}
    assert too_large(enums) is None
    enums["anyOf"].append({"const": 1, "enum": [1]})
    assert too_large(enums) == "1001 enum values in all, more than the 1000"
    nested = {
        "properties": {f"p{i}": {"properties": {"q": {}}, "required": ["q"]} for i in range(2500)},
        "required": [f"p{i}" for i in range(2500)],
    }
    assert too_large(nested) is None  # (2,500 and one under each)
    nested["properties"]["last"] = {}
    nested["required"].append("last")
    assert too_large(nested) == "5001 object properties in all, more than the 5000"
    optional = {"properties": {f"p{i}": {} for i in range(501)}, "required": ["p0"]}
    assert too_large(optional) is None  # (500 optional, one required)
    optional["required"] = []
    assert too_large(optional) == "an object of 501 optional properties, more than the 500"
    wide = "root ::= " + " | ".join(f'"w{i}|"' for i in range(1001))
    assert "more than 1000 alternatives" in str(gbnf_problem(wide))
    assert gbnf_problem(wide.replace('"w0|" | ', '"w0|" ', 1)) is None  # (a | inside a literal is no branch)


def test_literals_of_a_schema_are_escaped_whole() -> None:
    # llama-cpp-python's converter left a backslash unescaped: a const's JSON escape became GBNF's own
    # ("a\u0000b" a NUL, which killed the process), and a quote in an enum value ended the literal.
    assert (
        converted({"const": "a\u0000b"}, "response_format") == 'root ::= "\\"a\\\\u0000b\\""\nspace ::= " "?'
    )
    assert 'root ::= "\\"a\\\\\\"b\\""' in converted({"enum": ['a"b']}, "response_format")


def test_localized_leaves_a_schema_without_definitions_alone() -> None:
    assert localized(OLD_STYLE["properties"], "t-") is OLD_STYLE["properties"]
    assert localized(OLD_STYLE, "t-")["properties"]["unit"] == {"$ref": "#/$defs/t-definitions-Unit"}


def test_localized_keeps_refs_into_a_definition_and_same_names_apart() -> None:
    schema = {
        "$defs": {"X": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        "definitions": {"X": {"type": "string"}},
        "properties": {"a": {"$ref": "#/$defs/X/properties/n"}, "b": {"$ref": "#/definitions/X"}},
    }
    out = localized(schema, "t-")
    assert out["properties"] == {
        "a": {"$ref": "#/$defs/t-X/properties/n"},
        "b": {"$ref": "#/$defs/t-definitions-X"},
    }
    assert sorted(out["$defs"]) == ["t-X", "t-definitions-X"]


def test_a_response_format_with_an_empty_items_gets_a_grammar() -> None:
    body = {
        "messages": [{"role": "user", "content": "List."}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "l", "schema": {"type": "object", "properties": {"l": {"items": {}}}}},
        },
    }
    assert parse_chat_request(body).sampling.grammar


def test_an_assistant_refusal_part_is_read_as_its_text() -> None:
    """openai-python sends back an assistant turn that refused as a ``refusal`` content part (the spec's
    ``ChatCompletionRequestAssistantMessageContentPart``); it was a 400 "parts must be text parts"."""
    refusal = {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help with that."}]}
    body = {"messages": [{"role": "user", "content": "Hi"}, refusal, {"role": "user", "content": "OK."}]}
    assert parse_chat_request(body).messages[1].content == "I can't help with that."


def test_an_image_part_is_refused_naming_the_part() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}]}
    with pytest.raises(RequestError) as refused:
        parse_chat_request(body)
    assert (refused.value.param, refused.value.code) == ("messages[0].content[1]", "unsupported_content")
    assert "image_url is only supported by certain models" in refused.value.body["error"]["message"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
    ],
)
def test_audio_output_is_refused_not_dropped(extra: dict[str, Any], param: str) -> None:
    """Answered with text only and a 200, the client that asked for audio got none and no word why."""
    with pytest.raises(RequestError) as refused:
        parse_chat_request({"messages": [{"role": "user", "content": "Hi"}], **extra})
    assert (refused.value.param, refused.value.code) == (param, "unsupported_value")


def test_text_modalities_and_a_whole_float_seed_are_taken() -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}], "modalities": ["text"], "seed": 7.0}
    assert parse_chat_request(body).sampling.seed == 7


def test_an_any_items_array_keeps_its_bounds() -> None:
    """``items: {}`` dropped would have left ``minItems`` unenforced (the converter writes a plain array)."""
    schema = {"type": "object", "properties": {"xs": {"type": "array", "items": {}, "minItems": 2}}}
    gbnf = parse_chat_request(
        {
            "messages": [{"role": "user", "content": "List."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "l", "schema": schema}},
        }
    ).sampling.grammar
    assert gbnf is not None
    assert 'xs ::= "[" space xs-item "," space xs-item' in gbnf


def test_recursive_definitions_of_a_tool_named_with_underscores_parse(gemma_backend: Any) -> None:
    """The converter names a recursive reference's rule after the raw reference: a tool name's ``_`` in
    it made a grammar llama.cpp could not parse (a 400 about a 'grammar' the client never sent)."""
    import llama_cpp as ll

    tree = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}},
        "required": ["root"],
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            }
        },
    }
    req = parse_chat_request(
        {"messages": [{"role": "user", "content": "A tree."}], "tools": [_tool("get_tree", tree, True)]}
    )
    plan = Hermes().grammar(req.tools, req.tool_choice, False, None)
    assert plan is not None
    sampler = ll.llama_sampler_init_grammar(gemma_backend.vocab.ptr, plan.gbnf.encode(), b"root")
    assert sampler, plan.gbnf
    ll.llama_sampler_free(sampler)
