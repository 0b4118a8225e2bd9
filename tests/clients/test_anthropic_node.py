"""@anthropic-ai/sdk on Node.js through the proxy's ``/v1/messages`` in front of the bundled backend
(issue 31, acceptance 1): the ``messages.stream()`` helper gets a forced tool call whole (its
``finalMessage`` and its own ``inputJson`` snapshots), ``messages.create()`` answers the tool's result,
and ``messages.countTokens()`` counts the prompt with its tool.

The helper builds the message from the events itself: a block index out of order, a delta whose type
does not fit its block, a call's ``input_json_delta`` pieces that do not join into its JSON, or a stream
cut without ``message_stop`` all show in what it returns or raise."""

from __future__ import annotations

from typing import Any

import pytest

from tests.clients import weather_tool
from tests.clients.node import NodeClients

CHOICES: dict[str, Any] = {"any": {"type": "any"}, "tool": {"type": "tool", "name": weather_tool.NAME}}


@pytest.mark.parametrize("choice", sorted(CHOICES))
def test_the_stream_helper_gets_the_call_whole_and_its_result_is_answered(
    node_clients: NodeClients, proxy_url: str, model: str, choice: str
) -> None:
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
