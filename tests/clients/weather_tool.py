"""The one tool the client tests offer, and the two ``tool_choice`` forms that must produce a call.

``required`` and a named function are the choices a server must honour whatever the model (issue 20:
tool_choice ignored is among the most reported breakages of agents on local servers); ``auto`` is left
out, since a base model may rightly answer in text. The schema bounds the city so that a small model's
call fits in ``MAX_TOKENS`` under a grammar.

``parallel_tool_calls`` is false: where the grammar allows more calls, the base Gemma 3 270M writes calls
until ``max_tokens`` cuts one (measured through the proxy in front of the bundled backend: five whole
calls, then a sixth cut at ``{"city": "Paris", "unit":`` with ``finish_reason: "length"``), and a cut
call's arguments are not whole by construction, whoever serves them. One call is what the tests judge.
"""

from __future__ import annotations

from typing import Any

import jsonschema

NAME = "get_weather"
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 24},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOL: dict[str, Any] = {"name": NAME, "description": "The weather in a city.", "parameters": PARAMETERS}
PROMPT = "What is the weather in Paris right now, in celsius?"
MAX_TOKENS = 128

CHOICES: dict[str, Any] = {
    "required": "required",
    "named": {"type": "function", "function": {"name": NAME}},
}


def spec(base_url: str, model: str, choice: str) -> dict[str, Any]:
    """What a client script is asked to send (tests/clients/js/*.mjs read it as their one argument)."""
    return {
        "baseURL": base_url + "/v1",
        "model": model,
        "prompt": PROMPT,
        "tool": TOOL,
        "toolChoice": CHOICES[choice],
        "parallelToolCalls": False,
        "maxTokens": MAX_TOKENS,
    }


def check_arguments(arguments: Any) -> None:
    """A call's arguments, whole: one JSON object that the tool's schema accepts."""
    jsonschema.validate(arguments, PARAMETERS)
