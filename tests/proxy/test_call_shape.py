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


def test_arguments_past_the_bound_are_judged_by_their_shape_without_being_held() -> None:
    """Issue 32: held whole and parsed, 9 MB of one call's arguments took a stream to a peak of 137 MB;
    past ``MOST_PARSED`` the fragments go and the shape answers alone, with the same verdicts where
    the shape can see them."""
    piece = "x" * 65536
    count = 2 * call_shape.MOST_PARSED // len(piece)
    long_object = ['{"a": "', *[piece] * count, '"}']
    shape = _shape(*long_object)
    assert shape._parts is None  # let go: nothing of the text is held
    assert shape.whole
    assert not _shape(*long_object[:-1]).whole  # cut inside its string
    assert not _shape(*long_object, "x").whole  # something after it
    assert _shape(*long_object[:3]).whole is False
    short = _shape('{"a": tru}')  # under the bound, the parse sees what the shape cannot
    assert short._parts is not None
    assert not short.whole
