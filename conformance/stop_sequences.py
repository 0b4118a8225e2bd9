"""Where a text meets the first of its stop sequences: one reading for the bundled backend, which stops
generating there, and the proxy, which cuts an upstream's text there (Q76) and names the sequence for
a protocol that has it (a Message's ``stop_sequence``)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["earliest_stop"]


def earliest_stop(text: str, stops: Sequence[str], start: int = 0) -> tuple[int, str] | None:
    """Where in ``text`` (from ``start``) the earliest of ``stops`` begins, and which one it is (of two
    at one place, the first given); None where none is in it."""
    found: tuple[int, str] | None = None
    for stop in stops:
        at = text.find(stop, start)
        if at != -1 and (found is None or at < found[0]):
            found = (at, stop)
    return found
