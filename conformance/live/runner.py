"""Run probes against a live server: record each exchange, judge it, apply the probe's expectations."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from conformance.findings import ERROR, WARNING, Finding
from conformance.judge import Verdict, judge_response
from conformance.live.payloads import is_openai_error
from conformance.live.probes import Probe, ProbeContext
from conformance.live.recorder import Recording, RequestSpec, record, save_recording

__all__ = [
    "Outcome",
    "ProbeResult",
    "ServerUnreachable",
    "client_for",
    "default_model",
    "run_probe",
    "run_probes",
]

Outcome = Literal["pass", "warn", "fail", "unsupported"]


class ServerUnreachable(Exception):
    """No connection could be made: nothing can be checked."""


@dataclass
class ProbeResult:
    probe: Probe
    recording: Recording
    verdict: Verdict
    """The judge's verdict on the response, with the probe's own findings added and waived ones removed."""
    unsupported: bool = False
    waived: list[Finding] = field(default_factory=list)

    @property
    def outcome(self) -> Outcome:
        if self.verdict.errors:
            return "fail"
        if self.unsupported:
            return "unsupported"
        return "warn" if self.verdict.warnings else "pass"


def client_for(base_url: str, *, api_key: str | None = None, timeout: float = 60.0) -> httpx.Client:
    """A client rooted at the server (``http://host:port``; a trailing ``/v1`` is accepted)."""
    root = base_url.rstrip("/")
    root = root.removesuffix("/v1")
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(
        base_url=root, headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 10))
    )


def default_model(client: httpx.Client) -> str:
    """The first model ``GET /v1/models`` lists; ``default`` when the server lists none."""
    try:
        response = client.get("/v1/models")
    except httpx.ConnectError as exc:
        raise ServerUnreachable(f"cannot connect to {client.base_url} ({exc})") from None
    except httpx.HTTPError:
        return "default"
    try:
        data = response.json().get("data") or []
        first = data[0].get("id")
    except (ValueError, AttributeError, IndexError, TypeError):
        return "default"
    return first if isinstance(first, str) and first else "default"


def _judge(probe: Probe, recording: Recording) -> Verdict:
    request = recording.spec.as_request()
    if not isinstance(request["body"], dict):
        request["body"] = {}
    return judge_response(
        recording.body,
        request=request,
        status=recording.status,
        headers=recording.headers,
        source=probe.name,
    )


def _probe_findings(probe: Probe, recording: Recording) -> tuple[list[Finding], bool]:
    """The probe's findings and whether the server declined an optional feature cleanly."""
    if recording.error is not None:
        message = f"no complete response: {recording.error}"
        return [Finding("no-response", ERROR, message, quirk="spec")], False
    status = recording.status or 0
    if probe.feature and 400 <= status < 500 and is_openai_error(recording):
        note = f"declined with HTTP {status}: {recording.json()['error']['message'][:160]}"
        return [Finding("feature-unsupported", WARNING, note)], True
    if probe.feature and status >= 500:
        note = f"an optional feature answered HTTP {status}; declining it is a 400 with an error object"
        return [Finding("feature-server-error", ERROR, note, quirk=probe.refused_quirk)], False
    return probe.expect(recording), False


def _merge(judged: Sequence[Finding], own: Sequence[Finding]) -> list[Finding]:
    """The judge's findings plus the probe's, less those the judge already made for the same quirk."""
    seen = {(f.quirk, f.severity) for f in judged if f.quirk and f.quirk != "spec"}
    return [*judged, *(f for f in own if (f.quirk, f.severity) not in seen)]


def run_probe(
    client: httpx.Client,
    probe: Probe,
    ctx: ProbeContext,
    *,
    record_dir: Path | None = None,
    allow: Collection[str] = (),
    server: str | None = None,
) -> ProbeResult:
    spec: RequestSpec = probe.request(ctx)
    try:
        recording = record(client, spec, hang_up_after=probe.hang_up_after)
        if probe.then is not None:
            if record_dir is not None:
                save_recording(recording, record_dir / f"{probe.name}-hangup", server=server)
            recording = record(client, probe.then(ctx))
    except httpx.ConnectError as exc:
        raise ServerUnreachable(f"cannot connect to {client.base_url} ({exc})") from None
    if record_dir is not None:
        save_recording(recording, record_dir / probe.name, server=server)
    verdict = _judge(probe, recording)
    own, unsupported = _probe_findings(probe, recording)
    findings = _merge(verdict.findings, own)
    kept = [f for f in findings if f.rule not in allow and (f.quirk or "") not in allow]
    waived = [f for f in findings if f not in kept]
    return ProbeResult(probe, recording, dataclasses.replace(verdict, findings=kept), unsupported, waived)


def run_probes(
    client: httpx.Client,
    probes: Sequence[Probe],
    ctx: ProbeContext,
    *,
    record_dir: Path | None = None,
    allow: Collection[str] = (),
    server: str | None = None,
    on_result: Callable[[ProbeResult], None] | None = None,
) -> list[ProbeResult]:
    results = []
    for probe in probes:
        result = run_probe(client, probe, ctx, record_dir=record_dir, allow=allow, server=server)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
