"""The llama.cpp adapter in front of a server that answers as ik_llama.cpp before its #768 does.

Three gaps `conformant check` found through the proxy (issue 18, items 12, 14-16): ``max_completion_tokens``
alone reached the server as no limit (it read only ``max_tokens``: generation without end), over-long
prompts were cut and answered 200, and ``logprobs`` came back ``null``. Each test here fails without its
fix; the upstream mirrors the real server's answers (tests/proxy/ik_llama_upstream.py).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.servers import free_port, run_asgi, run_process

from .conftest import post_judged as _judged
from .conftest import run_proxy
from .ik_llama_upstream import CALLED_WITH, ENDLESS, WORDS, IkLlama

pytestmark = pytest.mark.slow

N_CTX = 64


@pytest.fixture(scope="module")
def ik() -> Iterator[tuple[IkLlama, str]]:
    fake = IkLlama(n_ctx=N_CTX)
    with run_asgi(fake.app) as url:
        yield fake, url


@pytest.fixture(scope="module")
def proxy(ik: tuple[IkLlama, str]) -> Iterator[str]:
    with run_proxy(ik[1]) as url:  # detected as llama.cpp by its /props
        yield url


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


# -- item 14: a limit every upstream reads, and the operator's default ---------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_max_completion_tokens_alone_limits_the_chat(proxy: str, stream: bool) -> None:
    body = {"messages": [{"role": "user", "content": "Count."}], "max_completion_tokens": 3, "stream": stream}
    body |= {"stream_options": {"include_usage": True}} if stream else {}
    response = _judged(proxy, "/v1/chat/completions", body)
    usage = _events(response)[-1]["usage"] if stream else response.json()["usage"]
    assert usage["completion_tokens"] == 3  # not ENDLESS: the server read the limit


def test_the_operators_default_limit_applies_to_requests_without_one(ik: tuple[IkLlama, str]) -> None:
    upstream = ik[1]
    with run_proxy(upstream, default_max_tokens=4) as url:
        chat = {"messages": [{"role": "user", "content": "Count."}]}
        assert _judged(url, "/v1/chat/completions", chat).json()["usage"]["completion_tokens"] == 4
        given = chat | {"max_tokens": 2}
        assert _judged(url, "/v1/chat/completions", given).json()["usage"]["completion_tokens"] == 2
        text = _judged(url, "/v1/completions", {"prompt": "Count:", "stream": True})
        assert "".join(e["choices"][0]["text"] for e in _events(text) if e["choices"]) == "".join(WORDS[:4])
    with run_proxy(upstream) as url:  # without one, the server's own (here: for ever)
        assert _judged(url, "/v1/chat/completions", chat).json()["usage"]["completion_tokens"] == ENDLESS


# -- items 12 and 16: a prompt past the context is refused, not cut -------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_a_prompt_past_the_context_is_a_400_before_any_generation(
    ik: tuple[IkLlama, str], proxy: str, endpoint: str, stream: bool
) -> None:
    fake, _ = ik
    words = "hello " * (N_CTX + 10)
    if endpoint == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": words}]}
    else:
        path, body = "/v1/completions", {"prompt": words, "max_tokens": 2}
    fake.seen.clear()
    response = _judged(proxy, path, body | {"stream": stream}, status=400)
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["type"] == "invalid_request_error"
    assert error["param"] == ("messages" if endpoint == "chat" else "prompt")
    assert f"maximum context length is {N_CTX} tokens" in error["message"]
    assert f"{N_CTX + 10} in your prompt; 2 for the completion" in error["message"] or endpoint == "chat"
    assert [path for path, _ in fake.seen if path not in ("/tokenize", "/props")] == []  # nothing generated


def test_the_requested_completion_counts_against_the_context(ik: tuple[IkLlama, str], proxy: str) -> None:
    """As OpenAI counts it: a prompt that fits, asking for more tokens than are left, is refused."""
    words = "hello " * (N_CTX - 10)
    fits = {"prompt": words, "max_tokens": 8}
    assert _judged(proxy, "/v1/completions", fits).json()["usage"]["completion_tokens"] == 8
    refused = _judged(proxy, "/v1/completions", {"prompt": words, "max_tokens": 20}, status=400).json()
    assert (
        f"you requested {N_CTX + 10} tokens ({N_CTX - 10} in your prompt; 20 for"
        in refused["error"]["message"]
    )
    chat = {"messages": [{"role": "user", "content": words}], "max_completion_tokens": 20}
    refused = _judged(proxy, "/v1/chat/completions", chat, status=400).json()
    assert f"({N_CTX - 10} in the messages, 20 in the completion)" in refused["error"]["message"]


def test_a_llamacpp_kind_reads_the_context_when_first_needed_and_not_on_every_request(
    ik: tuple[IkLlama, str],
) -> None:
    fake, upstream = ik
    over = {"prompt": "hello " * (N_CTX + 1), "max_tokens": 2}
    with run_proxy(upstream, upstream_kind="llamacpp") as url:  # no detection: /props not read at start
        assert (
            _judged(url, "/v1/completions", over, status=400).json()["error"]["code"]
            == "context_length_exceeded"
        )
    fake.props = False
    try:
        with run_proxy(upstream, upstream_kind="llamacpp") as url:
            fake.seen.clear()
            for _ in range(3):  # no size to check against: served as the server serves it
                assert _judged(url, "/v1/completions", over).json()["usage"]["prompt_tokens"] == N_CTX - 4
            assert [path for path, _ in fake.seen].count("/props") == 1
    finally:
        fake.props = True


def test_each_prompt_of_an_array_is_checked(proxy: str) -> None:
    body = {"prompt": ["short one", "hello " * (N_CTX + 1)], "max_tokens": 2}
    assert (
        _judged(proxy, "/v1/completions", body, status=400).json()["error"]["code"]
        == "context_length_exceeded"
    )
    ids = {"prompt": list(range(N_CTX + 1)), "max_tokens": 2}
    assert (
        _judged(proxy, "/v1/completions", ids, status=400).json()["error"]["code"]
        == "context_length_exceeded"
    )


# -- item 15: logprobs from the native endpoint's probabilities -----------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_completion_logprobs_come_from_the_native_probabilities(
    ik: tuple[IkLlama, str], proxy: str, stream: bool
) -> None:
    fake, _ = ik
    body = {"prompt": "Count:", "max_tokens": 3, "logprobs": 2, "stream": stream}
    fake.seen.clear()
    response = _judged(proxy, "/v1/completions", body)
    assert fake.bodies("/completion")[0]["n_probs"] >= 2
    if stream:
        choices = [e["choices"][0] for e in _events(response) if e["choices"]]
        parts = [c["logprobs"] for c in choices if c["logprobs"] and c["logprobs"]["tokens"]]
        logprobs = {key: [v for part in parts for v in part[key]] for key in parts[0]}
        text = "".join(c["text"] for c in choices)
    else:
        choice = response.json()["choices"][0]
        logprobs, text = choice["logprobs"], choice["text"]
    assert logprobs["tokens"] == list(WORDS[:3])  # each token once: the last event's repeat is left out
    assert "".join(logprobs["tokens"]) == text
    assert logprobs["token_logprobs"] == [0.0, 0.0, 0.0]  # greedy: probability 1
    assert logprobs["top_logprobs"][0] == {WORDS[0]: 0.0, " other0": -9999.0}  # two, as asked
    assert logprobs["text_offset"] == [6, 10, 14]  # after the prompt "Count:", as OpenAI counts


def test_a_sampled_tokens_logprob_is_found_beyond_the_alternatives_asked_for(
    ik: tuple[IkLlama, str], proxy: str
) -> None:
    """ik_llama.cpp gives a token's probability only among the alternatives; a sampled token is often
    not the likeliest, so more are asked for than the client's count (recorded: " home" at temperature 1
    outside the top 2)."""
    fake, _ = ik
    fake.sampled = True
    try:
        body = {"prompt": "Count:", "max_tokens": 2, "logprobs": 1, "temperature": 1.0}
        logprobs = _judged(proxy, "/v1/completions", body).json()["choices"][0]["logprobs"]
    finally:
        fake.sampled = False
    assert logprobs["token_logprobs"] == [pytest.approx(math.log(0.2))] * 2
    assert logprobs["top_logprobs"][0] == {" other0": pytest.approx(math.log(0.5))}


def test_completion_logprobs_from_llama_servers_newer_native_shape(
    ik: tuple[IkLlama, str], proxy: str
) -> None:
    fake, _ = ik
    fake.newer_probs = True
    try:
        body = {"prompt": "Count:", "max_tokens": 2, "logprobs": 1, "stream": True}
        choices = [e["choices"][0] for e in _events(_judged(proxy, "/v1/completions", body)) if e["choices"]]
    finally:
        fake.newer_probs = False
    parts = [c["logprobs"] for c in choices if c["logprobs"] and c["logprobs"]["tokens"]]
    assert [t for part in parts for t in part["tokens"]] == list(WORDS[:2])
    assert [v for part in parts for v in part["token_logprobs"]] == [-0.5, -0.5]
    assert parts[0]["top_logprobs"] == [{WORDS[0]: -0.5}]  # one alternative, as asked


def test_serve_takes_the_default_limit_from_its_flag_or_variable(ik: tuple[IkLlama, str]) -> None:
    port = free_port()
    serve = [sys.executable, "-m", "conformance", "serve", "--upstream", ik[1], "--port", str(port)]
    env = {"CONFORMANT_DEFAULT_MAX_TOKENS": "5"}
    with run_process(serve, health_path="/health", port=port, timeout=60, env=env) as (url, _):
        chat = {"messages": [{"role": "user", "content": "Count."}]}
        assert _judged(url, "/v1/chat/completions", chat).json()["usage"]["completion_tokens"] == 5
    bad = subprocess.run(
        [*serve, "--default-max-tokens", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | env,
    )
    assert bad.returncode == 2
    assert "'0' is not a positive integer (from the flag or CONFORMANT_DEFAULT_MAX_TOKENS)" in bad.stderr


# -- issue 37, point 5: a server that refuses tools outright gets them as JSON output ------------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASKED = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture
def refusing() -> Iterator[tuple[IkLlama, str]]:
    """A fresh server and proxy: what the proxy learns of the refusal starts from nothing."""
    fake = IkLlama(n_ctx=4096)
    with run_asgi(fake.app) as upstream, run_proxy(upstream) as url:
        yield fake, url


def _sent_tools(fake: IkLlama) -> list[bool]:
    return [bool(body.get("tools")) for path, body in fake.seen if path == "/v1/chat/completions"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "choice", ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_tools_refused_by_the_server_are_called_through_json_output(
    refusing: tuple[IkLlama, str], stream: bool, choice: Any
) -> None:
    fake, proxy = refusing
    body = {"messages": ASKED, "tools": [WEATHER], "tool_choice": choice, "stream": stream, "max_tokens": 64}
    response = _judged(proxy, "/v1/chat/completions", body)
    if stream:
        events = _events(response)
        [call] = [c for e in events for c in e["choices"][0]["delta"].get("tool_calls") or ()]
        finish = [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1]
    else:
        [call] = response.json()["choices"][0]["message"]["tool_calls"]
        finish = response.json()["choices"][0]["finish_reason"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == CALLED_WITH
    assert finish == "tool_calls"
    # Refused once, with the tools; asked again as JSON output, and asked so from then on.
    assert _sent_tools(fake) == [True, False]
    _judged(proxy, "/v1/chat/completions", body)
    assert _sent_tools(fake) == [True, False, False]


def test_tool_choice_none_goes_without_the_tools_it_refuses(refusing: tuple[IkLlama, str]) -> None:
    fake, proxy = refusing
    _judged(proxy, "/v1/chat/completions", {"messages": ASKED, "tools": [WEATHER], "max_tokens": 4})
    body = {"messages": ASKED, "tools": [WEATHER], "tool_choice": "none", "max_tokens": 4}
    answer = _judged(proxy, "/v1/chat/completions", body).json()["choices"][0]["message"]
    assert answer["content"]
    assert not answer.get("tool_calls")
    assert _sent_tools(fake)[-1] is False


def test_an_image_the_server_cannot_parse_is_the_specs_400(refusing: tuple[IkLlama, str]) -> None:
    _, proxy = refusing
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    content = [{"type": "text", "text": "What is this?"}, image]
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 4}
    error = _judged(proxy, "/v1/chat/completions", body, status=400).json()["error"]
    assert (error["code"], error["param"]) == ("unsupported_content", "messages[0].content[1]")


def test_chat_logprobs_it_leaves_out_are_refused_never_answered_without(
    refusing: tuple[IkLlama, str],
) -> None:
    # Its chat answers carry "logprobs": null however asked (Q69): answered so, the client silently has
    # none. The first such answer is replaced by the 400 (nothing was sent yet); later requests, streamed
    # or not, get it before anything is sent.
    fake, proxy = refusing
    body = {"messages": ASKED, "max_tokens": 3, "logprobs": True, "top_logprobs": 2}
    for stream in (False, True, False):
        error = _judged(proxy, "/v1/chat/completions", {**body, "stream": stream}, status=400).json()["error"]
        assert (error["code"], error["param"]) == ("unsupported_parameter", "logprobs")
    assert len(_sent_tools(fake)) == 1  # asked once, learned
    _judged(proxy, "/v1/chat/completions", {"messages": ASKED, "max_tokens": 3})  # without logprobs: served
