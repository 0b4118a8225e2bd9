"""The Responses API probes of ``check`` (``POST /v1/responses``, issue 21): text, a stream, a function
tool round trip (the call, then the answer to its output), ``text.format`` ``json_schema``,
``max_output_tokens`` reached, the text's logprobs, an image and a file (which a text-only model may
decline with a 4xx: a 500 is the error, as llama-server gave for an image) and an invalid request. A
server without that route (404) is ``unsupported`` (:func:`conformance.rules.acceptance.route_missing`).
Their token limits are at least 16: OpenAI refuses a smaller ``max_output_tokens``.
"""

from __future__ import annotations

import base64
from typing import Any

from conformance.probe import COUNTING, Probe, ProbeContext, RequestSpec

__all__ = ["PROBES"]

PATH = "/v1/responses"


def _responses(ctx: ProbeContext, given: Any = "Say hello.", **extra: Any) -> RequestSpec:
    return RequestSpec(PATH, {"model": ctx.model, "input": given, "max_output_tokens": 16, **extra})


_WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


_WEATHER_QUESTION = "What is the weather in Paris?"


_WEATHER_RESULT: list[dict[str, Any]] = [
    {"role": "user", "content": _WEATHER_QUESTION},
    {
        "type": "function_call",
        "call_id": "call_conformant_probe",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    },
    {"type": "function_call_output", "call_id": "call_conformant_probe", "output": '{"temperature_c": 18}'},
]


_ANSWER_FORMAT: dict[str, Any] = {
    "format": {
        "type": "json_schema",
        "name": "answer",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    }
}


_PNG = (  # a 1x1 red PNG: any model that reads images can
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
_PDF = (  # a one-page PDF that says "Hello"
    b"%PDF-1.1\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
    b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
    b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 50]/Contents 4 0 R>>endobj\n"
    b"4 0 obj<</Length 36>>stream\nBT /F1 12 Tf 10 20 Td (Hello) Tj ET\nendstream endobj\n"
    b"trailer<</Root 1 0 R>>\n%%EOF"
)
_IMAGE = {"type": "input_image", "image_url": f"data:image/png;base64,{_PNG}"}
_FILE = {
    "type": "input_file",
    "filename": "note.pdf",
    "file_data": "data:application/pdf;base64," + base64.b64encode(_PDF).decode(),
}


def _with_part(part: dict[str, Any]) -> list[dict[str, Any]]:
    content = [{"type": "input_text", "text": "Describe the attachment in one short sentence."}, part]
    return [{"type": "message", "role": "user", "content": content}]


PROBES: tuple[Probe, ...] = (
    Probe("responses", "Responses API text", lambda c: _responses(c), "success"),
    Probe("responses-stream", "Responses API, streamed", lambda c: _responses(c, stream=True), "success"),
    Probe(
        "responses-tool-call",
        "Responses API function tool: the call, streamed",
        lambda c: _responses(
            c,
            _WEATHER_QUESTION,
            tools=[_WEATHER],
            tool_choice={"type": "function", "name": "get_weather"},
            max_output_tokens=64,
            stream=True,
        ),
        "success",
    ),
    Probe(
        "responses-tool-result",
        "Responses API function tool: the answer to the call's output",
        lambda c: _responses(c, _WEATHER_RESULT, tools=[_WEATHER]),
        "success",
    ),
    Probe(
        "responses-json-schema",
        "Responses API text.format json_schema",
        lambda c: _responses(c, "Name a colour.", text=_ANSWER_FORMAT, max_output_tokens=64),
        "success",
    ),
    Probe(
        "responses-max-output-tokens",
        "max_output_tokens reached in a Responses stream gives status incomplete",
        lambda c: _responses(c, f"Continue: {COUNTING}", stream=True),
        "finish-length",
    ),
    Probe(
        "responses-logprobs",
        "Responses API text with its token logprobs (include message.output_text.logprobs)",
        lambda c: _responses(c, include=["message.output_text.logprobs"], top_logprobs=2),
        "success",
    ),
    Probe(
        "responses-image-input",
        "Responses API input_image: read, or declined with a 400 by a model that reads text only",
        lambda c: _responses(c, _with_part(_IMAGE), max_output_tokens=32),
        "success",
    ),
    Probe(
        "responses-file-input",
        "Responses API input_file (a small PDF): read, or declined with a 400 by a text-only model",
        lambda c: _responses(c, _with_part(_FILE), max_output_tokens=32),
        "success",
    ),
    Probe(
        "responses-invalid",
        "a Responses request with max_output_tokens of the wrong type",
        lambda c: _responses(c, max_output_tokens="eight"),
    ),
)
