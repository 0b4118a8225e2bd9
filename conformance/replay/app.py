"""The replay server: a Starlette app that answers requests with recorded transcripts, as a fake upstream."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from conformance.api_errors import error_response
from conformance.replay.matching import TRANSCRIPT_HEADER, TranscriptIndex
from conformance.replay.pacing import paced_body
from conformance.transcript import Transcript

__all__ = ["create_replay_app"]

# Framing headers describe the original connection, not this one; the ASGI server sets its own.
_NOT_REPLAYED = frozenset(
    {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding", "date", "server"}
)
_HOW_TO_RECORD = (
    "record one with `conformant record UPSTREAM_BASE_URL --path {path} --body @REQUEST.json "
    "--output DIR --name NAME` and serve DIR, or name a transcript with the `x-conformant-transcript: NAME` "
    "header"
)


def _replay(transcript: Transcript, pace: float | None) -> Response:
    started = time.monotonic()
    headers = {k: v for k, v in transcript.headers.items() if k not in _NOT_REPLAYED}
    return StreamingResponse(
        paced_body(transcript, pace, started),
        status_code=transcript.status or 200,
        headers=headers,
    )


def create_replay_app(transcripts: Sequence[Transcript], pace: float | None = 1.0) -> Starlette:
    """Serve ``transcripts``; ``pace`` scales recorded delays (2.0 = half speed, None = no pacing)."""
    if pace is not None and pace < 0:
        raise ValueError("pace must be a non-negative factor or None")
    index = TranscriptIndex(transcripts)

    async def replay(request: Request) -> Response:
        path = request.url.path
        named = request.headers.get(TRANSCRIPT_HEADER)
        if named is not None:
            chosen = index.by_name(named)
            if chosen is None:
                return error_response(
                    f"no transcript named {named!r}; this server has {len(index.names)}: "
                    f"{', '.join(index.names[:20])}" + (" ..." if len(index.names) > 20 else ""),
                    404,
                    code="transcript_not_found",
                )
            return _replay(chosen, pace)
        raw = await request.body()
        try:
            body = json.loads(raw) if raw.strip() else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            # A recording of a malformed request keeps the body as its text (see RequestSpec.as_request).
            chosen = index.by_request(path, raw.decode("utf-8", "replace"))
            if chosen is not None:
                return _replay(chosen, pace)
            return error_response(
                "the request body is not valid JSON, so no recorded request can match it; "
                + _HOW_TO_RECORD.format(path=path),
                400,
                code="invalid_json",
            )
        chosen = index.by_request(path, body)
        if chosen is None:
            return error_response(
                f"no recorded transcript matches {request.method} {path} with this JSON body; "
                + _HOW_TO_RECORD.format(path=path),
                404,
                code="transcript_not_found",
            )
        return _replay(chosen, pace)

    async def models(_: Request) -> Response:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "conformant-replay"} for m in index.models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok", "transcripts": len(index.transcripts)})

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/{path:path}", replay, methods=["POST"]),
    ]
    return Starlette(routes=routes)
