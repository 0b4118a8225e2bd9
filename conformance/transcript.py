"""Transcripts: a recorded response body (``NAME.sse``) plus an optional sidecar (``NAME.json``).

The format is fixed in the design document: the body file holds the bytes exactly as received
(whatever the content type); the sidecar holds the request, the response status and headers, and
per-read timing. A ``.json`` file without ``request``/``response`` keys is a bare response body.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.source_note import note_says_excerpt, read_note

__all__ = [
    "SCRUBBED_HEADERS",
    "Transcript",
    "TranscriptError",
    "discover",
    "load_transcript",
    "save_transcript",
    "scrub_headers",
]

SCRUBBED_HEADERS = frozenset(
    {"authorization", "api-key", "x-api-key", "cookie", "set-cookie", "proxy-authorization"}
)
_READ_SIZE = 1 << 16
_SNIFF = 4096


class TranscriptError(Exception):
    """A transcript that cannot be read: missing, unreadable, not text, or a malformed sidecar."""


def scrub_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers safe to store: credentials and cookies never reach a transcript."""
    return {k.lower(): v for k, v in headers.items() if k.lower() not in SCRUBBED_HEADERS}


@dataclass
class Transcript:
    name: str
    """Path without suffix; what reports call the source."""
    body_path: Path | None
    request: dict[str, Any] | None = None
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    chunk_timing: list[tuple[float, int]] = field(default_factory=list)
    server: str | None = None
    excerpt: bool = False
    """Cut short on purpose (pasted from a bug report): its end says nothing about the server."""
    body: bytes | None = None
    """The body when it came from memory (a bare ``.json`` file or a live recording) rather than a file."""
    intent: str | None = None
    """The sidecar's ``expect``: what the exchange was meant to show (a probe's intent, see
    :mod:`conformance.rules.intents`); None for an ordinary recording."""
    profile: str | None = None
    """The sidecar's ``profile``: the specification ``check`` judged the exchange by (rules/context.py),
    so that ``validate`` judges it alike; None: the judge's default."""
    failure: str | None = None
    """The sidecar's ``failure``: why the exchange did not complete (a timeout, a reset), so that the
    bytes that came are judged as what they are, a response cut by the client, not by the server."""

    @property
    def request_body(self) -> dict[str, Any]:
        body = (self.request or {}).get("body")
        return body if isinstance(body, dict) else {}

    @property
    def content_type(self) -> str | None:
        value = self.headers.get("content-type")
        return value.split(";", 1)[0].strip().lower() if value else None

    @property
    def stream(self) -> bool:
        """Streaming if the request asked for it; else by content type; else by sniffing the body."""
        asked = self.request_body.get("stream")
        if isinstance(asked, bool):
            return asked
        if self.content_type == "text/event-stream":
            return True
        if self.content_type is not None and self.content_type.endswith("json"):
            return False
        head = self.head().lstrip(b"\xef\xbb\xbf \t\r\n")
        return not head.startswith((b"{", b"["))

    def head(self, size: int = _SNIFF) -> bytes:
        if self.body is not None:
            return self.body[:size]
        if self.body_path is None:
            return b""
        with self.body_path.open("rb") as fh:
            return fh.read(size)

    def iter_body(self, size: int = _READ_SIZE) -> Iterator[bytes]:
        """The body in bounded reads, so a 1 GB transcript never sits in memory whole."""
        if self.body is not None:
            for start in range(0, len(self.body), size):
                yield self.body[start : start + size]
            return
        if self.body_path is None:
            return
        with self.body_path.open("rb") as fh:
            while chunk := fh.read(size):
                yield chunk

    def read_body(self, limit: int = 64 << 20) -> bytes:
        """The whole body, for non-streaming JSON; refuses bodies larger than ``limit``."""
        if self.body is not None:
            return self.body
        if self.body_path is None:
            return b""
        if self.body_path.stat().st_size > limit:
            raise TranscriptError(f"{self.body_path}: a non-streaming body over {limit >> 20} MiB")
        return self.body_path.read_bytes()


def _read_json(path: Path) -> Any:
    try:
        if path.stat().st_size > 64 << 20:
            raise TranscriptError(f"{path}: sidecar larger than 64 MiB")
        return json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise TranscriptError(f"{path}: not a readable JSON file ({type(exc).__name__})") from None


def _sibling(base: Path, suffix: str) -> Path:
    """``base`` plus a suffix; unlike ``with_suffix`` it keeps dots inside the name (``x.reconstructed``)."""
    return base.parent / (base.name + suffix)


def _looks_binary(head: bytes) -> bool:
    return b"\x00" in head


def _files(path: Path) -> tuple[Path | None, Path, str]:
    """The body file, the sidecar and the transcript's name that ``path`` (either file) stands for."""
    if path.suffix not in {".sse", ".json"}:
        return path, path.with_name(path.name + ".json"), str(path)
    base = path.parent / path.stem
    return _sibling(base, ".sse"), _sibling(base, ".json"), str(base)


def load_transcript(path: str | Path) -> Transcript:
    """Load a transcript named by either of its files (``x.sse`` finds ``x.json`` and the reverse)."""
    path = Path(path)
    body_path, side_path, name = _files(path)
    if not path.exists():
        raise TranscriptError(f"{path}: no such file")
    if path.is_dir():
        raise TranscriptError(f"{path}: is a directory")
    transcript = Transcript(name=name, body_path=None)
    has_body = body_path is not None and body_path.exists()
    sidecar: dict[str, Any] = {}
    if side_path.exists():
        loaded = _read_json(side_path)
        sidecar = loaded if isinstance(loaded, dict) else {}
        if "request" not in sidecar and "response" not in sidecar:
            # A response body as pasted from docs or a report (an array too: llama.cpp's reply to a
            # prompt array, Q73, which the body rules judge). Both a body and a bare JSON next to it:
            # the .json is not a sidecar; the .sse is judged.
            if not has_body:
                transcript.body = side_path.read_bytes()
                transcript.headers = {"content-type": "application/json"}
                return transcript
            sidecar = {}
    if has_body:
        assert body_path is not None
        transcript.body_path = _readable_body(body_path)
        if path.suffix not in {".sse", ".json"} and not sidecar:
            _looks_like_a_response(body_path)
    _take_sidecar(transcript, sidecar, side_path)
    return transcript


_SSE_OR_JSON_START = re.compile(rb"\s*(?:[A-Za-z_-]*:|[{\[]|$)")


def _looks_like_a_response(body_path: Path) -> None:
    """A file named neither ``.sse`` nor ``.json``, with no sidecar, is judged only when it begins as an
    SSE stream (a field, ``data:``...) or a JSON body: ``validate README.md`` reported 130 unknown SSE
    fields of a Markdown file instead of saying it is no transcript (issue 32)."""
    with body_path.open("rb") as fh:
        head = fh.read(_SNIFF)
    if not _SSE_OR_JSON_START.match(head):
        first = head.lstrip().split(b"\n", 1)[0][:40].decode("utf-8", "replace")
        raise TranscriptError(
            f"{body_path}: not a transcript: it begins {first!r}, neither an SSE stream nor a JSON body"
        )


def _readable_body(body_path: Path) -> Path:
    """``body_path``, once its start says it is text (an SSE stream or a JSON body), not binary data."""
    try:
        with body_path.open("rb") as fh:
            head = fh.read(_SNIFF)
    except OSError as exc:
        raise TranscriptError(f"{body_path}: cannot read ({exc.strerror})") from None
    if _looks_binary(head):
        raise TranscriptError(f"{body_path}: binary data, not an SSE or JSON transcript")
    return body_path


def _take_sidecar(transcript: Transcript, sidecar: dict[str, Any], side_path: Path) -> None:
    """What the sidecar says of the exchange, each field checked for its type."""
    request = sidecar.get("request")
    response = sidecar.get("response") or {}
    if request is not None and not isinstance(request, dict):
        raise TranscriptError(f"{side_path}: 'request' must be an object")
    if request is not None and not isinstance(request.get("path", ""), str):
        raise TranscriptError(f"{side_path}: 'request.path' must be a string")
    if not isinstance(response, dict):
        raise TranscriptError(f"{side_path}: 'response' must be an object")
    transcript.request = request
    status = response.get("status")
    if status is not None and (not isinstance(status, int) or isinstance(status, bool)):
        # ("200", a string, was read as no status at all, and the response judged without one)
        raise TranscriptError(f"{side_path}: 'response.status' must be an integer")
    transcript.status = status
    headers = response.get("headers") or {}
    transcript.headers = (
        {str(k).lower(): str(v) for k, v in headers.items()} if isinstance(headers, dict) else {}
    )
    timing = sidecar.get("chunk_timing") or []
    try:
        transcript.chunk_timing = [(float(t), int(n)) for t, n in timing]
    except (TypeError, ValueError):
        raise TranscriptError(f"{side_path}: 'chunk_timing' must be a list of [seconds, bytes]") from None
    server = sidecar.get("server")
    transcript.server = server if isinstance(server, str) else None
    transcript.intent = _typed(sidecar, "expect", str, side_path, "a string")
    transcript.profile = _typed(sidecar, "profile", str, side_path, "a string")
    transcript.failure = _typed(sidecar, "failure", str, side_path, "a string")
    excerpt = _typed(sidecar, "excerpt", bool, side_path, "true or false")
    if excerpt is None:  # the sidecar does not say: the note beside it may (a quote from a report)
        note = read_note(Path(transcript.name))
        excerpt = note is not None and note_says_excerpt(note)
    transcript.excerpt = excerpt


def _typed(sidecar: dict[str, Any], key: str, kind: type, side_path: Path, words: str) -> Any:
    """The sidecar's ``key`` (None when absent), or a ``TranscriptError`` when it is not a ``kind``."""
    value = sidecar.get(key)
    if value is not None and not isinstance(value, kind):
        raise TranscriptError(f"{side_path}: '{key}' must be {words}")
    return value


def discover(paths: Iterable[str | Path]) -> list[Transcript]:
    """Transcripts under files and folders, each pair counted once, in a stable order."""
    seen: set[str] = set()
    found: list[Transcript] = []

    def add(candidate: Path) -> None:
        paired = candidate.suffix in {".sse", ".json"}
        key = str(candidate.parent / candidate.stem) if paired else str(candidate)
        if key in seen:
            return
        seen.add(key)
        found.append(load_transcript(candidate))

    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.suffix in {".sse", ".json"}:
                    add(child)
        else:
            add(path)
    return found


def save_transcript(
    base: str | Path,
    body: bytes,
    *,
    request: Mapping[str, Any] | None = None,
    status: int | None = None,
    headers: Mapping[str, str] | None = None,
    chunk_timing: Iterable[tuple[float, int]] = (),
    server: str | None = None,
    intent: str | None = None,
    excerpt: bool = False,
    profile: str | None = None,
    failure: str | None = None,
) -> Transcript:
    """Write ``base.sse`` and ``base.json``; request and response headers are scrubbed of credentials.

    ``intent`` is written as the sidecar's ``expect``, ``profile`` as its ``profile`` and ``failure`` (why
    the exchange did not complete) as its ``failure``, so ``validate`` judges the exchange as ``check``
    did."""
    base = Path(base)
    base.parent.mkdir(parents=True, exist_ok=True)
    if base.suffix in {".sse", ".json"}:
        base = base.parent / base.stem
    body_path = _sibling(base, ".sse")
    body_path.write_bytes(body)
    req: dict[str, Any] | None = None
    if request is not None:
        req = dict(request)
        if isinstance(req.get("headers"), Mapping):
            req["headers"] = scrub_headers(req["headers"])
    sidecar: dict[str, Any] = {}
    if server:
        sidecar["server"] = server
    if excerpt:
        sidecar["excerpt"] = True
    if req is not None:
        sidecar["request"] = req
    if intent:
        sidecar["expect"] = intent
    if profile:
        sidecar["profile"] = profile
    if failure:
        sidecar["failure"] = failure
    sidecar["response"] = {"status": status, "headers": scrub_headers(headers or {})}
    timing = [[round(t, 6), n] for t, n in chunk_timing]
    if timing:
        sidecar["chunk_timing"] = timing
    _sibling(base, ".json").write_text(json.dumps(sidecar, indent=2) + "\n")
    return load_transcript(body_path)
