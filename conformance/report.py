"""Reports over verdicts: text for people, JSON (the documented format), JUnit XML for CI, Markdown for PRs.

``validate`` names each result by transcript path, ``check`` by probe name; both render through here.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from conformance.cli import _version
from conformance.findings import Finding
from conformance.judge import Verdict

__all__ = ["FORMATS", "exit_status", "json_report", "render", "summary"]

FORMATS = ("text", "json", "junit", "markdown")


def summary(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """``{"transcripts": N, "errors": N, "warnings": N}`` over all verdicts."""
    return {
        "transcripts": len(verdicts),
        "errors": sum(len(v.errors) for v in verdicts),
        "warnings": sum(len(v.warnings) for v in verdicts),
    }


def exit_status(verdicts: Sequence[Verdict], *, strict: bool = False) -> int:
    """0 when nothing failed, 1 when errors (or, with ``strict``, warnings) were found."""
    totals = summary(verdicts)
    return 1 if totals["errors"] or (strict and totals["warnings"]) else 0


def json_report(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """The fixed JSON report: ``{"conformant", "results", "summary"}`` (docs/validate.md)."""
    return {
        "conformant": _version(),
        "results": [v.to_json() for v in verdicts],
        "summary": summary(verdicts),
    }


def render(verdicts: Sequence[Verdict], fmt: str) -> str:
    """The report in one of :data:`FORMATS`."""
    if fmt == "json":
        return json.dumps(json_report(verdicts), indent=2) + "\n"
    if fmt == "junit":
        return _junit(verdicts)
    if fmt == "markdown":
        return _markdown(verdicts)
    if fmt == "text":
        return _text(verdicts)
    raise ValueError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _where(f: Finding) -> str:
    parts = []
    if f.event is not None:
        parts.append(f"event {f.event}")
    if f.pointer:
        parts.append(f.pointer)
    return " ".join(parts)


def _kind(v: Verdict) -> str:
    return f"{v.endpoint or 'unknown endpoint'}, {'stream' if v.stream else 'body'}"


def _text(verdicts: Sequence[Verdict]) -> str:
    lines: list[str] = []
    for v in verdicts:
        status = "FAIL" if v.errors else ("WARN" if v.warnings else "PASS")
        lines.append(f"{status} {v.source} ({_kind(v)}): {len(v.errors)} errors, {len(v.warnings)} warnings")
        for f in (*v.errors, *v.warnings):
            quirk = f" [{f.quirk}]" if f.quirk else ""
            where = _where(f)
            lines.append(f"  {f.severity:<7} {f.rule}{quirk}{' at ' + where if where else ''}: {f.message}")
    totals = summary(verdicts)
    lines.append(f"{totals['transcripts']} checked, {totals['errors']} errors, {totals['warnings']} warnings")
    return "\n".join(lines) + "\n"


# Characters XML 1.0 cannot carry at all, not even escaped; a server's error text may hold them.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _junit(verdicts: Sequence[Verdict]) -> str:
    totals = summary(verdicts)
    failed = sum(1 for v in verdicts if v.errors)
    suites = ET.Element("testsuites", name="conformant", tests=str(len(verdicts)), failures=str(failed))
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="conformant",
        tests=str(len(verdicts)),
        failures=str(failed),
        errors="0",
        skipped="0",
    )
    for v in verdicts:
        classname = f"conformant.{v.endpoint or 'unknown'}"
        case = ET.SubElement(suite, "testcase", classname=classname, name=_xml_text(v.source))
        if v.errors:
            first = v.errors[0]
            failure = ET.SubElement(
                case,
                "failure",
                message=_xml_text(f"{len(v.errors)} errors; first: {first.rule}: {first.message}"[:500]),
            )
            failure.set("type", first.rule)
            failure.text = _xml_text("\n".join(_finding_line(f) for f in v.errors))
        if v.warnings:
            out = ET.SubElement(case, "system-out")
            out.text = _xml_text("\n".join(_finding_line(f) for f in v.warnings))
    suites.set("errors", "0")
    suites.set("warnings", str(totals["warnings"]))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _finding_line(f: Finding) -> str:
    quirk = f" [{f.quirk}]" if f.quirk else ""
    where = _where(f)
    return f"{f.severity} {f.rule}{quirk}{' at ' + where if where else ''}: {f.message}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _markdown(verdicts: Sequence[Verdict]) -> str:
    totals = summary(verdicts)
    lines = [
        "# conformant report",
        "",
        f"{totals['transcripts']} checked, **{totals['errors']} errors**, {totals['warnings']} warnings.",
        "",
        "| source | kind | errors | warnings |",
        "|---|---|---:|---:|",
    ]
    lines += [f"| `{_cell(v.source)}` | {_kind(v)} | {len(v.errors)} | {len(v.warnings)} |" for v in verdicts]
    for v in verdicts:
        if not v.findings:
            continue
        lines += [
            "",
            f"## `{_cell(v.source)}`",
            "",
            "| severity | rule | quirk | event | pointer | message |",
            "|---|---|---|---:|---|---|",
        ]
        for f in (*v.errors, *v.warnings):
            event = "" if f.event is None else str(f.event)
            lines.append(
                f"| {f.severity} | `{f.rule}` | {f.quirk or ''} | {event} | "
                f"{'`' + _cell(f.pointer) + '`' if f.pointer else ''} | {_cell(f.message)} |"
            )
    return "\n".join(lines) + "\n"
