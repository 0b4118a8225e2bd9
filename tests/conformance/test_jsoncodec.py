"""The hot-path JSON codec reads and writes what the standard library did, orjson's refusals included."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conformance import jsoncodec
from conformance.api_errors import APIError
from conformance.request_validation import parse_request

BIG = 2**70  # beyond orjson's 64-bit integers


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "b": [true, null, 1.5e-05], "c": "\\u00e9\\u4e16"}',
        f'{{"seed": {BIG}}}',  # orjson refuses it; Python's parser takes it
        '{"logprob": -Infinity, "x": NaN}',  # not JSON, but some upstreams send it
        '{"half": "\\ud83d"}',  # half of an emoji, escaped
    ],
)
def test_loads_reads_what_the_standard_library_reads(text: str) -> None:
    expected = json.loads(text)
    for data in (text, text.encode()):
        got = jsoncodec.loads(data)
        assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


def test_loads_rejects_what_the_standard_library_rejects() -> None:
    with pytest.raises(ValueError, match="Expecting"):
        jsoncodec.loads(b'{"a": ')


@pytest.mark.parametrize(
    "obj",
    [
        {"content": "h\u00e9llo \u4e16\u754c", "n": 3, "f": 0.25, "none": None, "list": [1, "x"]},
        {"seed": BIG},
        {"content": "\ud83d"},  # a lone surrogate cannot be UTF-8: written as its escape
    ],
)
def test_dumps_writes_compact_json_that_reads_back(obj: dict[str, Any]) -> None:
    raw = jsoncodec.dumps(obj)
    raw.decode("utf-8")  # always valid UTF-8
    assert b": " not in raw
    assert b", " not in raw
    assert json.loads(raw) == obj


def test_dumps_keeps_non_ascii_text_unescaped() -> None:
    assert jsoncodec.dumps({"t": "\u00e9"}) == '{"t":"\u00e9"}'.encode()


def test_request_parser_takes_integers_beyond_64_bits_and_still_refuses_nan() -> None:
    message = '[{"role": "user", "content": "hi"}]'
    body = parse_request("chat_completion_request", f'{{"messages": {message}, "user_tag": {BIG}}}'.encode())
    assert body["user_tag"] == BIG
    with pytest.raises(APIError) as raised:
        parse_request("chat_completion_request", f'{{"messages": {message}, "temperature": NaN}}'.encode())
    assert raised.value.status == 400
    assert "not valid JSON" in raised.value.message
    with pytest.raises(APIError) as raised:
        parse_request("chat_completion_request", b'{"messages": [,]}')
    assert "(line 1, column 15)" in raised.value.message  # the standard parser's position


@pytest.mark.parametrize("inner", ["1", f"{BIG}"], ids=["orjson", "standard library"])
@pytest.mark.parametrize("depth", [jsoncodec.MAX_DEPTH + 1, 1000, 5000])
def test_loads_refuses_json_nested_deeper_than_it_can_write_back(inner: str, depth: int) -> None:
    deep = "[" * depth + inner + "]" * depth
    for data in (deep, deep.encode()):
        with pytest.raises(ValueError, match="nested too deeply"):
            jsoncodec.loads(data)
    most = jsoncodec.MAX_DEPTH
    assert jsoncodec.dumps(jsoncodec.loads("[" * most + inner + "]" * most)).startswith(b"[[[")
    with pytest.raises(APIError, match="nested too deeply"):
        parse_request("chat_completion_request", ('{"messages": [], "x": ' + deep + "}").encode())


@pytest.mark.parametrize("inner", ["1", f"{BIG}"], ids=["orjson", "standard library"])
@pytest.mark.parametrize("padding", [0, 5000], ids=["brackets counted", "written again"])
def test_the_depth_bound_is_exact_on_short_and_long_documents(inner: str, padding: int) -> None:
    # Up to 4 KiB the brackets are counted first; past it orjson's writing measures the depth (and the
    # walk, where orjson refuses a big integer): the bound is the same either way.
    pad = '"' + "x" * padding + '", '

    def nested(depth: int) -> str:
        return "[" * depth + pad + inner + "]" * depth

    assert jsoncodec.loads(nested(jsoncodec.MAX_DEPTH))
    with pytest.raises(ValueError, match="nested too deeply"):
        jsoncodec.loads(nested(jsoncodec.MAX_DEPTH + 1).encode())
