"""Reports over verdicts: text for people, JSON (the documented format), JUnit XML for CI, Markdown for PRs.

``validate`` names each result by transcript path, ``check`` by probe name; both render through here.
Servers are ranked by responses, not by lines: each report says, per server, how many responses were
judged, how many had errors and how many distinct rules they broke (issue 17), and each finding carries
how many times its rule fired in its response.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conformance.findings import MAX_POINTERS, Finding
from conformance.harms import answer_harm, harm_of, rule_weight, weight
from conformance.judge import Verdict
from conformance.version import installed_version

__all__ = [
    "FORMATS",
    "UNNAMED_SERVER",
    "by_server",
    "exit_status",
    "json_report",
    "ranked",
    "render",
    "summary",
]

FORMATS = ("text", "json", "junit", "markdown")
UNNAMED_SERVER = "(unnamed)"
"""The server of responses no sidecar or command named."""
LINE_WIDTH = 120
"""Columns of a summary or ``--brief`` line: one line of a terminal, however long the message."""
TOP_PROBLEMS = 3
"""Error rules the text report's ranking names under each server: the worst, one line each."""
BRIEF_ERRORS = 8
"""Error rules ``--brief`` gives a line each per server; the rest are named on the lines after."""


def summary(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """Totals over ``verdicts`` (docs/validate.md, SUMMARY): responses judged, responses with errors,
    distinct rules broken and their ``weight`` (what they break, conformance/harms.py), the responses
    ``answered`` (not a feature declined cleanly, nor an exchange the client hung up on) and the
    ``harm_per_answer`` servers are ranked by;
    ``transcripts``, ``errors`` and ``warnings`` as before (findings, now one per rule per response),
    ``occurrences`` what the findings' counts add up to, ``rules`` in how many responses each error rule
    fired, most first."""
    error_rules = Counter(rule for v in verdicts for rule in {f.rule for f in v.errors})
    answered = _answers(verdicts)
    warning_rules = Counter(rule for v in verdicts for rule in {f.rule for f in v.warnings})
    return {
        "transcripts": len(verdicts),
        "errors": sum(len(v.errors) for v in verdicts),
        "warnings": sum(len(v.warnings) for v in verdicts),
        "responses": len(verdicts),
        "responses_with_errors": sum(1 for v in verdicts if v.errors),
        "responses_with_warnings": sum(1 for v in verdicts if v.warnings),
        "distinct_rules": len(error_rules),
        "distinct_warning_rules": len(warning_rules),
        "weight": weight(error_rules),
        "answered": len(answered),
        "harm_per_answer": round(
            sum(answer_harm(f.rule for f in v.errors) for v in answered) / len(answered), 2
        )
        if answered
        else 0.0,
        "occurrences": sum(f.count for v in verdicts for f in v.findings),
        "rules": dict(sorted(error_rules.items(), key=lambda item: (-item[1], item[0]))),
    }


def _answers(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts on answers the server's harm is averaged over: not an exchange the client hung up
    on, nor a feature declined."""
    return [v for v in verdicts if v.answer and not _declined(v)]


def _declined(v: Verdict) -> bool:
    """A feature (or a whole protocol's route) the server declined with a clean 4xx and nothing else
    wrong: no answer the client could be hurt by, and none it could use; left out of the harm."""
    return not v.errors and any(f.rule == "feature-unsupported" for f in v.warnings)


def by_server(verdicts: Sequence[Verdict]) -> dict[str, list[Verdict]]:
    """The verdicts grouped by server, in the order each server first appears."""
    groups: dict[str, list[Verdict]] = {}
    for v in verdicts:
        groups.setdefault(v.server or UNNAMED_SERVER, []).append(v)
    return groups


def ranked(verdicts: Sequence[Verdict]) -> list[tuple[str, list[Verdict]]]:
    """The servers worst first: by the harm of an answer they served, on average (each answer weighs
    what its heaviest error does to a client, conformance/harms.py: a rate, so that a folder of five
    transcripts and one of sixty compare, and a feature declined cleanly is no answer), then by the
    weight of the distinct rules whose errors they gave, then by the number of those rules, then by
    name (docs/validate.md, "Ranking")."""
    groups = by_server(verdicts).items()

    def key(item: tuple[str, list[Verdict]]) -> tuple[float, int, int, str]:
        totals = summary(item[1])
        return (-totals["harm_per_answer"], -totals["weight"], -totals["distinct_rules"], item[0])

    return sorted(groups, key=key)


def exit_status(verdicts: Sequence[Verdict], *, strict: bool = False) -> int:
    """0 when nothing failed, 1 when errors (or, with ``strict``, warnings) were found."""
    totals = summary(verdicts)
    return 1 if totals["errors"] or (strict and totals["warnings"]) else 0


def json_report(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """The fixed JSON report: ``{"conformant", "results", "summary"}`` (docs/validate.md)."""
    return {
        "conformant": installed_version(),
        "results": [v.to_json() for v in verdicts],
        "summary": summary(verdicts),
        "servers": [{"server": name, **summary(group)} for name, group in by_server(verdicts).items()],
    }


def render(verdicts: Sequence[Verdict], fmt: str, *, brief: bool = False) -> str:
    """The report in one of :data:`FORMATS`; ``brief`` text is one line per distinct rule per server."""
    if brief and fmt == "text":
        return _brief(verdicts)
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
    excerpt = ", excerpt" if v.excerpt else ""
    return f"{v.endpoint or 'unknown endpoint'}, {'stream' if v.stream else 'body'}{excerpt}"


def _times(f: Finding) -> str:
    return f" (x{f.count})" if f.count > 1 else ""


def _quirks(f: Finding) -> str:
    """Every quirk the rule cited in the response, first first: ``[Q26, Q27]``."""
    return f" [{', '.join(f.cited)}]" if f.cited else ""


def _server_line(name: str, totals: dict[str, Any]) -> str:
    """One server's ranking: what a reader compares servers by."""
    return (
        f"{name}: {totals['responses']} responses judged, {totals['responses_with_errors']} with errors,"
        f" {totals['distinct_rules']} distinct rules broken (weight {totals['weight']}),"
        f" harm {totals['harm_per_answer']:.2f} an answer"
    )


@dataclass
class _RuleTally:
    """One rule of one severity over a server's responses: its first finding, in how many it fired."""

    first: Finding
    responses: int = 0

    def order(self) -> tuple[int, int, int, str]:
        """Errors first, the heaviest harm first, then the most responses, then by name."""
        f = self.first
        harm = rule_weight(f.rule) if f.severity == "error" else 0
        return (f.severity != "error", -harm, -self.responses, f.rule)


def _tallies(group: Sequence[Verdict]) -> list[_RuleTally]:
    """Each distinct (severity, rule) of ``group``, in :meth:`_RuleTally.order`."""
    tallies: dict[tuple[str, str], _RuleTally] = {}
    for v in group:
        for f in v.findings:
            tallies.setdefault((f.severity, f.rule), _RuleTally(f)).responses += 1
    return sorted(tallies.values(), key=_RuleTally.order)


def _problem_line(tally: _RuleTally, judged: int) -> str:
    """One rule as a problem to act on: what it breaks, how often, what the client sees, one line."""
    f = tally.first
    harm = f" ({harm_of(f.rule)})" if f.severity == "error" else ""
    return _one_line(f"  {f.rule}{harm}{_quirks(f)} in {tally.responses} of {judged}: {f.message}")


def _one_line(text: str) -> str:
    """``text`` cut to :data:`LINE_WIDTH` columns: a line of a report stays one line on screen."""
    text = " ".join(text.split("\n"))
    return text if len(text) <= LINE_WIDTH else text[: LINE_WIDTH - 3] + "..."


def _text(verdicts: Sequence[Verdict]) -> str:
    lines: list[str] = []
    for v in verdicts:
        status = "FAIL" if v.errors else ("WARN" if v.warnings else "PASS")
        lines.append(f"{status} {v.source} ({_kind(v)}): {len(v.errors)} errors, {len(v.warnings)} warnings")
        lines += [f"  {_finding_line(f, width=7)}" for f in (*v.errors, *v.warnings)]
    for name, group in ranked(verdicts):
        lines.append(_server_line(name, summary(group)))
        errors = [t for t in _tallies(group) if t.first.severity == "error"]
        lines += [_problem_line(t, len(group)) for t in errors[:TOP_PROBLEMS]]
    return "\n".join(lines + _totals(verdicts)) + "\n"


QUIRKS_DOC = "docs/quirks.md"
"""Where a quirk id a finding cites is explained: the catalogue of conformant's repository."""


def _totals(verdicts: Sequence[Verdict], *, brief: bool = False) -> list[str]:
    """The closing lines of a text report: the totals, and where the quirk ids it cites are explained
    (a bare ``[Q26]`` means nothing to a reader without the catalogue; issue 33); ``brief`` names the
    catalogue without listing the ids again."""
    totals = summary(verdicts)
    lines = [f"{totals['transcripts']} checked, {totals['errors']} errors, {totals['warnings']} warnings"]
    cited = sorted({q for v in verdicts for f in v.findings for q in f.cited if q[:1] in "QN"})
    if cited and brief:
        lines.append(f"[Q..] and [N..]: quirk ids, each explained in conformant's {QUIRKS_DOC}")
    elif cited:
        lines.append(f"quirk ids ({', '.join(cited)}): each explained in conformant's {QUIRKS_DOC}")
    return lines


def _brief(verdicts: Sequence[Verdict]) -> str:
    """Per server, worst first: its ranking line, then a line per error rule it broke, the heaviest
    harm first (at most :data:`BRIEF_ERRORS`, the rest named on one line), then its warnings on one
    line; the quirk ids are those of docs/quirks.md. A 56-transcript folder fits one screen."""
    lines: list[str] = []
    for name, group in ranked(verdicts):
        lines.append(_server_line(name, summary(group)))
        tallies = _tallies(group)
        errors = [t for t in tallies if t.first.severity == "error"]
        lines += [_problem_line(t, len(group)) for t in errors[:BRIEF_ERRORS]]
        lines += _folded("  and", errors[BRIEF_ERRORS:])
        lines += _folded("  warnings:", [t for t in tallies if t.first.severity != "error"])
    return "\n".join(lines + _totals(verdicts, brief=True)) + "\n"


def _folded(lead: str, tallies: Sequence[_RuleTally]) -> list[str]:
    """Rules named in a list after ``lead``, each with the responses it fired in, wrapped at
    :data:`LINE_WIDTH` (every rule named, none cut off)."""
    if not tallies:
        return []
    lines: list[str] = []
    line = lead.rstrip()
    for i, t in enumerate(tallies):
        name = f"{t.first.rule} ({t.responses})" + ("," if i < len(tallies) - 1 else "")
        if len(line) + 1 + len(name) > LINE_WIDTH:
            lines.append(line)
            line = "     "
        line += " " + name
    return [*lines, line]


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
    # JUnit's schema puts <properties> before the test cases; strict CI parsers reject it elsewhere.
    properties = ET.Element("properties")
    suite.insert(0, properties)
    for name, group in by_server(verdicts).items():
        counts = summary(group)
        for key in ("responses", "responses_with_errors", "distinct_rules"):
            ET.SubElement(properties, "property", name=f"{_xml_text(name)}.{key}", value=str(counts[key]))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _finding_line(f: Finding, *, width: int = 0) -> str:
    """One finding as text and JUnit show it; ``width`` pads the severity so text's rules line up."""
    where = _where(f)
    where = f" at {where}" if where else ""
    return f"{f.severity:<{width}} {f.rule}{_times(f)}{_quirks(f)}{where}: {f.message}{_also(f)}"


def _also(f: Finding) -> str:
    """Everywhere else a folded finding fired, so ``(x84)`` names each key it stands for, not the first
    alone (issue 33); the pointers kept are at most ``MAX_POINTERS``."""
    if not f.pointers:
        return ""
    more = f.count - 1 - len(f.pointers)
    rest = f" and {more} more" if more > 0 and len(f.pointers) >= MAX_POINTERS else ""
    return f"; also at {', '.join(f.pointers)}{rest}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _markdown(verdicts: Sequence[Verdict]) -> str:
    totals = summary(verdicts)
    lines = [
        "# conformant report",
        "",
        f"{totals['transcripts']} checked, **{totals['errors']} errors**, {totals['warnings']} warnings.",
        "",
        "| server | responses judged | responses with errors | distinct rules | weight |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, group in ranked(verdicts):
        counts = summary(group)
        lines.append(
            f"| {_cell(name)} | {counts['responses']} | {counts['responses_with_errors']} |"
            f" {counts['distinct_rules']} | {counts['weight']} |"
        )
    lines += [
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
            "| severity | rule | quirk | count | first event | pointer | message |",
            "|---|---|---|---:|---:|---|---|",
        ]
        for f in (*v.errors, *v.warnings):
            event = "" if f.event is None else str(f.event)
            lines.append(
                f"| {f.severity} | `{f.rule}` | {', '.join(f.cited)} | {f.count} | {event} | "
                f"{'`' + _cell(f.pointer) + '`' if f.pointer else ''} | {_cell(f.message)} |"
            )
    return "\n".join(lines) + "\n"
