"""pytest plugin: ``pytest --conformant-url=http://HOST:PORT`` runs one test per live probe.

Registered under ``pytest11``, so it loads in every pytest run where conformant is installed: it adds
options and nothing else unless ``--conformant-url`` is given, and imports the suite only then.
A probe with errors fails; a feature the server declines cleanly is skipped as unsupported.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import httpx

    from conformance.probe import Probe, ProbeContext

__all__ = ["ProbeItem"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformant", "conformance probes against a live server")
    group.addoption("--conformant-url", default=None, help="run conformant's probes against this server")
    group.addoption("--conformant-model", default=None, help="model to ask for (default: first listed)")
    group.addoption("--conformant-api-key", default=None, help="bearer token for the server")
    group.addoption("--conformant-timeout", type=float, default=60.0, help="seconds per request")
    group.addoption("--conformant-allow", action="append", default=[], help="waive a rule or quirk id")
    group.addoption("--conformant-skip", action="append", default=[], help="skip a probe by name")
    group.addoption("--conformant-record", default=None, help="save every exchange as a transcript here")
    group.addoption(
        "--conformant-overflow-words", type=int, default=40_000, help="words in the overflow prompt"
    )


class _Session:
    """One client and one model for all probe items of a run, made on first use."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._client: httpx.Client | None = None
        self._ctx: ProbeContext | None = None

    def opt(self, name: str) -> Any:
        return self.config.getoption(f"--conformant-{name}")

    def client_and_context(self) -> tuple[httpx.Client, ProbeContext]:
        from conformance.live.runner import ServerUnreachable, client_for, default_model
        from conformance.probe import ProbeContext

        if self._client is None or self._ctx is None:
            self._client = client_for(
                self.opt("url"), api_key=self.opt("api-key"), timeout=self.opt("timeout")
            )
            try:
                model = self.opt("model") or default_model(self._client)
            except ServerUnreachable as exc:
                pytest.exit(f"conformant: {exc}", returncode=2)
            self._ctx = ProbeContext(model, overflow_words=self.opt("overflow-words"))
        return self._client, self._ctx

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


class ProbeItem(pytest.Item):
    def __init__(self, *, probe: Probe, state: _Session, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.probe = probe
        self.state = state

    def runtest(self) -> None:
        from pathlib import Path

        from conformance.live.runner import ServerUnreachable, run_probe

        client, ctx = self.state.client_and_context()
        record = self.state.opt("record")
        try:
            result = run_probe(
                client,
                self.probe,
                ctx,
                record_dir=Path(record) if record else None,
                allow=set(self.state.opt("allow")),
            )
        except ServerUnreachable as exc:
            pytest.exit(f"conformant: {exc}", returncode=2)
        for finding in result.warnings:
            self.add_report_section(
                "call", "warnings", f"{finding.rule} [{', '.join(finding.cited) or '-'}]: {finding.message}"
            )
        if result.errors:
            raise ProbeFailed(result.errors)
        if result.unsupported:
            pytest.skip(f"unsupported: {result.verdict.warnings[-1].message}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ProbeFailed):
            return "\n".join(
                f"{f.rule} [{', '.join(f.cited) or '-'}]: {f.message}"
                + (f" (event {f.event})" if f.event is not None else "")
                for f in excinfo.value.findings
            )
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[str, int | None, str]:
        return self.state.opt("url"), None, f"conformant probe {self.probe.name}: {self.probe.summary}"


class ProbeFailed(Exception):
    def __init__(self, findings: list[Any]) -> None:
        super().__init__(f"{len(findings)} conformance errors")
        self.findings = findings


def _items(session: pytest.Session, state: _Session) -> Iterator[ProbeItem]:
    from conformance.live.probes import PROBES

    skipped = set(state.opt("skip"))
    for probe in PROBES:
        if probe.name not in skipped:
            yield ProbeItem.from_parent(session, name=f"conformant[{probe.name}]", probe=probe, state=state)


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    if not config.getoption("--conformant-url"):
        return
    state = _Session(config)
    config.stash[_STATE] = state
    items.extend(_items(session, state))


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None:
        state.close()


_STATE = pytest.StashKey[_Session]()
