"""What a transcript's note (``NAME.source.txt``, where it was taken from) says of its completeness.

A stream quoted in a bug report is usually cut after the chunks that show the bug, and its note says
so ("first three events as quoted", "stream tail", "rest truncated", "an excerpt"); a whole stream's
note says that instead ("the whole response as quoted", "complete stream with [DONE]"), as does one
rebuilt from a server's source ("RECONSTRUCTED"). ``validate`` blamed a folder of such quotes for the
cut (``sse-cut-off``, ``done-missing``: issue 33) unless ``--excerpt`` was given, although each note
already said it. A note that opens with the bug report or pull request it quotes and never says the
stream is whole is an excerpt too, as the shipped corpus reads its quotes (scripts/build_corpus.py):
vLLM #19662's note names the fix it shows, not where its quote stops.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["NOTE_SUFFIX", "note_says_excerpt", "read_note"]

NOTE_SUFFIX = ".source.txt"
_WHOLE = re.compile(r"\bwhole (?:stream|response)\b|\bcomplete stream\b|^RECONSTRUCTED", re.I | re.M)
_CUT = re.compile(
    r"\bexcerpt\b|\belide[sd]?\b|\belision\b|\btruncated\b|\bnot quoted\b|\btail\b"
    r"|\bfirst \w+ (?:events|chunks)\b|\b\w+ (?:complete )?events as quoted\b",
    re.I,
)
_REPORT = re.compile(r"\s*https://github\.com/[^/\s]+/[^/\s]+/(?:issues|pull)/\d+", re.I)
_NOTE_BYTES = 1 << 16


def note_says_excerpt(note: str) -> bool:
    """The note describes a stream cut short on purpose: it says so, or it quotes a report and never
    says the stream is whole."""
    if _WHOLE.search(note):
        return False
    return bool(_CUT.search(note) or _REPORT.match(note))


def read_note(base: Path) -> str | None:
    """The note beside a transcript named ``base`` (its path without suffix), or None."""
    path = base.parent / (base.name + NOTE_SUFFIX)
    try:
        with path.open("rb") as fh:
            return fh.read(_NOTE_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
