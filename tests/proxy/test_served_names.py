"""The alias's model, read from the upstream's listing: read once first, then again in the background."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy import served_names
from proxy.config import ProxyConfig
from proxy.served_names import ServedNames


class _Listing:
    """Stands in for ``Upstream.listing``: the upstream's /v1/models entries, or None while it is down."""

    config = ProxyConfig(upstream="http://127.0.0.1:1")

    def __init__(self, models: list[str]) -> None:
        self.models = models
        self.down = False
        self.reads = 0

    async def listing(self, timeout: float) -> list[Any] | None:  # noqa: ASYNC109
        self.reads += 1
        await asyncio.sleep(0)
        return None if self.down else [{"id": m} for m in self.models]


def _later(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    now = served_names.monotonic()
    monkeypatch.setattr(served_names, "monotonic", lambda: now + seconds)


async def _settle() -> None:
    """Let a background read finish."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_model_swapped_behind_the_alias_is_found_without_holding_up_a_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        upstream = _Listing(["model-a"])
        names = ServedNames(upstream, "gpt-4o")  # type: ignore[arg-type]
        assert await names.upstream_name("gpt-4o") == "model-a"
        assert await names.upstream_name("gpt-4o") == "model-a"
        assert upstream.reads == 1  # fresh: not read again
        upstream.models = ["model-b"]
        _later(monkeypatch, 61)
        assert await names.upstream_name("gpt-4o") == "model-a"  # this request does not wait
        await _settle()
        assert upstream.reads == 2
        assert await names.upstream_name("gpt-4o") == "model-b"
        assert await names.upstream_name("other") == "other"  # other names are not read for
        upstream.models = ["model-b", "model-c"]  # a second model pulled beside it
        _later(monkeypatch, 122)
        await names.upstream_name("gpt-4o")
        await _settle()
        assert upstream.reads == 3
        assert await names.upstream_name("gpt-4o") == "model-b"  # still the model it stood for

    asyncio.run(scenario())


def test_a_failed_first_read_is_tried_again_after_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        upstream = _Listing(["model-a"])
        upstream.down = True
        names = ServedNames(upstream, "gpt-4o")  # type: ignore[arg-type]
        assert await names.upstream_name("gpt-4o") == "gpt-4o"  # sent as asked while nothing is known
        assert await names.upstream_name("gpt-4o") == "gpt-4o"
        assert upstream.reads == 1
        upstream.down = False
        _later(monkeypatch, 6)
        await names.upstream_name("gpt-4o")
        await _settle()
        assert upstream.reads == 2
        assert await names.upstream_name("gpt-4o") == "model-a"

    asyncio.run(scenario())
