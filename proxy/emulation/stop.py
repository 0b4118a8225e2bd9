"""Stop sequences enforced by the proxy (seed 002, Q76), also when one spans chunk boundaries.

The scanner holds back the shortest tail of the text that could still grow into a stop sequence,
so nothing past a stop sequence ever reaches the client.
"""

from __future__ import annotations

__all__ = ["StopScanner", "truncate_at_stop"]


def truncate_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """The text up to the earliest stop sequence, and whether one was found."""
    cut = -1
    for stop in stops:
        at = text.find(stop)
        if at != -1 and (cut == -1 or at < cut):
            cut = at
    return (text, False) if cut == -1 else (text[:cut], True)


class StopScanner:
    __slots__ = ("_held", "_longest", "_stops", "hit")

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = stops
        self._longest = max(len(s) for s in stops)
        self._held = ""
        self.hit = False

    def feed(self, text: str) -> str:
        """The part of ``text`` safe to send now; after a hit, everything past the stop is dropped."""
        if self.hit:
            return ""
        buffer = self._held + text
        found, self.hit = truncate_at_stop(buffer, self._stops)
        if self.hit:
            self._held = ""
            return found
        keep = self._partial_tail(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

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
