"""``conformant validate PATH...``: judge recorded transcripts (files or folders) and report.

Exit 0 when no errors were found, 1 when some were (or warnings, with ``--strict``), 2 for a bad
invocation or unreadable input, with one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.cli import write_report
from conformance.judge import Verdict, judge_transcript
from conformance.report import FORMATS, exit_status, render
from conformance.rules.context import PROFILES
from conformance.settings import CommandError
from conformance.transcript import Transcript, TranscriptError, discover

__all__ = ["register", "run", "validate_paths"]

_SUFFIXES = {".sse", ".json"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "validate",
        help="judge recorded transcripts against the OpenAI schemas and stream rules",
        description="Judge recorded responses (NAME.sse with an optional NAME.json sidecar, or a bare "
        ".sse/.json body) against the OpenAI schemas and stream rules. Exit 0: no errors; 1: errors "
        "found (or warnings, with --strict); 2: bad invocation or unreadable input.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="transcript files or folders of them")
    parser.add_argument("--format", choices=FORMATS, default="text", help="report format (default text)")
    parser.add_argument(
        "--brief",
        action="store_true",
        help="text: one line per distinct rule per server, the worst server first",
    )
    parser.add_argument("--output", "-o", type=Path, default=None, help="write the report to FILE")
    parser.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    parser.add_argument(
        "--excerpt",
        action="store_true",
        help="the transcripts are excerpts (cut from bug reports): a stream that stops early is no finding",
    )
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default=None,
        help="the specification /v1/responses answers are judged by: OpenAI's, or Open Responses' "
        "stricter Response (default: the one a recording's sidecar names, else openai)",
    )
    parser.set_defaults(func=run)


def validate_paths(paths: list[str], *, excerpt: bool = False, profile: str | None = None) -> list[Verdict]:
    """Judge every transcript under ``paths``; raises CommandError for input that cannot be read.

    Each response's server is its sidecar's label, else the PATH it was found under (a folder of
    recordings is one server). ``excerpt`` marks every transcript as one, as the sidecar key does."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir() and not any(c.is_file() and c.suffix in _SUFFIXES for c in path.rglob("*")):
            raise CommandError(f"{raw}: no .sse or .json transcripts in this folder")
    try:
        transcripts: dict[str, tuple[Transcript, str]] = {}
        for raw in paths:  # one path at a time, to know which PATH found each transcript
            for t in discover([raw]):
                transcripts.setdefault(t.name, (t, raw))
        for t, raw in transcripts.values():
            if _looks_binary(t.head()):
                raise CommandError(f"{t.body_path or t.name}: binary data, not an SSE or JSON transcript")
            t.server = t.server or raw
            t.excerpt = t.excerpt or excerpt
        return [judge_transcript(t, profile=profile) for t, _ in transcripts.values()]
    except TranscriptError as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:
        raise CommandError(f"{exc.filename or 'input'}: cannot read ({exc.strerror})") from None


def _looks_binary(head: bytes) -> bool:
    """Mostly undecodable bytes or control characters: not a recorded HTTP body."""
    if not head:
        return False
    text = head.decode("utf-8", "replace")
    odd = sum(1 for c in text if c == "\ufffd" or (c < " " and c not in "\t\r\n\f"))
    return odd * 10 > len(text)


def run(args: argparse.Namespace) -> int:
    verdicts = validate_paths(args.paths, excerpt=args.excerpt, profile=args.profile)
    report = render(verdicts, args.format, brief=args.brief)
    if args.output is not None:
        write_report(args.output, report)
    else:
        sys.stdout.write(report)
    return exit_status(verdicts, strict=args.strict)
