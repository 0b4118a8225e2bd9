"""The Vercel AI SDK's ``streamText`` with ``@ai-sdk/openai-compatible``, through the proxy, gets a forced
tool call with its arguments whole (issue 20, acceptance 4).

The provider validates every chunk with Zod (a tool-call delta without ``index`` fails it, ollama issue
7881), joins the argument fragments itself and parses them against the tool's ``inputSchema``: a call it
cannot parse comes out ``invalid`` with a ``tool-error`` part, a stream it cannot read as an ``error``
part, and the finish reason it reports is the server's mapped (``tool-calls`` for ``tool_calls``).
"""

from __future__ import annotations

import pytest

from tests.clients import weather_tool
from tests.clients.node import NodeClients


@pytest.mark.parametrize("choice", sorted(weather_tool.CHOICES))
def test_stream_text_gets_the_tool_call_whole(
    node_clients: NodeClients, proxy_url: str, model: str, choice: str
) -> None:
    got = node_clients.run("ai_sdk_stream_tool.mjs", weather_tool.spec(proxy_url, model, choice))
    assert "error" not in got, got
    assert got["errors"] == [], got
    assert got["finishReason"] == "tool-calls", got
    assert "tool-call" in got["parts"], got["parts"]
    calls = got["toolCalls"]
    assert len(calls) == 1, got  # parallel_tool_calls: false
    for call in calls:
        assert call["toolName"] == weather_tool.NAME
        assert call["toolCallId"]
        assert not call["invalid"], call
        weather_tool.check_arguments(call["input"])
