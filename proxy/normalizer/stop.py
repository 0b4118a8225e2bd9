"""Stop sequences enforced by the proxy (seed 002, Q76), also when one spans chunk boundaries.

The scanner holds back the shortest tail of the text that could still grow into a stop sequence,
so nothing past a stop sequence ever reaches the client.

The scan is linear in what arrives: a stop sequence is looked for with ``str.find`` (linear in
CPython) and the tail to hold back is a KMP automaton's state, carried from one chunk to the next
(or, for a chunk longer than the stop sequence, found from the chunk's last characters alone). Trying
every tail against every stop sequence, as before, took 24 s of the event loop for a 2 MiB stop
sequence against a 1 MiB chunk. Requests bound each stop sequence to ``MAX_STOP_LENGTH`` characters
too (conformance/request_validation.py).
"""

from __future__ import annotations

from conformance.stop_sequences import earliest_stop

__all__ = ["StopScanner", "truncate_at_stop"]


def truncate_at_stop(text: str, stops: tuple[str, ...], echoed: str = "") -> tuple[str, str | None]:
    """The text up to the earliest stop sequence, and the one found there (None: none was; of two at
    one place, the first given). ``echoed``: the prompt the text begins with (``echo``), where stop
    sequences do not apply: they end the generated text."""
    start = len(echoed) if echoed and text.startswith(echoed) else 0
    found = earliest_stop(text, stops, start)
    return (text, None) if found is None else (text[: found[0]], found[1])


class _Prefixes:
    """The KMP automaton of one stop sequence: how long a suffix of the text scanned so far is also a
    proper prefix of it, carried from chunk to chunk."""

    __slots__ = ("_fail", "_stop", "state")

    def __init__(self, stop: str) -> None:
        self._stop = stop
        # _fail[i]: the longest proper prefix of stop[: i + 1] that is also its suffix.
        fail = [0] * len(stop)
        matched = 0
        for i in range(1, len(stop)):
            while matched and stop[i] != stop[matched]:
                matched = fail[matched - 1]
            if stop[i] == stop[matched]:
                matched += 1
            fail[i] = matched
        self._fail = fail
        self.state = 0

    def advance(self, text: str) -> None:
        """Take in ``text`` (the stop sequence is not in what was scanned: the caller looked)."""
        stop, fail = self._stop, self._fail
        if len(text) >= len(stop):
            # A suffix shorter than the stop sequence lies within the text's last characters.
            text = text[len(text) - len(stop) + 1 :]
            self.state = 0
        state = self.state
        for char in text:
            while state and stop[state] != char:
                state = fail[state - 1]
            if stop[state] == char:
                state += 1  # never to len(stop): the caller found no stop sequence in what was held
        self.state = state


class StopScanner:
    __slots__ = ("_echo", "_held", "_prefixes", "_stops", "matched")

    def __init__(self, stops: tuple[str, ...], echoed: str = "") -> None:
        self._stops = stops
        self._prefixes = [_Prefixes(stop) for stop in stops]
        self._held = ""
        self._echo = echoed  # what is left of the echoed prompt, passed on unscanned
        self.matched: str | None = None
        """The stop sequence met, once one is: nothing is sent after it."""

    @property
    def hit(self) -> bool:
        return self.matched is not None

    def feed(self, text: str) -> str:
        """The part of ``text`` safe to send now; after a hit, everything past the stop is dropped."""
        if self.hit:
            return ""
        echo = ""
        if self._echo:
            # The prompt, as far as the text repeats it (an upstream that does not echo in a stream,
            # as llama-cpp-python does not, has all its text scanned).
            same = 0
            while same < min(len(text), len(self._echo)) and text[same] == self._echo[same]:
                same += 1
            echo, text = text[:same], text[same:]
            self._echo = self._echo[same:] if not text else ""
        if not text:
            return echo
        buffer = self._held + text
        found, self.matched = truncate_at_stop(buffer, self._stops)
        if self.hit:
            self._held = ""
            return echo + found
        keep = 0
        for prefixes in self._prefixes:
            prefixes.advance(text)
            keep = max(keep, prefixes.state)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return echo + buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """The held-back tail, at the end of the stream (it never became a stop sequence)."""
        held, self._held = self._held, ""
        return held
