"""``conformant replay-server DIR|--corpus``: serve recorded transcripts as a fake OpenAI upstream."""

from __future__ import annotations

import argparse

from conformance.replay import create_replay_app, load_corpus
from conformance.settings import CommandError, check_can_listen, flag_type, port
from conformance.transcript import Transcript, TranscriptError, discover

__all__ = ["parse_pace", "register", "run"]


def parse_pace(text: str) -> float | None:
    """``none`` (send at once) or a non-negative factor applied to the recorded delays."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--pace takes 'none' or a number, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("--pace must not be negative")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "replay-server",
        help="serve recorded transcripts as a fake upstream",
        description="Answer each request with the transcript whose path and JSON body match it (key order "
        "ignored), or with the one named by the x-conformant-transcript header; status, headers and bytes "
        "as recorded, paced as recorded.",
    )
    parser.add_argument("paths", nargs="*", metavar="DIR", help="transcript files or folders")
    parser.add_argument("--corpus", action="store_true", help="also serve the shipped quirk corpus")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=flag_type(port), default=8000, help="port to listen on (default 8000)")
    parser.add_argument(
        "--pace",
        type=parse_pace,
        default=1.0,
        help="'none' to send at once, or a factor on the recorded delays (2 = half speed; default 1)",
    )
    parser.set_defaults(func=run)


def _transcripts(args: argparse.Namespace) -> list[Transcript]:
    if not args.paths and not args.corpus:
        raise CommandError("give transcript folders or files, or --corpus")
    try:
        found = discover(args.paths) + (load_corpus() if args.corpus else [])
    except TranscriptError as exc:
        raise CommandError(str(exc)) from None
    if not found:
        raise CommandError("no transcripts (.sse/.json) found in " + ", ".join(args.paths))
    return found


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ..http10 import Http10FramingProtocol

    transcripts = _transcripts(args)
    check_can_listen(args.host, args.port)
    print(f"replaying {len(transcripts)} transcripts on http://{args.host}:{args.port}", flush=True)
    uvicorn.run(
        create_replay_app(transcripts, pace=args.pace),
        host=args.host,
        port=args.port,
        log_level="warning",
        http=Http10FramingProtocol,
    )
    return 0
