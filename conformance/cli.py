"""The ``conformant`` command: one entry point, subcommands contributed by each package.

Each package registers its subcommands under the ``conformant.commands`` entry-point group, so the
suite never imports the proxy or the backend (imports run one way: proxy/backend -> conformance).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path

from conformance.settings import CommandError
from conformance.version import installed_version

__all__ = ["http_url", "main", "output_folder", "write_report"]

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def http_url(url: str) -> str:
    """A server URL as given, refused unless it is http(s): ``host:port`` alone would otherwise be
    sent as a URL of scheme ``host`` and fail every request, each as a finding about the server."""
    if not url.lower().startswith(("http://", "https://")):
        raise CommandError(f"{url!r} is not an http(s) URL; give it as http://HOST:PORT")
    return url


def output_folder(path: Path, flag: str) -> Path:
    """Create the folder a command writes into before it does any work, so that a path that cannot be
    written is one line at once instead of a traceback after minutes of probing or recording."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"{flag} {path}: cannot create the folder ({exc.strerror})") from None
    return path


def write_report(path: Path, report: str) -> None:
    """Write a command's report to ``--output``, creating its folder; a failure is a CommandError."""
    output_folder(path.parent, "--output")
    try:
        path.write_text(report, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"--output {path}: cannot write the report ({exc.strerror})") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="conformant",
        description="Make OpenAI-compatible LLM servers actually compatible, and prove it.",
    )
    parser.add_argument("--version", action="version", version=f"conformant {installed_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for ep in sorted(entry_points(group="conformant.commands"), key=lambda e: e.name):
        try:
            register: Register = ep.load()
        except ImportError as exc:
            # An extra that is not installed (the backend's llama-cpp-python) must not break the others.
            missing = sub.add_parser(ep.name, help=f"unavailable: {exc}")
            missing.set_defaults(func=_unavailable(ep.name, str(exc)))
            continue
        register(sub)
    return parser


def _unavailable(name: str, why: str) -> Callable[[argparse.Namespace], int]:
    def run(_: argparse.Namespace) -> int:
        raise CommandError(f"'{name}' is not available in this install ({why})")

    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args))
    except CommandError as exc:
        print(f"conformant {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
