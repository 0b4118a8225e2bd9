"""Stop sequences enforced by the proxy (seed 002, Q76), also when one spans chunk boundaries.

The scanner holds back the shortest tail of the text that could still grow into a stop sequence,
so nothing past a stop sequence ever reaches the client.
"""

from __future__ import annotations

__all__ = ["StopScanner", "truncate_at_stop"]


def truncate_at_stop(text: str, stops: tuple[str, ...], echoed: str = "") -> tuple[str, bool]:
    """The text up to the earliest stop sequence, and whether one was found. ``echoed``: the prompt
    the text begins with (``echo``), where stop sequences do not apply: they end the generated text."""
    start = len(echoed) if echoed and text.startswith(echoed) else 0
    cut = -1
    for stop in stops:
        at = text.find(stop, start)
        if at != -1 and (cut == -1 or at < cut):
            cut = at
    return (text, False) if cut == -1 else (text[:cut], True)


class StopScanner:
    __slots__ = ("_echo", "_held", "_longest", "_stops", "hit")

    def __init__(self, stops: tuple[str, ...], echoed: str = "") -> None:
        self._stops = stops
        self._longest = max(len(s) for s in stops)
        self._held = ""
        self._echo = echoed  # what is left of the echoed prompt, passed on unscanned
        self.hit = False

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
        found, self.hit = truncate_at_stop(buffer, self._stops)
        if self.hit:
            self._held = ""
            return echo + found
        keep = self._partial_tail(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return echo + buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """The held-back tail, at the end of the stream (it never became a stop sequence)."""
        held, self._held = self._held, ""
        return held

    def _partial_tail(self, buffer: str) -> int:
        """Length of the longest suffix of ``buffer`` that is a proper prefix of some stop sequence."""
        limit = min(len(buffer), self._longest - 1)
        for size in range(limit, 0, -1):
            tail = buffer[-size:]
            if any(stop.startswith(tail) for stop in self._stops):
                return size
        return 0
