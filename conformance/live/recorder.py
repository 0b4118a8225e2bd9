"""Record one HTTP exchange exactly: raw body bytes, per-read timing, status and headers.

The body is read with ``iter_raw`` and ``accept-encoding: identity``, so what is kept is what came
over the wire; credentials never reach a transcript (``save_transcript`` scrubs headers).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from conformance.probe import RequestSpec
from conformance.transcript import Transcript, save_transcript

__all__ = ["Recording", "record", "save_recording"]


@dataclass
class Recording:
    spec: RequestSpec
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    chunk_timing: list[tuple[float, int]] = field(default_factory=list)
    error: str | None = None
    """Why the exchange did not complete (connection refused, timeout, reset); None when it did."""
    cut_after: int | None = None
    """Bytes read before the client hung up on purpose (the disconnect probe)."""

    @property
    def complete(self) -> bool:
        return self.error is None and self.cut_after is None

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None


def record(
    client: httpx.Client,
    spec: RequestSpec,
    *,
    hang_up_after: int | None = None,
) -> Recording:
    """Send ``spec`` and keep everything; ``hang_up_after`` bytes closes the connection early on purpose.

    Transport failures end up in ``Recording.error`` rather than raised, so one bad probe never stops
    a run; ``httpx.ConnectError`` alone is raised, because then no probe can succeed.
    """
    recording = Recording(spec)
    # A fresh connection per exchange: a server that drops a connection after one bad request must not
    # make the next probe fail on a stale pooled socket.
    headers = {
        "content-type": "application/json",
        "accept-encoding": "identity",
        "connection": "close",
        **spec.headers,
    }
    body = bytearray()
    started = time.monotonic()
    try:
        with client.stream(spec.method, spec.path, content=spec.content, headers=headers) as response:
            recording.status = response.status_code
            recording.headers = {k.lower(): v for k, v in response.headers.items()}
            for piece in response.iter_raw():
                body += piece
                recording.chunk_timing.append((time.monotonic() - started, len(piece)))
                if hang_up_after is not None and len(body) >= hang_up_after:
                    recording.cut_after = len(body)
                    break
    except httpx.ConnectError:
        raise
    except httpx.HTTPError as exc:
        recording.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    recording.body = bytes(body)
    return recording


def save_recording(
    recording: Recording,
    base: str | Path,
    *,
    server: str | None = None,
    intent: str | None = None,
    profile: str | None = None,
) -> Transcript:
    """Write the exchange as a transcript; ``intent`` becomes the sidecar's ``expect`` (see
    :mod:`conformance.rules.intents`)."""
    return save_transcript(
        base,
        recording.body,
        request=recording.spec.as_request(),
        status=recording.status,
        headers=recording.headers,
        chunk_timing=recording.chunk_timing,
        server=server,
        intent=intent,
        profile=profile,
        failure=recording.error,
    )
