"""Run probes against a live server: record each exchange and judge it with the shared judge.

The judge gets the request and the probe's intent, exactly what ``--record`` writes into the sidecar, so
``validate`` of the recording gives the same findings; only a transport failure (no response at all) and
the ``--allow`` waivers are the runner's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from conformance.findings import Finding
from conformance.judge import Verdict, judge_response
from conformance.live.recorder import Recording, record, save_recording
from conformance.probe import Probe, ProbeContext, RequestSpec
from conformance.rules.intents import HANG_UP

__all__ = [
    "Outcome",
    "ProbeResult",
    "ServerUnreachable",
    "client_for",
    "default_model",
    "require_api",
    "run_probe",
    "run_probes",
]

Outcome = Literal["pass", "warn", "fail", "unsupported"]


class ServerUnreachable(Exception):
    """No connection could be made, nothing there speaks the API, or it refuses the key (or its
    absence): nothing can be checked."""


@dataclass
class ProbeResult:
    probe: Probe
    recording: Recording
    verdict: Verdict
    """The judge's verdict on the response, with the probe's own findings added and waived ones removed."""
    unsupported: bool = False
    waived: list[Finding] = field(default_factory=list)
    hung_up: Verdict | None = None
    """The exchange the client hung up on before ``recording`` (the disconnect probe), judged as
    ``validate`` judges its recording: its findings count, but it is no answer (``Verdict.answer``)."""

    @property
    def verdicts(self) -> list[Verdict]:
        """Every exchange's verdict, in the order they were made."""
        return [self.verdict] if self.hung_up is None else [self.hung_up, self.verdict]

    @property
    def errors(self) -> list[Finding]:
        return [f for v in self.verdicts for f in v.errors]

    @property
    def warnings(self) -> list[Finding]:
        return [f for v in self.verdicts for f in v.warnings]

    @property
    def outcome(self) -> Outcome:
        if self.errors:
            return "fail"
        if self.unsupported:
            return "unsupported"
        return "warn" if self.warnings else "pass"


def client_for(base_url: str, *, api_key: str | None = None, timeout: float = 60.0) -> httpx.Client:
    """A client rooted at the server (``http://host:port``; a trailing ``/v1`` is accepted)."""
    root = base_url.rstrip("/")
    root = root.removesuffix("/v1")
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(
        base_url=root, headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 10))
    )


def require_api(client: httpx.Client) -> None:
    """Raise ``ServerUnreachable`` where nothing at the client's base answers the API: neither ``GET
    /v1/models`` nor ``POST /v1/chat/completions`` is there (both 404). A wrong base path (``/v2``) made
    every probe a 404 that the report read as 16 missing features and 29 warnings (issue 32)."""
    try:
        listed = client.get("/v1/models")
        asked = client.post("/v1/chat/completions", json={})
    except httpx.ConnectError as exc:
        raise ServerUnreachable(f"cannot connect to {client.base_url} ({exc})") from None
    except httpx.HTTPError:
        return  # a server that answers oddly is what the probes are for
    statuses = {listed.status_code, asked.status_code}
    if statuses == {404}:
        raise ServerUnreachable(
            f"nothing at {client.base_url} answers the OpenAI API: GET /v1/models and POST "
            "/v1/chat/completions are both 404. Give the server's root or its /v1 (http://host:port/v1)."
        )
    if statuses <= {401, 403}:
        # Every probe would be refused alike, and the report would read the refusals as the server's
        # deviations (a CI job without its key got exit 1 and 20 "errors"; found by black-box testing).
        given = "the key given" if "authorization" in client.headers else "no key"
        raise ServerUnreachable(
            f"{client.base_url} refuses requests with {given} (GET /v1/models and POST /v1/chat/completions "
            f"answered HTTP {' and '.join(str(s) for s in sorted(statuses))}): give its key with --api-key"
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


def _judge(source: str, intent: str | None, recording: Recording, profile: str) -> Verdict:
    return judge_response(
        recording.body,
        request=recording.spec.as_request(),
        status=recording.status,
        headers=recording.headers,
        source=source,
        intent=intent,
        profile=profile,
        failure=recording.error,
    )


def _allowed(verdict: Verdict, allow: Collection[str]) -> tuple[Verdict, list[Finding]]:
    """``verdict`` without the findings ``allow`` waives (by rule or quirk id), and those findings."""
    kept = [f for f in verdict.findings if f.rule not in allow and (f.quirk or "") not in allow]
    waived = [f for f in verdict.findings if f not in kept]
    return dataclasses.replace(verdict, findings=kept), waived


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
    hung_up: Verdict | None = None
    waived: list[Finding] = []
    try:
        recording = record(client, spec, hang_up_after=probe.hang_up_after)
        if probe.then is not None:
            if record_dir is not None:
                base = record_dir / f"{probe.name}-hangup"
                save_recording(recording, base, server=server, intent=HANG_UP, profile=ctx.profile)
            hung_up, waived = _allowed(_judge(f"{probe.name}-hangup", HANG_UP, recording, ctx.profile), allow)
            recording = record(client, probe.then(ctx))
    except httpx.ConnectError as exc:
        raise ServerUnreachable(f"cannot connect to {client.base_url} ({exc})") from None
    if record_dir is not None:
        save_recording(
            recording, record_dir / probe.name, server=server, intent=probe.intent, profile=ctx.profile
        )
    verdict = _judge(probe.name, probe.intent, recording, ctx.profile)
    unsupported = any(f.rule == "feature-unsupported" for f in verdict.findings)
    verdict, also_waived = _allowed(verdict, allow)
    return ProbeResult(probe, recording, verdict, unsupported, waived + also_waived, hung_up)


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
