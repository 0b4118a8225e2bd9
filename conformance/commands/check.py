"""``conformant check BASE_URL``: run the probe battery against a live server, judge and report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from conformance.cli import http_url, output_folder, write_report
from conformance.live.probes import PROBES, select_probes
from conformance.live.runner import (
    ProbeResult,
    ServerUnreachable,
    client_for,
    default_model,
    require_api,
    run_probes,
)
from conformance.probe import Probe, ProbeContext
from conformance.report import FORMATS, render
from conformance.rules.context import OPEN_RESPONSES_PROFILE, PROFILES
from conformance.settings import CommandError

__all__ = ["register", "run"]

_STYLE = {"pass": "green", "warn": "yellow", "unsupported": "cyan", "fail": "bold red"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "check",
        help="probe a live server and judge every response",
        description="Send a battery of small probes (chat and completions, the Responses API and the "
        "Messages API; streaming and not, usage, stop, n, logprobs, echo, tools, structured output, "
        "images and files, limits, invalid requests, context overflow, client disconnect), judge each "
        "response, and report. Exit 1 when errors remain, 2 when the server cannot be reached.",
    )
    parser.add_argument("url", metavar="BASE_URL", nargs="?", help="server root, e.g. http://127.0.0.1:8080")
    parser.add_argument(
        "--model", default=None, help="model to ask for (default: the first of GET /v1/models)"
    )
    parser.add_argument("--api-key", default=None, help="sent as a bearer token, never recorded")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default 60)")
    parser.add_argument("--format", choices=FORMATS, default="text", help="report format (default text)")
    parser.add_argument(
        "--brief",
        action="store_true",
        help="text: one line per distinct rule per server, the worst server first",
    )
    parser.add_argument(
        "--output", "-o", type=Path, default=None, help="write the report here (default stdout)"
    )
    parser.add_argument("--record", type=Path, default=None, metavar="DIR", help="save every exchange here")
    parser.add_argument(
        "--allow", nargs="+", action="extend", default=[], metavar="RULE", help="waive rules or quirk ids"
    )
    parser.add_argument(
        "--only", nargs="+", action="extend", default=[], metavar="PROBE", help="run only these probes"
    )
    parser.add_argument(
        "--skip", nargs="+", action="extend", default=[], metavar="PROBE", help="skip these probes"
    )
    parser.add_argument(
        "--overflow-words",
        type=int,
        default=40_000,
        help="words in the context-overflow prompt (default 40000)",
    )
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default=OPEN_RESPONSES_PROFILE,
        help="the specification /v1/responses answers are judged by: Open Responses' Response (the "
        "default: what its compliance suite requires) or OpenAI's own",
    )
    parser.add_argument("--server", default=None, help="server label for recorded transcripts")
    parser.add_argument("--list", action="store_true", help="list the probes and exit")
    parser.set_defaults(func=run)


def _summary(results: list[ProbeResult]) -> Table:
    table = Table(title="conformant check")
    table.add_column("probe", no_wrap=True)
    table.add_column("outcome", no_wrap=True)
    table.add_column("errors", justify="right")
    table.add_column("warnings", justify="right")
    table.add_column("rules", overflow="fold")
    for r in results:
        found = [f for v in r.verdicts for f in v.findings]
        rules = dict.fromkeys(f"{f.rule} ({f.quirk})" if f.quirk else f.rule for f in found)
        table.add_row(
            r.probe.name,
            f"[{_STYLE[r.outcome]}]{r.outcome}[/]",
            str(len(r.errors)),
            str(len(r.warnings)),
            ", ".join(rules),
        )
    return table


def run(args: argparse.Namespace) -> int:
    if args.list:
        for probe in PROBES:
            print(f"{probe.name:28} {probe.summary}")
        return 0
    probes = _checked(args)
    console = Console(stderr=True)
    results = _probed(args, probes, console)
    _tell(console, args, results)
    verdicts = [v for r in results for v in r.verdicts]
    for v in verdicts:
        v.server = args.server or args.url
    report = render(verdicts, args.format, brief=args.brief)
    if args.output is not None:
        write_report(args.output, report)
    else:
        sys.stdout.write(report if report.endswith("\n") else report + "\n")
    return 1 if any(r.errors for r in results) else 0


def _checked(args: argparse.Namespace) -> list[Probe]:
    """The probes to run, once the command line is known to be whole (a ``CommandError`` else)."""
    if args.url is None:
        raise CommandError("give the server's BASE_URL (or --list to see the probes)")
    http_url(args.url)
    try:
        probes = select_probes(args.only, args.skip)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if args.record is not None:
        output_folder(args.record, "--record")
    if args.output is not None:
        output_folder(args.output.parent, "--output")
        if args.output.is_dir():
            raise CommandError(
                f"--output {args.output}: cannot write the report to a folder; give a file name"
            )
    return probes


def _probed(args: argparse.Namespace, probes: list[Probe], console: Console) -> list[ProbeResult]:
    """Every probe's result, a progress bar on ``console`` meanwhile."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with client_for(args.url, api_key=args.api_key, timeout=args.timeout) as client:
            require_api(client)
            ctx = ProbeContext(
                args.model or default_model(client), overflow_words=args.overflow_words, profile=args.profile
            )
            with Progress(*columns, console=console, transient=True) as progress:
                task = progress.add_task(f"probing {args.url}", total=len(probes))
                return run_probes(
                    client,
                    probes,
                    ctx,
                    record_dir=args.record,
                    allow=set(args.allow),
                    server=args.server,
                    on_result=lambda r: progress.update(
                        task, advance=1, description=f"{r.probe.name}: {r.outcome}"
                    ),
                )
    except ServerUnreachable as exc:
        raise CommandError(str(exc)) from None


def _tell(console: Console, args: argparse.Namespace, results: list[ProbeResult]) -> None:
    """What stderr says beside the report: the table of probes (not with --brief: the report is then
    one screen), the profile Responses answers were judged by, and the --allow ids that waived nothing
    (a misspelt rule id waived nothing and said nothing: found by black-box testing)."""
    if not args.brief:
        console.print(_summary(results))
    if any(r.recording.spec.path.startswith("/v1/responses") for r in results):
        console.print(f"/v1/responses judged by the {args.profile} profile (--profile)")
    if unmatched := _waived_nothing(args.allow, results):
        said = f"--allow waived nothing for: {', '.join(unmatched)} (no finding has that rule or quirk)"
        console.print(said, soft_wrap=True)  # one line, whatever the terminal's width


def _waived_nothing(allowed: list[str], results: list[ProbeResult]) -> list[str]:
    """The ``--allow`` ids that matched no finding of the run, in the order given."""
    found = {name for r in results for f in r.waived for name in (f.rule, f.quirk or "")}
    return [name for name in dict.fromkeys(allowed) if name not in found]
