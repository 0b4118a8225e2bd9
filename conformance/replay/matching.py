"""Which transcript answers a request: by name (header) or by path and JSON body, key order ignored."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.transcript import Transcript

__all__ = ["TRANSCRIPT_HEADER", "TranscriptIndex", "request_key", "transcript_stem"]

TRANSCRIPT_HEADER = "x-conformant-transcript"


def transcript_stem(transcript: Transcript) -> str:
    """The name a client uses in the header: the file name without ``.sse``/``.json``."""
    return Path(transcript.name).name


def _normal_path(path: str) -> str:
    return path.split("?", 1)[0].rstrip("/") or "/"


def request_key(path: str, body: Any) -> str:
    """Canonical form of a request: sorted keys make two bodies that differ only in key order equal."""
    return _normal_path(path) + " " + json.dumps(body, sort_keys=True, separators=(",", ":"))


class TranscriptIndex:
    """Lookups by stem and by request; the first transcript wins when two record the same request."""

    def __init__(self, transcripts: Sequence[Transcript]) -> None:
        self.transcripts = list(transcripts)
        self._by_stem: dict[str, Transcript] = {}
        self._by_request: dict[str, Transcript] = {}
        for transcript in self.transcripts:
            self._by_stem.setdefault(transcript_stem(transcript), transcript)
            request = transcript.request or {}
            path = request.get("path")
            if isinstance(path, str) and "body" in request:
                self._by_request.setdefault(request_key(path, request["body"]), transcript)

    def by_name(self, name: str) -> Transcript | None:
        return self._by_stem.get(name.strip())

    def by_request(self, path: str, body: Any) -> Transcript | None:
        return self._by_request.get(request_key(path, body))

    @property
    def names(self) -> list[str]:
        return sorted(self._by_stem)

    @property
    def models(self) -> list[str]:
        """Models named in recorded requests, for ``GET /v1/models``."""
        found = {t.request_body.get("model") for t in self.transcripts}
        return sorted(m for m in found if isinstance(m, str) and m)
