"""proxy/normalizer/call_shape.py: whether streamed argument fragments make one whole JSON object, read
once (issue 32: parsing all fragments joined at each one was quadratic, 40,000 fragments 13.2 s)."""

from __future__ import annotations

import pytest

from conformance import jsoncodec
from proxy.normalizer import call_shape
from proxy.normalizer.call_shape import ObjectShape


def _shape(*fragments: str) -> ObjectShape:
    shape = ObjectShape()
    for fragment in fragments:
        shape.feed(fragment)
    return shape


@pytest.mark.parametrize(
    "fragments",
    [
        ['{"city": "Oslo"}'],
        ['{"ci', 'ty": "Os', 'lo"}'],
        ['{"a": "}{]["}'],  # brackets inside a string count for nothing
        ['{"a": "say \\', '"hi\\" now"}'],  # an escaped quote split after its backslash
        ['  {"a": [1, {"b": null}]}  '],
        ["{}"],
    ],
)
def test_an_object_is_whole_once_it_closes(fragments: list[str]) -> None:
    assert _shape(*fragments).whole
    assert not _shape(*fragments[:-1], fragments[-1][:-3]).whole  # before its end


@pytest.mark.parametrize(
    "fragments",
    [
        ['{"a": 1}', "x"],  # something after the object
        ['{"a": 1}', "{}"],
        ["[1, 2]"],  # not an object
        ["}"] * 5,
        ['{"a" 1}'],  # the shape of one, but no JSON: the parse says so
        [],
    ],
)
def test_anything_else_is_not(fragments: list[str]) -> None:
    assert not _shape(*fragments).whole


def test_fragments_that_never_make_an_object_are_not_parsed_again_and_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The case that was quadratic: every fragment ends in "}" and none makes an object. The text is
    parsed at most once, whatever the number of fragments and of questions asked."""
    parses: list[int] = []
    loads = jsoncodec.loads

    def counted(data: str | bytes) -> object:
        parses.append(len(data))
        return loads(data)

    monkeypatch.setattr(call_shape.jsoncodec, "loads", counted)
    shape = ObjectShape()
    for fragment in ['{"a": 1}', *(["}"] * 40_000)]:
        shape.feed(fragment)
        assert not shape.whole or len(parses) == 1
    assert shape.broken
    assert len(parses) <= 1
