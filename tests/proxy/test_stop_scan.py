"""The stop-sequence scan: the same text held back as trying every tail would, in time linear in the
chunk; stop sequences longer than MAX_STOP_LENGTH refused as OpenAI refuses a string too long."""

from __future__ import annotations

import time

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.request_validation import MAX_STOP_LENGTH
from proxy.normalizer.stop import StopScanner, truncate_at_stop


def _longest_partial_tail(text: str, stops: tuple[str, ...]) -> int:
    """By definition: the longest suffix of ``text`` that is a proper prefix of a stop sequence."""
    for size in range(min(len(text), max(map(len, stops)) - 1), 0, -1):
        if any(stop.startswith(text[-size:]) for stop in stops):
            return size
    return 0


def _scan_by_definition(chunks: list[str], stops: tuple[str, ...]) -> list[str]:
    out, held = [], ""
    for chunk in chunks:
        buffer = held + chunk
        found, hit = truncate_at_stop(buffer, stops)
        if hit is not None:
            return [*out, found]
        keep = _longest_partial_tail(buffer, stops)
        held = buffer[len(buffer) - keep :]
        out.append(buffer[: len(buffer) - keep])
    return [*out, held]


_TEXT = st.text(alphabet="ab", max_size=12)


@settings(max_examples=400, deadline=None)
@given(stops=st.lists(_TEXT.filter(bool), min_size=1, max_size=4), chunks=st.lists(_TEXT, max_size=8))
def test_the_scan_sends_and_holds_what_the_definition_does(stops: list[str], chunks: list[str]) -> None:
    scanner = StopScanner(tuple(stops))
    sent = []
    for chunk in chunks:
        sent.append(scanner.feed(chunk))
        if scanner.hit:
            break
    if not scanner.hit:
        sent.append(scanner.flush())
    assert sent == _scan_by_definition(chunks, tuple(stops))


@pytest.mark.parametrize("stop", ["a" * (2 << 20), "ab" * (1 << 20) + "c", "a" * (MAX_STOP_LENGTH - 1) + "c"])
def test_a_long_chunk_against_a_long_stop_sequence_takes_no_time(stop: str) -> None:
    """A 2 MiB stop sequence against a 1 MiB chunk took 24 s of the event loop when every tail was tried."""
    scanner = StopScanner((stop,))
    start = time.perf_counter()
    sent = scanner.feed("a" * (1 << 20)) + scanner.feed("ab" * (1 << 19))
    assert time.perf_counter() - start < 1.0
    assert not scanner.hit
    assert len(sent) + len(scanner.flush()) == 2 << 20


@pytest.mark.parametrize(
    ("stop", "param"),
    [("x" * (MAX_STOP_LENGTH + 1), "stop"), (["ok", "x" * (MAX_STOP_LENGTH + 1)], "stop[1]")],
)
def test_a_stop_sequence_past_the_bound_is_a_400(proxy_url: str, stop: object, param: str) -> None:
    body = {"model": "m", "prompt": "x", "stop": stop}
    response = httpx.post(proxy_url + "/v1/completions", json=body, timeout=10)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("string_above_max_length", param)
    assert (
        f"maximum length {MAX_STOP_LENGTH}, but got a string with length {MAX_STOP_LENGTH + 1}"
        in (error["message"])
    )


def test_a_stop_sequence_at_the_bound_is_taken(proxy_url: str) -> None:
    body = {"model": "m", "prompt": "x", "stop": "x" * MAX_STOP_LENGTH, "max_tokens": 1}
    response = httpx.post(proxy_url + "/v1/completions", json=body, timeout=10)
    assert response.json().get("error", {}).get("code") != "string_above_max_length"
