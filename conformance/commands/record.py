"""``conformant record``: record requests against a server into transcripts (raw bytes and timing kept)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import httpx

from conformance.cli import http_url, output_folder
from conformance.live.recorder import record, save_recording
from conformance.live.requests_file import NamedRequest, load_requests, parse_body, safe_name
from conformance.live.runner import client_for
from conformance.probe import RequestSpec
from conformance.settings import CommandError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "record",
        help="record requests against a server into transcripts",
        description="Send one request (--path/--body) or a file of requests (--requests) and write each "
        "response as a transcript NAME.sse + NAME.json: raw body bytes, per-read timing, status and headers. "
        "Authorization, api-key and cookie headers are never written.",
    )
    parser.add_argument("url", metavar="BASE_URL", help="server root, e.g. http://127.0.0.1:8080")
    parser.add_argument("--path", default="/v1/chat/completions", help="request path (one request)")
    parser.add_argument("--body", help="request JSON, or @FILE (one request)")
    parser.add_argument(
        "--name", default=None, help="transcript name for one request (default: from the path)"
    )
    parser.add_argument(
        "--requests", type=Path, help='file of requests: JSON array or lines of {"name","path","body"}'
    )
    parser.add_argument("--output", "-o", type=Path, required=True, help="folder for the transcripts")
    parser.add_argument("--api-key", default=None, help="sent as a bearer token, never recorded")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    parser.add_argument("--server", default=None, help="server label stored in each sidecar")
    parser.set_defaults(func=run)


def _requests(args: argparse.Namespace) -> list[NamedRequest]:
    if args.requests is not None:
        if args.body is not None:
            raise CommandError("give either --requests or --body, not both")
        try:
            return load_requests(args.requests)
        except OSError as exc:
            raise CommandError(f"{args.requests}: {exc.strerror}") from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    if args.body is None:
        raise CommandError("give --body JSON (or @FILE), or --requests FILE")
    try:
        body = parse_body(args.body)
    except OSError as exc:
        raise CommandError(f"--body {args.body}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise CommandError(f"--body is not JSON ({exc.msg})") from None
    name = safe_name(args.name or args.path, "request")
    return [(name, RequestSpec(args.path, body))]


def run(args: argparse.Namespace) -> int:
    http_url(args.url)
    requests = _requests(args)
    output_folder(args.output, "--output")
    with client_for(args.url, api_key=args.api_key, timeout=args.timeout) as client:
        for name, spec in requests:
            try:
                recording = record(client, spec)
            except httpx.ConnectError as exc:
                raise CommandError(f"cannot connect to {args.url} ({exc})") from None
            try:
                transcript = save_recording(recording, args.output / name, server=args.server)
            except OSError as exc:
                raise CommandError(
                    f"{args.output / name}: cannot save the transcript ({exc.strerror})"
                ) from None
            outcome = f"HTTP {recording.status}" if recording.error is None else recording.error
            print(
                f"{name}: {outcome}, {len(recording.body)} bytes in {len(recording.chunk_timing)} reads"
                f" -> {transcript.body_path}"
            )
    return 0
