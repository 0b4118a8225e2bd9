"""``/v1/responses`` through the proxy as the Open Responses spec (2026-04-24) requires it (issue 38).

Its compliance suite failed all 9 of its tests on ``conformant serve``: ``temperature``, ``top_p`` and
``top_logprobs`` null, ``presence_penalty``/``frequency_penalty`` missing, function tools without
``strict``. A Response now states the sampling it was generated with: the client's values (sent on), else
the upstream's stated defaults (a llama.cpp server's ``/props``), else the API's defaults, which the proxy
then sends, so that what the Response says is what the model used. Files and images: a text file is read
as text, other files go on as chat ``file`` parts, a URL or id is refused; an image to a llama.cpp model
without a projector is OpenAI's 400 before sending (llama-server answered a 500).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conformance.judge import judge_response
from conformance.rules.context import OPEN_RESPONSES_PROFILE
from tests.support.responses_checks import judged, sse_events
from tests.support.servers import run_asgi

from .conftest import run_proxy
from .llama_server_upstream import LlamaServer
from .rawserver import chunk, raw_server, streaming

TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
}
SNAPSHOTS = ("response.created", "response.in_progress", "response.completed", "response.incomplete")


@pytest.fixture
def openai_upstream() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    handler = streaming(chunk("Hi"), chunk(" there", "stop"), seen=seen)
    with raw_server(handler) as (upstream, _), run_proxy(upstream) as url:
        yield url, seen


def _snapshots(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["response"] for e in events if e["type"] in SNAPSHOTS]


def test_every_snapshot_states_the_api_defaults_it_asked_for(
    openai_upstream: tuple[str, list[dict[str, Any]]],
) -> None:
    """An OpenAI-compatible upstream states no defaults: the proxy asks with the API's and says so."""
    url, seen = openai_upstream
    request = {"model": "m", "input": "Hi", "stream": True, "tools": [TOOL]}
    response = httpx.post(url + "/v1/responses", json=request, timeout=10)
    assert response.status_code == 200, response.text
    judged(response.content, request, response.status_code, response.headers)
    for snapshot in _snapshots(sse_events(response.content)):
        assert (snapshot["temperature"], snapshot["top_p"]) == (1.0, 1.0)
        assert (snapshot["presence_penalty"], snapshot["frequency_penalty"], snapshot["top_logprobs"]) == (
            0.0,
            0.0,
            0,
        )
        assert snapshot["tools"][0] | {} == {**TOOL, "description": None, "strict": None}
    sent = seen[0]
    assert (sent["temperature"], sent["top_p"], sent["presence_penalty"], sent["frequency_penalty"]) == (
        1.0,
        1.0,
        0.0,
        0.0,
    )


def test_the_clients_sampling_is_sent_on_and_echoed(
    openai_upstream: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = openai_upstream
    asked = {"temperature": 0.3, "top_p": 0.5, "presence_penalty": 1.5, "frequency_penalty": -0.5}
    request = {"model": "m", "input": "Hi", "top_logprobs": 2, **asked}
    response = httpx.post(url + "/v1/responses", json=request, timeout=10)
    assert response.status_code == 200, response.text
    body = response.json()
    judged(response.content, request, 200, response.headers)
    assert {key: body[key] for key in asked} == asked
    assert body["top_logprobs"] == 2
    assert {key: seen[0][key] for key in asked} == asked


def test_a_penalty_out_of_range_is_refused_naming_it(
    openai_upstream: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = openai_upstream
    response = httpx.post(
        url + "/v1/responses", json={"model": "m", "input": "Hi", "presence_penalty": 3}, timeout=10
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "presence_penalty"
    assert seen == []


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"service_tier": "ultra"}, "service_tier"),
        ({"max_tool_calls": -1}, "max_tool_calls"),
        ({"prompt_cache_key": "k" * 65}, "prompt_cache_key"),
        ({"include": ["reasoning.everything"]}, "include[0]"),
    ],
)
def test_values_the_spec_bounds_are_refused_naming_them(
    openai_upstream: tuple[str, list[dict[str, Any]]], extra: dict[str, Any], param: str
) -> None:
    """Black-box testing found each served: a client would learn of its mistake only from another
    server."""
    url, seen = openai_upstream
    response = httpx.post(url + "/v1/responses", json={"model": "m", "input": "Hi", **extra}, timeout=10)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert seen == []


def test_null_tools_choice_text_and_others_the_spec_allows_are_served(
    openai_upstream: tuple[str, list[dict[str, Any]]],
) -> None:
    """Open Responses takes null for these (its compliance suite's clients send them): they were 400s
    ("Invalid type for 'tools': expected an array, but got null instead")."""
    url, seen = openai_upstream
    nulls = dict.fromkeys(("tools", "tool_choice", "text", "reasoning", "metadata", "max_tool_calls"))
    given = {**nulls, "service_tier": "flex", "prompt_cache_key": "k" * 64, "include": []}
    response = httpx.post(url + "/v1/responses", json={"model": "m", "input": "Hi", **given}, timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["output"][0]["content"][0]["text"] == "Hi there"
    assert "tools" not in seen[0]
    assert "tool_choice" not in seen[0]


@pytest.fixture
def llama_server() -> Iterator[tuple[str, LlamaServer]]:
    fake = LlamaServer()
    fake.sampling = {"temperature": 0.6, "top_p": 0.9, "presence_penalty": 0.25, "frequency_penalty": 0.0}
    with run_asgi(fake.app) as upstream, run_proxy(upstream, upstream_kind="llamacpp") as url:
        yield url, fake


def test_a_llama_cpp_servers_own_defaults_are_stated_and_not_overridden(
    llama_server: tuple[str, LlamaServer],
) -> None:
    """``llama-server --temp 0.6`` samples at 0.6 where a request says nothing: the Response says 0.6,
    and the proxy does not send the API's 1.0 over the user's setting."""
    url, fake = llama_server
    request = {"model": "m", "input": "Hi", "max_output_tokens": 16}
    response = httpx.post(url + "/v1/responses", json=request, timeout=10)
    assert response.status_code == 200, response.text
    body = response.json()
    judged(response.content, request, 200, response.headers)
    assert (body["temperature"], body["top_p"], body["presence_penalty"]) == (0.6, 0.9, 0.25)
    sent = fake.bodies("/v1/chat/completions")[0]
    assert "temperature" not in sent
    assert "presence_penalty" not in sent


def test_an_image_to_a_model_without_a_projector_is_a_400_before_sending(
    llama_server: tuple[str, LlamaServer],
) -> None:
    """llama-server answers an image to a text-only model with a 500 ("image input is not supported");
    its /props says ``modalities.vision: false``."""
    url, fake = llama_server
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
    content = [{"type": "input_text", "text": "What is it?"}, image]
    request = {"model": "m", "input": [{"type": "message", "role": "user", "content": content}]}
    response = httpx.post(url + "/v1/responses", json=request, timeout=10)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "image_url is only supported by certain models" in error["message"]
    assert error["type"] == "invalid_request_error"
    assert fake.bodies("/v1/chat/completions") == []
    # The same on chat, naming the part.
    chat = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "x"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                ],
            }
        ],
    }
    refused = httpx.post(url + "/v1/chat/completions", json=chat, timeout=10)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "messages[0].content[1]"


def test_an_image_goes_on_to_a_model_that_reads_images(llama_server: tuple[str, LlamaServer]) -> None:
    url, fake = llama_server
    fake.vision = True
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
    request = {"model": "m", "input": [{"type": "message", "role": "user", "content": [image]}]}
    response = httpx.post(url + "/v1/responses", json=request, timeout=10)
    assert response.status_code == 200, response.text
    (sent,) = fake.bodies("/v1/chat/completions")
    assert sent["messages"][0]["content"][0]["type"] == "image_url"


def _file(data: bytes, media: str, name: str) -> dict[str, Any]:
    encoded = base64.b64encode(data).decode()
    return {"type": "input_file", "filename": name, "file_data": f"data:{media};base64,{encoded}"}


def _with_file(part: dict[str, Any]) -> dict[str, Any]:
    content = [{"type": "input_text", "text": "Summarize the file."}, part]
    return {"model": "m", "input": [{"type": "message", "role": "user", "content": content}]}


def test_a_text_file_is_read_as_text(openai_upstream: tuple[str, list[dict[str, Any]]]) -> None:
    url, seen = openai_upstream
    request = _with_file(_file("line one\nligne deux é\n".encode(), "text/plain", "notes.txt"))
    response = httpx.post(url + "/v1/responses", json=request, timeout=10)
    assert response.status_code == 200, response.text
    assert (
        seen[0]["messages"][0]["content"] == "Summarize the file.[file: notes.txt]\nline one\nligne deux é\n"
    )


def test_a_binary_file_goes_on_as_a_chat_file_part(openai_upstream: tuple[str, list[dict[str, Any]]]) -> None:
    url, seen = openai_upstream
    part = _file(b"%PDF-1.1\n\xff\xfe", "application/pdf", "paper.pdf")
    response = httpx.post(url + "/v1/responses", json=_with_file(part), timeout=10)
    assert response.status_code == 200, response.text
    sent = seen[0]["messages"][0]["content"][1]
    assert sent == {"type": "file", "file": {"filename": "paper.pdf", "file_data": part["file_data"]}}


def test_file_data_that_is_no_base64_is_a_400_that_says_so(
    openai_upstream: tuple[str, list[dict[str, Any]]],
) -> None:
    """It was answered as a file the model cannot read, which misled (the black-box test)."""
    url, seen = openai_upstream
    part = {"type": "input_file", "filename": "a.txt", "file_data": "data:text/plain;base64,!!!notbase64"}
    response = httpx.post(url + "/v1/responses", json=_with_file(part), timeout=10)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("input[0].content[1].file_data", "invalid_value")
    assert "base64" in error["message"]
    assert seen == []


@pytest.mark.parametrize("key", ["file_url", "file_id"])
def test_a_file_by_url_or_id_is_refused(openai_upstream: tuple[str, list[dict[str, Any]]], key: str) -> None:
    """The proxy fetches no URL a client names and keeps no uploaded files."""
    url, seen = openai_upstream
    value = "http://169.254.169.254/latest/meta-data" if key == "file_url" else "file-abc"
    response = httpx.post(
        url + "/v1/responses", json=_with_file({"type": "input_file", key: value}), timeout=10
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == f"input[0].content[1].{key}"
    assert "169.254" not in error["message"]
    assert seen == []


def test_the_profile_finds_what_the_suite_finds_in_a_response_without_the_fields() -> None:
    """What ``check`` reports of a server that echoes null sampling (the proxy before this change,
    llama-server's own route): the same fields the compliance suite named."""
    response = {
        "id": "resp_1", "object": "response", "created_at": 1, "completed_at": 2, "status": "completed",
        "incomplete_details": None, "model": "m", "previous_response_id": None, "instructions": None,
        "output": [], "error": None, "tools": [{"type": "function", "name": "f", "parameters": {}}],
        "tool_choice": "auto", "truncation": "disabled", "parallel_tool_calls": True,
        "text": {"format": {"type": "text"}}, "top_p": None, "temperature": None, "top_logprobs": None,
        "reasoning": None,
        "usage": {"input_tokens": 1, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0,
                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 1},
        "max_output_tokens": None, "max_tool_calls": None, "store": True,
        "background": False, "service_tier": "default", "metadata": {}, "safety_identifier": None,
        "prompt_cache_key": None,
    }  # fmt: skip
    request = {"method": "POST", "path": "/v1/responses", "body": {"model": "m", "input": "Hi"}}
    body = json.dumps(response).encode()
    headers = {"content-type": "application/json"}
    strict = judge_response(
        body, request=request, status=200, headers=headers, profile=OPEN_RESPONSES_PROFILE
    )
    messages = {f.rule: f.message for f in strict.errors}
    assert set(messages) == {"open-responses-response-field", "open-responses-tool-field"}
    for name in (
        "top_p is null",
        "presence_penalty missing",
        "frequency_penalty missing",
        "temperature is null",
    ):
        assert name in messages["open-responses-response-field"]
    assert "strict missing" in messages["open-responses-tool-field"]
    plain = judge_response(body, request=request, status=200, headers=headers)
    assert not [f for f in plain.errors if f.rule.startswith("open-responses")]


def _call_chunk() -> bytes:
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{}"},
    }
    choice = {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}
    payload = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


@pytest.mark.parametrize(("calls", "phase"), [(False, "final_answer"), (True, "commentary")])
def test_a_finished_message_has_its_phase(calls: bool, phase: str) -> None:
    """Open Responses 2026-04-24's ``phase``: text written before a tool call is ``commentary``, the last
    word ``final_answer`` (clients of gpt-5.3-codex and later send it back)."""
    parts = [chunk("Let me look."), _call_chunk()] if calls else [chunk("Sunny.", "stop")]
    request = {"model": "m", "input": "Weather?", "tools": [TOOL], "stream": True}
    with raw_server(streaming(*parts)) as (upstream, _), run_proxy(upstream) as url:
        streamed = httpx.post(url + "/v1/responses", json=request, timeout=10)
        whole = httpx.post(url + "/v1/responses", json={**request, "stream": False}, timeout=10).json()
    judged(streamed.content, request, streamed.status_code, streamed.headers)
    events = sse_events(streamed.content)
    done = [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "message"
    ]
    final = events[-1]["response"]["output"]
    assert [d["phase"] for d in done] == [phase]
    assert [item.get("phase") for item in final if item["type"] == "message"] == [phase]
    assert [item.get("phase") for item in whole["output"] if item["type"] == "message"] == [phase]
