"""Usage the proxy computes where the upstream sent none (Q28) counts the prompt as the real server does
(issue 37, point 4): llama-cpp-python's chat template learned from its own counts (it has no template
endpoint; proxy/adapters/template_overhead.py), llama-server's rendered by its ``/apply-template``.

Counted by their texts alone, the prompts came to 3 tokens where llama-cpp-python counted 13 ("Say
hello." on Gemma 3 270M) and 3 where llama-server counted 26. bench/usage_agreement.py measures the whole
``check`` battery (docs/proxy.md, usage).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conformance.probe import WEATHER
from tests.support.llama_server import gemma_llama_server
from tests.support.usage_relay import relayed

from .conftest import metric, run_proxy

HELLO = {"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
ASK = "What is the weather in Paris? Use the get_weather tool."
WITH_TOOL = {**HELLO, "messages": [{"role": "user", "content": ASK}], "tools": [WEATHER]}
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}


def _streamed_usage(url: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(url + "/v1/chat/completions", json={**body, **STREAMED}, timeout=120)
    assert response.status_code == 200, response.text
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    usage: dict[str, Any] = events[-1]["usage"]
    return usage


@pytest.mark.backend
@pytest.mark.slow
def test_llama_cpp_pythons_prompts_are_counted_as_it_counts_them(llama_cpp_python: str) -> None:
    """Its streams carry no usage: the proxy counts them, the template's markup learned once (in the
    background: the first count may not wait for it, so a few streams are asked)."""
    with run_proxy(llama_cpp_python) as url:
        for body in (HELLO, WITH_TOOL):
            whole = httpx.post(llama_cpp_python + "/v1/chat/completions", json=body, timeout=120)
            theirs = whole.json()["usage"]["prompt_tokens"]
            counts = []
            for _ in range(10):
                counts.append(_streamed_usage(url, body)["prompt_tokens"])
                if counts[-1] == theirs:
                    break
            assert counts[-1] == theirs, (counts, theirs)
        page = httpx.get(url + "/metrics").text
        assert metric(page, "conformant_usage_estimated_total", endpoint="chat") >= 2  # (no template had)


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    with gemma_llama_server() as url:
        yield url


@pytest.mark.backend
@pytest.mark.llama_server
@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {**HELLO, **STREAMED}),
        # (streamed, a completion goes to native /completion, whose events carry no usage to withhold)
        ("/v1/completions", {"model": "m", "prompt": "The capital of France is", "max_tokens": 8}),
    ],
)
def test_llama_servers_usage_withheld_is_counted_as_it_counts_it(
    llama_server: str, path: str, body: dict[str, Any]
) -> None:
    """Its usage taken out of every answer: the proxy's count of the same answer is the server's (the
    prompt as its template renders it with the start token), and not marked estimated."""
    with relayed(llama_server) as (relay_url, relay), run_proxy(relay_url) as url:
        response = httpx.post(url + path, json=body, timeout=120)
        page = httpx.get(url + "/metrics").text
    assert response.status_code == 200, response.text
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    ours = events[-1]["usage"] if body.get("stream") else response.json()["usage"]
    (theirs,) = relay.withheld
    assert ours["prompt_tokens"] == theirs["prompt_tokens"]
    assert abs(ours["completion_tokens"] - theirs["completion_tokens"]) <= 2
    assert "conformant_usage_estimated_total{" not in page
