"""The llama.cpp adapter's native ``/completion`` request carries the client's parameters.

Streamed ``/v1/completions`` to a llama.cpp-family upstream go to native ``/completion`` (ik_llama.cpp
#767, Q14). llama-server reads both endpoints' bodies with the same parser, so its own extensions
(grammar, json_schema, top_k, min_p, ...) must reach it there too, as they do on the non-streamed path;
dropping them silently ignored constrained output. A small real upstream speaking llama-server's
native stream records what it was sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.servers import RecordingUpstream, run_asgi

from .conftest import judge, run_proxy

pytestmark = pytest.mark.slow

WORDS = ["yes", ",", " it", " is"]
# llama-server's own extensions, as clients send them on /v1/completions.
EXTENSIONS: dict[str, Any] = {
    "grammar": 'root ::= "yes" | "no"',
    "json_schema": {"type": "string"},
    "top_k": 1,
    "min_p": 0.1,
    "repeat_penalty": 1.3,
    "repeat_last_n": 32,
    "typical_p": 0.9,
    "mirostat": 2,
    "mirostat_tau": 4.0,
    "mirostat_eta": 0.2,
    "dry_multiplier": 0.8,
    "dry_sequence_breakers": ["\n"],
    "xtc_probability": 0.5,
    "xtc_threshold": 0.2,
    "samplers": ["top_k", "temperature"],
    "cache_prompt": False,  # the adapter's own default is true: the client's value must win
    "id_slot": 0,
    "n_keep": -1,
    "ignore_eos": False,
}
OPENAI = {"temperature": 0.2, "top_p": 0.9, "seed": 7, "presence_penalty": 0.1, "logit_bias": {"15": -1}}


class Upstream(RecordingUpstream):
    """llama-server's native streaming ``/completion`` plus its OpenAI ``/v1/completions``, recording
    every body by path."""

    def __init__(self) -> None:
        super().__init__(
            [
                Route("/props", self._props),
                Route("/completion", self._native, methods=["POST"]),
                Route("/v1/completions", self._openai, methods=["POST"]),
            ]
        )

    async def _props(self, _: Request) -> Response:
        return JSONResponse({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1})

    async def _native(self, request: Request) -> Response:
        self.seen.append(("/completion", await request.json()))

        async def events() -> AsyncIterator[bytes]:
            for word in WORDS:
                yield b"data: " + json.dumps({"content": word, "stop": False}).encode() + b"\n\n"
            final = {"content": "", "stop": True, "stop_type": "eos", "model": "m"}
            final |= {"tokens_evaluated": 3, "tokens_predicted": len(WORDS)}
            yield b"data: " + json.dumps(final).encode() + b"\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _openai(self, request: Request) -> Response:
        self.seen.append(("/v1/completions", await request.json()))
        choice = {"index": 0, "text": "".join(WORDS), "logprobs": None, "finish_reason": "stop"}
        usage = {"prompt_tokens": 3, "completion_tokens": len(WORDS), "total_tokens": 3 + len(WORDS)}
        answer = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"}
        return JSONResponse(answer | {"choices": [choice], "usage": usage})


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Upstream, str]]:
    fake = Upstream()
    with run_asgi(fake.app) as url:
        yield fake, url


def _streamed(url: str, body: dict[str, Any]) -> str:
    """The text of a streamed completion, after judging the whole response conformant."""
    response = httpx.post(url + "/v1/completions", json=body, timeout=10)
    assert response.status_code == 200, response.text
    verdict = judge(response, "/v1/completions", body)
    assert verdict.errors == [], ([f.message for f in verdict.errors], response.text[:1500])
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    return "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))


@pytest.mark.parametrize("kind", ["llamacpp", "auto"])
def test_a_streamed_completion_carries_llama_server_parameters_to_native(
    upstream: tuple[Upstream, str], kind: str
) -> None:
    fake, upstream_url = upstream
    body = {"model": "m", "prompt": "Is it?", "stream": True, "max_tokens": 5, "stop": "\n\n"}
    body |= {"stream_options": {"include_usage": True}, "user": "u1", **OPENAI, **EXTENSIONS}
    with run_proxy(upstream_url, upstream_kind=kind) as url:
        fake.seen.clear()
        assert _streamed(url, body) == "".join(WORDS)
    [native] = fake.bodies("/completion")
    assert fake.bodies("/v1/completions") == []
    for key, value in (EXTENSIONS | OPENAI).items():
        assert native.get(key) == value, key
    assert native["prompt"] == "Is it?"
    assert native["n_predict"] == 5  # OpenAI's max_tokens under its native name
    assert native["stop"] == ["\n\n"]  # native takes only arrays
    assert native["stream"] is True
    assert native["model"] == "m"  # llama-server's router mode routes /completion by it
    for key in ("max_tokens", "stream_options", "user"):
        assert key not in native, key


def test_explicit_native_values_win_over_the_adapters_defaults(upstream: tuple[Upstream, str]) -> None:
    fake, upstream_url = upstream
    with run_proxy(upstream_url, upstream_kind="llamacpp") as url:
        fake.seen.clear()
        _streamed(url, {"prompt": "a", "stream": True, "max_tokens": 5, "n_predict": 9, "json_schema": None})
        _streamed(url, {"prompt": "b", "stream": True, "max_completion_tokens": 4, "max_tokens": 5})
        _streamed(url, {"prompt": "c", "stream": True})
    first, second, third = fake.bodies("/completion")
    assert first["n_predict"] == 9  # as llama-server itself ranks them
    # A null would read as "the default", which for json_schema is {}: any JSON value.
    assert "json_schema" not in first
    assert second["n_predict"] == 4
    assert "max_completion_tokens" not in second
    assert third["n_predict"] == 16  # OpenAI's default; native's own is the whole context
    assert third["cache_prompt"] is True


@pytest.mark.parametrize(
    "extra",
    [{"suffix": "!"}, {"best_of": 2}, {"echo": True}, {"n_probs": 2}],
    ids=["suffix", "best_of", "echo", "n_probs"],
)
def test_what_native_would_ignore_goes_to_the_openai_endpoint(
    upstream: tuple[Upstream, str], extra: dict[str, Any]
) -> None:
    """Native ``/completion`` ignores these OpenAI parameters (or, for the client's own ``n_probs``, its
    answer is the OpenAI endpoint's): the OpenAI endpoint gets them, to honour them or say it cannot.
    (``logprobs`` go to native, which gives them where ik_llama.cpp's OpenAI endpoint does not:
    test_llamacpp_ik.py; ``echo``, which llama-server ignores, goes without the key and the proxy puts
    the prompt before the text: test_llamacpp_echo.py.)"""
    fake, upstream_url = upstream
    body = {"prompt": "p", "stream": True, "grammar": "root ::= x", **extra}
    with run_proxy(upstream_url, upstream_kind="llamacpp") as url:
        fake.seen.clear()
        response = httpx.post(url + "/v1/completions", json=body, timeout=10)
    assert response.status_code == 200, response.text
    assert fake.bodies("/completion") == []
    [sent] = fake.bodies("/v1/completions")
    assert sent["grammar"] == "root ::= x"
    assert all(sent[k] == v for k, v in extra.items() if k != "echo")


def test_n_without_fan_out_goes_to_the_openai_endpoint(upstream: tuple[Upstream, str]) -> None:
    """Native ``n`` (``n_cmpl``) streams interleaved choices the adapter reads as one."""
    fake, upstream_url = upstream
    with run_proxy(upstream_url, upstream_kind="llamacpp", fan_out=False) as url:
        fake.seen.clear()
        httpx.post(url + "/v1/completions", json={"prompt": "p", "stream": True, "n": 2}, timeout=10)
    assert fake.bodies("/completion") == []
    assert fake.bodies("/v1/completions")[0]["n"] == 2
