"""@anthropic-ai/sdk on Node.js through the proxy's ``/v1/messages`` (issue 31, acceptance 1), in front of
the bundled backend and of llama-cpp-python's own server: the ``messages.stream()`` helper gets a forced
tool call whole (its ``finalMessage`` and its own ``inputJson`` snapshots), ``messages.create()`` answers
the tool's result, and ``messages.countTokens()`` counts the prompt with its tool. Every exchange, as the
SDK's fetch got it, is judged by the suite with no error.

The helper builds the message from the events itself: a block index out of order, a delta whose type
does not fit its block, a call's ``input_json_delta`` pieces that do not join into its JSON, or a stream
cut without ``message_stop`` all show in what it returns or raise."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.clients import weather_tool
from tests.clients.conftest import serve
from tests.clients.node import NodeClients
from tests.live import llama_cpp_server
from tests.support.messages_checks import judged
from tests.support.servers import free_port, run_process

CHOICES: dict[str, Any] = {"any": {"type": "any"}, "tool": {"type": "tool", "name": weather_tool.NAME}}


@contextlib.contextmanager
def _llama_cpp_python_proxy() -> Iterator[str]:
    """The proxy in front of llama-cpp-python's server with ``--chat_format chatml-function-calling`` (a
    named ``tool_choice`` gets a grammar, and its template takes ``tool`` messages)."""
    port = free_port()
    command = [*llama_cpp_server.command(port), "--chat_format", "chatml-function-calling"]
    with (
        run_process(command, health_path="/v1/models", port=port, timeout=180) as (upstream, _),
        serve(["--upstream", upstream]) as url,
    ):
        yield url


@pytest.fixture(scope="module", params=["conformant backend", "llama-cpp-python"])
def upstream_proxy(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """The proxy's URL and the model it lists first, in front of each upstream in turn."""
    if request.param == "conformant backend":
        url = request.getfixturevalue("proxy_url")
        yield url, request.getfixturevalue("model")
        return
    with _llama_cpp_python_proxy() as url:
        yield url, httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]


@pytest.mark.parametrize("choice", sorted(CHOICES))
def test_the_stream_helper_gets_the_call_whole_and_its_result_is_answered(
    node_clients: NodeClients, upstream_proxy: tuple[str, str], choice: str
) -> None:
    proxy_url, model = upstream_proxy
    tool = {
        "name": weather_tool.NAME,
        "description": weather_tool.TOOL["description"],
        "input_schema": weather_tool.PARAMETERS,
    }
    spec = {
        "baseURL": proxy_url,
        "model": model,
        "prompt": weather_tool.PROMPT,
        "tool": tool,
        "toolChoice": {**CHOICES[choice], "disable_parallel_tool_use": True},
        "maxTokens": weather_tool.MAX_TOKENS,
        "result": "18 degrees celsius, sunny",
    }
    got = node_clients.run("anthropic_stream_tool.mjs", spec)
    assert "error" not in got, got
    final = got["final"]
    assert final["id"].startswith("msg_"), final
    assert final["stop_reason"] == "tool_use", final
    calls = [block for block in final["content"] if block["type"] == "tool_use"]
    assert len(calls) == 1, final  # disable_parallel_tool_use
    call = calls[0]
    assert call["id"].startswith("toolu_")
    assert call["name"] == weather_tool.NAME
    weather_tool.check_arguments(call["input"])
    assert got["inputSnapshot"] == call["input"]  # the helper's own view of the streamed input
    answer = got["answer"]
    assert answer is not None
    assert answer["stop_reason"] in ("end_turn", "max_tokens", "tool_use"), answer
    assert answer["usage"]["input_tokens"] > final["usage"]["input_tokens"]  # the result was sent on
    assert got["counted"]["input_tokens"] > 0
    # The stream, the answer to the tool's result and the count, as they went over the wire.
    exchanges = got["exchanges"]
    assert [e["path"] for e in exchanges] == ["/v1/messages"] * 2 + ["/v1/messages/count_tokens"]
    for exchange in exchanges:
        judged(
            exchange["body"].encode(),
            exchange["request"],
            exchange["status"],
            exchange["headers"],
            path=exchange["path"],
        )
