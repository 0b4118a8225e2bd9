"""How the upstream's traits shape the request it is sent: each llama-cpp-python workaround is a field of
``UpstreamTraits`` with a default that keeps it for every upstream, and an upstream without the quirk is
asked as the client asked."""

from __future__ import annotations

from typing import Any

from conformance.request_info import RequestInfo
from proxy.adapters import OpenAIAdapter
from proxy.adapters.base import fitted_request
from proxy.upstream_traits import UpstreamTraits

SCORED = {"model": "m", "prompt": "Once upon", "max_tokens": 0, "echo": True, "stream": True, "logprobs": 1}


def _fitted(traits: UpstreamTraits, body: dict[str, Any]) -> dict[str, Any]:
    return fitted_request(traits, body, RequestInfo.from_body("completions", body))


def test_a_scored_prompt_is_asked_whole_with_one_token_by_default() -> None:
    fitted = _fitted(UpstreamTraits(), SCORED | {"stream_options": {"include_usage": True}})
    assert fitted["max_tokens"] == 1
    assert fitted["stream"] is False
    assert "stream_options" not in fitted


def test_an_upstream_that_streams_echo_and_reads_zero_is_asked_as_the_client_asked() -> None:
    fitted = _fitted(UpstreamTraits(streams_echo=True, zero_limit_unbounded=False), SCORED)
    assert fitted == SCORED


def test_a_request_that_generates_is_not_rewritten() -> None:
    body = {"model": "m", "prompt": "Once upon", "max_tokens": 5, "stream": True}
    assert _fitted(UpstreamTraits(), body) is body


def test_chat_logprobs_ask_top_logprobs_only_where_the_upstream_needs_it() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "logprobs": True}
    assert OpenAIAdapter().call("chat", body).body["top_logprobs"] == 0
    plain = OpenAIAdapter(traits=UpstreamTraits(chat_logprobs_need_top=False)).call("chat", body)
    assert "top_logprobs" not in plain.body
