"""The message a scripted upstream answers a forced tool call with: a call, as a server that honours
``tool_choice`` gives one (a text answer to it is judged unhonoured by the proxy and asked again, Q86)."""

from __future__ import annotations

import json
from typing import Any

from conformance.request import named_function

__all__ = ["forced_answer"]


def forced_answer(body: dict[str, Any]) -> dict[str, Any] | None:
    """The assistant message calling the function ``body`` forces (its named one, else its first tool),
    or the JSON output holding that call where the call is asked as JSON output (tool_emulation.py);
    None where ``body`` forces no call."""
    choice, tools = body.get("tool_choice"), body.get("tools")
    if tools and (choice == "required" or isinstance(choice, dict)):
        name = named_function(choice) or tools[0]["function"]["name"]
        call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    response_format = body.get("response_format") or {}
    schema = (response_format.get("json_schema") or {}).get("schema") or {}
    called = (schema.get("properties") or {}).get("tool_call")
    if called is None:
        return None  # not forced: a call or a response (its schema's anyOf)
    branch = called.get("anyOf", [called])[0]
    envelope = {"tool_call": {"name": branch["properties"]["name"]["const"], "arguments": {}}}
    return {"role": "assistant", "content": json.dumps(envelope)}
