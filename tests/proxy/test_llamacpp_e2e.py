"""Acceptance 1b/1c: the SDK through the proxy in front of real llama.cpp servers, every response judged."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.live import llama_cpp_server
from tests.support.servers import free_port, run_process

from .conftest import judge, run_proxy

pytestmark = [pytest.mark.backend, pytest.mark.slow]

CHAT = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0}
COMPLETION = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}


@pytest.fixture(scope="module")
def bundled_backend() -> Iterator[str]:
    if importlib.util.find_spec("backend.cli") is None:
        pytest.skip("the bundled backend is not built yet")
    port = free_port()
    # Batch-invariant: the test compares a streamed and a whole reply to the same greedy request.
    args = ["python", "-m", "conformance", "backend", "--host", "127.0.0.1", "--port", str(port)]
    args.append("--batch-invariant")
    # The context llama-cpp-python's server gets, so that the overflow below overflows both (the
    # backend's own default is now the model's training context, 32,768 tokens).
    args += ["--ctx-size", str(llama_cpp_server.CONTEXT), "--parallel", "1"]
    with run_process(args, health_path="/health", port=port, timeout=300) as (url, _):
        yield url


def _judged(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    response = httpx.post(url + path, json=body, timeout=120)
    verdict = judge(response, path, body)
    assert verdict.errors == [], ([f.message for f in verdict.errors], response.text[:1500])
    return response


def _exercise(upstream: str) -> None:
    with run_proxy(upstream) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        model = "gemma"
        chunks = list(client.chat.completions.create(model=model, stream=True, **CHAT))  # type: ignore[call-overload]
        assert len({c.id for c in chunks}) == 1
        assert chunks[-1].choices[0].finish_reason in ("stop", "length")
        # Gemma under llama-cpp-python's fallback chat template may answer with EOS at once: the text
        # may be empty, but stream and JSON must agree and the JSON reply must carry usage.
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        reply = client.chat.completions.create(model=model, **CHAT)  # type: ignore[call-overload]
        assert reply.choices[0].message.content == streamed
        assert reply.usage is not None
        texts = list(client.completions.create(model=model, stream=True, **COMPLETION))  # type: ignore[call-overload]
        assert "".join(c.choices[0].text for c in texts if c.choices)
        whole = client.completions.create(model=model, **COMPLETION)  # type: ignore[call-overload]
        assert whole.choices[0].text
        usage_chunks = list(
            client.chat.completions.create(  # type: ignore[call-overload]
                model=model, stream=True, stream_options={"include_usage": True}, **CHAT
            )
        )
        assert usage_chunks[-1].choices == []
        usage = usage_chunks[-1].usage
        assert usage.prompt_tokens > 0  # llama-cpp-python streams no usage (Q28): counted via its tokenizer
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
        for stream in (True, False):
            _judged(url, "/v1/chat/completions", {"model": model, "stream": stream, **CHAT})
            _judged(url, "/v1/completions", {"model": model, "stream": stream, **COMPLETION})
            _judged(url, "/v1/completions", {"model": model, "stream": stream, "n": 2, **COMPLETION})
            _judged(
                url, "/v1/completions", {"model": model, "stream": stream, "stop": [" Paris"], **COMPLETION}
            )
        # llama-cpp-python starts its SSE response before the model call (Q52) and cuts an overflowing
        # stream off with no error at all; the proxy turns that into a real HTTP error, not a 200.
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(
                model=model,
                stream=True,
                messages=[{"role": "user", "content": "overflow " * llama_cpp_server.OVERFLOW_WORDS}],
                max_tokens=4,
            )


def test_proxy_in_front_of_llama_cpp_python(llama_cpp_python: str) -> None:
    _exercise(llama_cpp_python)


def test_proxy_in_front_of_the_bundled_backend(bundled_backend: str) -> None:
    _exercise(bundled_backend)


def test_llama_cpp_python_stream_overflow_is_a_400_not_a_502(llama_cpp_python: str) -> None:
    """Q52: its overflowing stream ends before the first byte; the proxy asks again without streaming
    and answers with the real error, a 400 ``context_length_exceeded`` the SDK raises."""
    overflow: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "overflow " * llama_cpp_server.OVERFLOW_WORDS}
    ]
    with run_proxy(llama_cpp_python) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        for stream in (True, False):
            # The status is held until the upstream's first event, so even a stream raises at create().
            with pytest.raises(openai.BadRequestError) as caught:
                client.chat.completions.create(model="gemma", stream=stream, messages=overflow, max_tokens=4)
            assert caught.value.status_code == 400
            assert caught.value.code == "context_length_exceeded"
