"""openai-node's ``client.chat.completions.stream()`` helper, through the proxy, gets a forced tool call
whole (issue 20, acceptance 4).

The helper rebuilds the message from the deltas itself: a call split without ``index``, a name repeated
in every fragment (llama-cpp-python 0.3.36 made it build a legacy ``function_call`` instead of
``tool_calls``), arguments repeated or cut, or ``finish_reason: "stop"`` after a call all show in what it
returns, which is what an agent built on it acts on.
"""

from __future__ import annotations

import json

import pytest

from tests.clients import weather_tool
from tests.clients.node import NodeClients


@pytest.mark.parametrize("choice", sorted(weather_tool.CHOICES))
def test_stream_helper_gets_the_tool_call_whole(
    node_clients: NodeClients, proxy_url: str, model: str, choice: str
) -> None:
    got = node_clients.run("openai_stream_tool.mjs", weather_tool.spec(proxy_url, model, choice))
    assert "error" not in got, got
    choice_0 = got["final"]["choices"][0]
    message = choice_0["message"]
    assert choice_0["finish_reason"] == "tool_calls", choice_0
    assert not message.get("function_call"), message  # the legacy field the helper falls back to
    calls = message["tool_calls"]
    assert len(calls) == 1, message  # parallel_tool_calls: false
    for call in calls:
        assert call["type"] == "function"
        assert call["id"]
        assert call["function"]["name"] == weather_tool.NAME
        weather_tool.check_arguments(json.loads(call["function"]["arguments"]))
    # The helper's own "arguments done" event saw the same arguments as the final message.
    done = {event["index"]: event for event in got["argumentsDone"]}
    assert sorted(done) == list(range(len(calls))), got["argumentsDone"]
    for index, call in enumerate(calls):
        assert done[index]["name"] == weather_tool.NAME
        assert json.loads(done[index]["arguments"]) == json.loads(call["function"]["arguments"])
