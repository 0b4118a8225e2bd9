"""The context check of a llama.cpp upstream (proxy/adapters/context_window.py): bounded in time, counted
with the adapter's one ``/tokenize`` counter, and not turned off by one failed call.

The check runs before the request goes upstream, where no first-byte or client timeout covers it: counted
one prompt after another, 50 identical prompts against a ``/tokenize`` of 0.2 s held a request 10 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from proxy.adapters.llamacpp import LlamaCppAdapter
from proxy.config import ProxyConfig
from proxy.upstream import Upstream
from tests.support.servers import run_asgi

from .conftest import run_proxy
from .ik_llama_upstream import IkLlama
from .llama_server_upstream import LlamaServer

N_CTX = 64


@pytest.fixture
def ik() -> Iterator[tuple[IkLlama, str]]:
    fake = IkLlama(n_ctx=N_CTX)
    with run_asgi(fake.app) as url:
        yield fake, url


def _timed(url: str, body: dict[str, object]) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    response = httpx.post(url + "/v1/completions", json=body, timeout=60)
    return response, time.monotonic() - start


def test_identical_prompts_are_counted_once(ik: tuple[IkLlama, str]) -> None:
    fake, upstream = ik
    fake.tokenize_delay = 0.2
    with run_proxy(upstream, upstream_kind="llamacpp") as url:
        response, elapsed = _timed(url, {"prompt": ["hello " * 20] * 50, "max_tokens": 2})
    assert response.status_code == 200, response.text
    assert len(fake.tokenized) == 1  # not 50
    assert elapsed < 2.0  # one after another: 10 s


def test_distinct_prompts_are_counted_a_few_at_once(ik: tuple[IkLlama, str]) -> None:
    fake, upstream = ik
    fake.tokenize_delay = 0.5
    with run_proxy(upstream, upstream_kind="llamacpp") as url:
        prompts = [f"hello{i} " * 20 for i in range(8)]
        response, elapsed = _timed(url, {"prompt": prompts, "max_tokens": 2})
    assert response.status_code == 200, response.text
    assert len(fake.tokenized) == 8
    assert fake.tokenizing_most == 4  # a few at once, not a burst of hundreds
    assert elapsed < 3.0  # one after another: 4 s


def test_a_slow_check_gives_up_at_the_first_byte_timeout(ik: tuple[IkLlama, str]) -> None:
    fake, upstream = ik
    fake.tokenize_delay = 3.0
    with run_proxy(upstream, upstream_kind="llamacpp", first_byte_timeout=1.0) as url:
        response, elapsed = _timed(url, {"prompt": "hello " * (N_CTX + 10), "max_tokens": 2})
    assert response.status_code == 200  # unchecked: the server's own answer (it cuts the prompt)
    assert response.json()["usage"]["prompt_tokens"] == N_CTX - 4
    assert elapsed < 2.5  # not the 3 s the count would take


def test_one_failed_template_call_does_not_turn_template_counting_off() -> None:
    fake = LlamaServer(n_ctx=N_CTX)
    fake.template_failures = 1
    # 60 words fit the 62 tokens left; templated (three more words) they do not.
    chat = {"messages": [{"role": "user", "content": "hello " * 60}], "max_tokens": 2}
    with run_asgi(fake.app) as upstream, run_proxy(upstream, upstream_kind="llamacpp") as url:
        first = httpx.post(url + "/v1/chat/completions", json=chat, timeout=30)
        second = httpx.post(url + "/v1/chat/completions", json=chat, timeout=30)
    assert first.status_code == 200  # the template failed: only the texts were counted
    assert second.status_code == 400, second.text  # asked again, and counted as templated
    assert second.json()["error"]["code"] == "context_length_exceeded"
    assert len(fake.bodies("/apply-template")) == 2


def test_one_tokenize_counter_with_or_without_special_tokens(ik: tuple[IkLlama, str]) -> None:
    fake, url = ik

    async def counts() -> list[int | None]:
        upstream, adapter = Upstream(ProxyConfig(upstream=url)), LlamaCppAdapter()
        try:
            return [
                await adapter.count_tokens(upstream, "a b", 5.0),
                await adapter.count_tokens(upstream, "a b c", 5.0, add_special=True),
                await adapter.refusal(upstream, "completions", {"prompt": "hello " * 20}) and None,
            ]
        finally:
            await upstream.aclose()

    assert asyncio.run(counts())[:2] == [2, 3]
    assert fake.tokenized == [  # usage counts without the start token; the context check with it
        {"content": "a b"},
        {"content": "a b c", "add_special": True},
        {"content": "hello " * 20, "add_special": True},
    ]
