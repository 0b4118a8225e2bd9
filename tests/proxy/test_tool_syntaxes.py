"""Every tool-call syntax the project reads (conformance/tool_formats/catalog.py), left as text by an
upstream (Q79), repaired into ``tool_calls``: one sample answer each (tests/support/tool_syntax_samples.py),
streamed split at every position and one character a chunk, as a body, in the reasoning, and through
the real proxy app on the chat and Responses routes; and what must stay text (prose, functions not
offered, arguments not an object, ``tool_choice: "none"``, no tools, ambiguous dotted names, strict
arguments off their schema), with markup that did not parse counted (``tool-text-unparsed``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conformance.judge import judge_response
from conformance.request_info import RequestInfo
from conformance.sse import encode_data
from proxy.normalizer import StreamNormalizer, normalize_body
from proxy.normalizer.repairs import TOOL_TEXT_UNPARSED, Repairs
from tests.support.responses_checks import check_events, check_response, judged, sse_events
from tests.support.tool_syntax_samples import CALLS, SAMPLES, TOOLS, Sample

from .conftest import metric, serve_proxy
from .rawserver import Record, chat_requests, chunk_payload, http_chunk, json_answer, raw_server, sse_head

BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS}
IDS = [sample.syntax for sample in SAMPLES]
USAGE = {"prompt_tokens": 5, "completion_tokens": 40, "total_tokens": 45}


def _tools(*names: str, strict: bool = False) -> list[dict[str, Any]]:
    """Function tools named ``names``, each taking a required string ``city`` (and integer ``days``)."""
    parameters = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    function: dict[str, Any] = {"parameters": parameters, **({"strict": True} if strict else {})}
    return [{"type": "function", "function": {"name": name, **function}} for name in names]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}


def _stream(
    pieces: list[str], body: dict[str, Any], field: str = "content"
) -> tuple[list[dict[str, Any]], Repairs]:
    """The proxy's chunks for an upstream that streamed ``pieces`` under ``field``, then ``stop``."""
    normalizer = StreamNormalizer(RequestInfo.from_body("chat", {**body, "stream": True}))
    out: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        out += normalizer.feed_payload(
            _chunk({"role": "assistant", field: piece} if i == 0 else {field: piece})
        )
    out += normalizer.feed_payload(_chunk({}, "stop"))
    normalizer.upstream_done = True
    out += normalizer.close()
    return out, normalizer.repairs


def _body(text: str, body: dict[str, Any], field: str = "content") -> tuple[dict[str, Any], Repairs]:
    """The proxy's body for an upstream that answered ``text`` under ``field``, finished ``stop``."""
    message: dict[str, Any] = {"role": "assistant", "content": None, field: text}
    upstream = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": USAGE,
    }
    repairs = Repairs()
    return normalize_body(upstream, RequestInfo.from_body("chat", body), repairs=repairs), repairs


def _errors(raw: bytes, body: dict[str, Any], stream: bool) -> list[str]:
    """The judge's errors on the proxy's chat answer."""
    request = {"method": "POST", "path": "/v1/chat/completions", "body": {**body, "stream": stream}}
    content_type = "text/event-stream" if stream else "application/json"
    verdict = judge_response(raw, request=request, status=200, headers={"content-type": content_type})
    return [f"{f.rule}: {f.message}" for f in verdict.errors]


def _raw_stream(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(encode_data(json.dumps(c).encode()) for c in chunks) + b"data: [DONE]\n\n"


def _deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in chunks if c.get("choices")]


def _joined(deltas: list[dict[str, Any]], key: str) -> str:
    return "".join(d.get(key) or "" for d in deltas)


def _assert_calls(calls: list[dict[str, Any]], *, streamed: bool) -> None:
    """``calls`` are every sample's calls, whole, each an OpenAI function call."""
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == CALLS
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls), calls
    assert len({c["id"] for c in calls}) == len(calls)
    if streamed:
        assert [c["index"] for c in calls] == list(range(len(CALLS)))


def _assert_streamed(pieces: list[str], sample: Sample, field: str = "content") -> list[dict[str, Any]]:
    """The sample streamed as ``pieces`` under ``field`` comes out as its calls and the text around them;
    the proxy's chunks."""
    chunks, repairs = _stream(pieces, BODY, field)
    deltas = _deltas(chunks)
    _assert_calls([c for d in deltas for c in d.get("tool_calls", ())], streamed=True)
    if field == "content":
        assert _joined(deltas, "content").strip() == sample.content
        assert not any(d.get("reasoning_content") for d in deltas)
    else:
        assert _joined(deltas, "reasoning_content").strip() == sample.content
        assert not any(d.get("content") for d in deltas)
    assert [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")][-1] == "tool_calls"
    assert repairs["Q79"] == len(CALLS)
    assert TOOL_TEXT_UNPARSED not in repairs
    return chunks


CLOSED = [s for s in SAMPLES if s.syntax not in ("mistral", "granite", "llama3")]
"""The syntaxes whose calls end with a marker, after which a model may write on (Mistral's and Granite
3.x's calls run to the answer's end; a Llama 3.x call is the whole answer)."""
AFTER = "\nI will wait for the results."


@pytest.mark.parametrize("sample", CLOSED, ids=[s.syntax for s in CLOSED])
def test_text_after_the_calls_stays_content_split_anywhere(sample: Sample) -> None:
    text = sample.text + AFTER
    expected = f"{sample.content}{AFTER}".split()
    for cut in range(len(text) + 1):
        chunks, repairs = _stream([text[:cut], text[cut:]], BODY)
        deltas = _deltas(chunks)
        _assert_calls([c for d in deltas for c in d.get("tool_calls", ())], streamed=True)
        assert _joined(deltas, "content").split() == expected, cut
        assert repairs["Q79"] == len(CALLS)
    out, _ = _body(text, BODY)
    _assert_calls(out["choices"][0]["message"]["tool_calls"], streamed=False)
    assert out["choices"][0]["message"]["content"].split() == expected
    assert _errors(json.dumps(out).encode(), BODY, stream=False) == []


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_a_sample_split_in_two_anywhere_streams_its_calls(sample: Sample) -> None:
    text = sample.text
    for cut in range(1, len(text)):
        chunks = _assert_streamed([text[:cut], text[cut:]], sample)
        assert _errors(_raw_stream(chunks), BODY, stream=True) == [], cut


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_a_sample_one_character_a_chunk_streams_its_calls(sample: Sample) -> None:
    chunks = _assert_streamed(list(sample.text), sample)
    assert _errors(_raw_stream(chunks), BODY, stream=True) == []


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_a_sample_as_a_body_gets_its_calls(sample: Sample) -> None:
    out, repairs = _body(sample.text, BODY)
    choice = out["choices"][0]
    _assert_calls(choice["message"]["tool_calls"], streamed=False)
    assert (choice["message"]["content"] or "").strip() == sample.content
    assert choice["finish_reason"] == "tool_calls"
    assert repairs["Q79"] == len(CALLS)
    assert TOOL_TEXT_UNPARSED not in repairs
    assert _errors(json.dumps(out).encode(), BODY, stream=False) == []


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_a_sample_in_the_reasoning_gets_its_calls_and_the_reasoning_around_them(sample: Sample) -> None:
    """A thinking model whose server never saw its reasoning end: the calls written in it."""
    size = 5
    chunks = _assert_streamed(
        [sample.text[i : i + size] for i in range(0, len(sample.text), size)], sample, "reasoning_content"
    )
    assert _errors(_raw_stream(chunks), BODY, stream=True) == []
    chunks = _assert_streamed(list(sample.text), sample, "reasoning_content")
    out, repairs = _body(sample.text, BODY, "reasoning_content")
    message = out["choices"][0]["message"]
    _assert_calls(message["tool_calls"], streamed=False)
    assert (message.get("reasoning_content") or "").strip() == sample.content
    assert message["content"] is None
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert repairs["Q79"] == len(CALLS)
    assert _errors(json.dumps(out).encode(), BODY, stream=False) == []


def test_a_call_drafted_in_the_reasoning_and_made_in_the_content_is_one_call() -> None:
    """A thinking model that wrote its call in its reasoning and then made it: the client gets the call
    once (an agent would run it twice), and the reasoning keeps its draft as the model wrote it."""
    sample = next(s for s in SAMPLES if s.syntax == "hermes")
    draft = "I will call it: " + sample.text
    normalizer = StreamNormalizer(RequestInfo.from_body("chat", {**BODY, "stream": True}))
    out: list[dict[str, Any]] = []
    for piece in [draft[i : i + 7] for i in range(0, len(draft), 7)]:
        out += normalizer.feed_payload(_chunk({"reasoning_content": piece}))
    for piece in [sample.text[i : i + 7] for i in range(0, len(sample.text), 7)]:
        out += normalizer.feed_payload(_chunk({"content": piece}))
    out += normalizer.feed_payload(_chunk({}, "stop"))
    normalizer.upstream_done = True
    out += normalizer.close()
    deltas = _deltas(out)
    _assert_calls([c for d in deltas for c in d.get("tool_calls", ())], streamed=True)
    assert _joined(deltas, "reasoning_content") == draft
    assert normalizer.repairs["Q79"] == len(CALLS)
    message = {"role": "assistant", "content": sample.text, "reasoning_content": draft}
    upstream = {"id": "x", "object": "chat.completion", "created": 1, "model": "m", "usage": USAGE}
    upstream["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
    body = normalize_body(upstream, RequestInfo.from_body("chat", BODY), repairs=Repairs())
    _assert_calls(body["choices"][0]["message"]["tool_calls"], streamed=False)
    assert body["choices"][0]["message"]["reasoning_content"] == draft


# --- what stays text ---


def _assert_text(text: str, body: dict[str, Any], *, unparsed: bool | None = None) -> None:
    """``text`` goes out as it came, streamed (in 7-character pieces and one a chunk) and as a body:
    no call, finish ``stop``, no Q79; ``unparsed``: whether ``tool-text-unparsed`` is set (None: either)."""
    for size in (7, 1):
        chunks, repairs = _stream([text[i : i + size] for i in range(0, len(text), size)], body)
        deltas = _deltas(chunks)
        assert _joined(deltas, "content") == text
        assert not any("tool_calls" in d for d in deltas)
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert "Q79" not in repairs
        if unparsed is not None:
            assert (TOOL_TEXT_UNPARSED in repairs) is unparsed, (size, dict(repairs))
    out, repairs = _body(text, body)
    message = out["choices"][0]["message"]
    assert message["content"] == text
    assert "tool_calls" not in message
    assert out["choices"][0]["finish_reason"] == "stop"
    assert "Q79" not in repairs
    if unparsed is not None:
        assert (TOOL_TEXT_UNPARSED in repairs) is unparsed, dict(repairs)


@pytest.mark.parametrize(
    "text",
    [
        "The tag <tool_call> starts a call; what follows it is JSON.",
        "Use [TOOL_CALLS] like this: the name, then [ARGS], then the arguments.",
        "Write <tool_call> and </tool_call> around a call.",
    ],
)
def test_prose_that_mentions_a_marker_stays_text(text: str) -> None:
    _assert_text(text, BODY)


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_calls_of_functions_not_offered_stay_text(sample: Sample) -> None:
    _assert_text(sample.text, {**BODY, "tools": _tools("get_stock", "get_news")})


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
@pytest.mark.parametrize("asked", ["tool_choice none", "no tools"])
def test_without_tools_to_call_every_sample_stays_text(sample: Sample, asked: str) -> None:
    body = (
        {**BODY, "tool_choice": "none"}
        if asked == "tool_choice none"
        else {"model": "m", "messages": BODY["messages"]}
    )
    _assert_text(sample.text, body, unparsed=False)


NOT_AN_OBJECT = {
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": ["Paris", 2]}\n</tool_call>',
    "mistral": '[TOOL_CALLS]get_weather[ARGS]["Paris", 2]',
    "mistral-v3": '[TOOL_CALLS] [{"name": "get_weather", "arguments": "Paris"}]',
    "granite": '<|tool_call|>[{"name": "get_weather", "arguments": 2}]',
    "kimi": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>"Paris"<|tool_call_end|><|tool_calls_section_end|>',
    "harmony": "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>["Paris"]<|call|>',
    "llama3": '{"name": "get_weather", "parameters": ["Paris", 2]}',
}


@pytest.mark.parametrize("text", NOT_AN_OBJECT.values(), ids=NOT_AN_OBJECT.keys())
def test_arguments_that_are_not_an_object_stay_text(text: str) -> None:
    _assert_text(text, BODY)


UNPARSED = {
    "hermes, not JSON": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}</tool_call>',
    "hermes, not offered": '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
    "qwen-xml, never closed function": (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</tool_call>"
    ),
    "mistral, not JSON": "[TOOL_CALLS]get_weather[ARGS]{city: Paris}",
    "kimi, not JSON": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    "<|tool_call_argument_begin|>{city<|tool_call_end|><|tool_calls_section_end|>",
}


@pytest.mark.parametrize("text", UNPARSED.values(), ids=UNPARSED.keys())
def test_markup_that_opened_a_call_and_did_not_parse_is_counted(text: str) -> None:
    _assert_text("Let me look. " + text, BODY, unparsed=True)


def test_plain_text_is_not_counted_unparsed() -> None:
    _assert_text("It is sunny in Paris [today] <b>and</b> tomorrow.", BODY, unparsed=False)


DOTTED = '<tool_call>\n{"name": "weather.get", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_a_dotted_name_is_mapped_to_the_one_flattened_name_offered() -> None:
    body = {**BODY, "tools": _tools("weather__get", "get_time")}
    out, repairs = _body(DOTTED, body)
    (call,) = out["choices"][0]["message"]["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == (
        "weather__get",
        {"city": "Paris"},
    )
    assert repairs["Q79"] == 1
    assert _errors(json.dumps(out).encode(), body, stream=False) == []
    chunks, repairs = _stream([DOTTED[i : i + 4] for i in range(0, len(DOTTED), 4)], body)
    calls = [c for d in _deltas(chunks) for c in d.get("tool_calls", ())]
    assert [c["function"]["name"] for c in calls] == ["weather__get"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert _errors(_raw_stream(chunks), body, stream=True) == []


def test_a_dotted_name_two_offered_names_fit_stays_text() -> None:
    _assert_text(DOTTED, {**BODY, "tools": _tools("weather__get", "weather_get")})


def test_a_strict_tools_arguments_off_its_schema_stay_text() -> None:
    off_schema = '<tool_call>\n{"name": "get_weather", "arguments": {"city": 7, "wind": true}}\n</tool_call>'
    _assert_text(off_schema, {**BODY, "tools": _tools("get_weather", strict=True)})
    fits = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    out, _ = _body(fits, {**BODY, "tools": _tools("get_weather", strict=True)})  # the same tool, obeyed
    assert [c["function"]["name"] for c in out["choices"][0]["message"]["tool_calls"]] == ["get_weather"]


# --- through the real proxy app ---


def _upstream(text: str, pieces: int = 6) -> Any:
    """A chat upstream that answers every request with ``text`` as its content: streamed over
    ``pieces`` events, or whole; any other path is a 404."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        async for body in chat_requests(reader, writer):
            record.requests += 1
            if not body.get("stream"):
                message = {"role": "assistant", "content": text}
                answer = {"id": "x", "object": "chat.completion", "created": 1, "model": "m", "usage": USAGE}
                answer["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
                writer.write(json_answer(answer))
                await writer.drain()
                continue
            size = -(-len(text) // pieces)
            parts = [text[i : i + size] for i in range(0, len(text), size)]
            events = [chunk_payload({"role": "assistant", "content": parts[0]})]
            events += [chunk_payload({"content": part}) for part in parts[1:]]
            events.append(chunk_payload({}, "stop"))
            writer.write(sse_head())
            for event in events:  # one read each, as a token-by-token server sends
                writer.write(http_chunk(b"data: " + json.dumps(event).encode() + b"\n\n"))
                await writer.drain()
            writer.write(http_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()

    return handler


@contextlib.contextmanager
def _proxy(text: str) -> Iterator[str]:
    with raw_server(_upstream(text)) as (upstream, _), serve_proxy(upstream) as (url, _app):
        yield url


def _chat_calls(response: httpx.Response, stream: bool) -> tuple[list[dict[str, Any]], str, str]:
    """The calls, the content and the finish reason of the proxy's chat answer."""
    if not stream:
        choice = response.json()["choices"][0]
        message = choice["message"]
        return message.get("tool_calls") or [], message["content"] or "", choice["finish_reason"]
    events = [json.loads(b[6:]) for b in response.text.split("\n\n") if b.startswith("data: {")]
    deltas = _deltas(events)
    finish = [c["choices"][0]["finish_reason"] for c in events if c.get("choices")][-1]
    return [c for d in deltas for c in d.get("tool_calls", ())], _joined(deltas, "content"), finish


RESPONSES_TOOLS = [{"type": "function", **tool["function"]} for tool in TOOLS]


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_through_the_proxy_a_sample_is_calls_on_chat_and_responses(sample: Sample) -> None:
    with _proxy(sample.text) as url:
        for stream in (True, False):
            body = {**BODY, "stream": stream}
            response = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
            assert response.status_code == 200, response.text[:500]
            assert _errors(response.content, BODY, stream) == []
            calls, content, finish = _chat_calls(response, stream)
            _assert_calls(calls, streamed=stream)
            assert (content.strip(), finish) == (sample.content, "tool_calls")

            asked = {"model": "m", "input": "Weather?", "tools": RESPONSES_TOOLS, "stream": stream}
            response = httpx.post(url + "/v1/responses", json=asked, timeout=30)
            assert response.status_code == 200, response.text[:500]
            judged(response.content, asked, response.status_code, response.headers)
            if stream:
                events = sse_events(response.content)
                check_events(events)
                assert events[-1]["type"] == "response.completed"
                final = events[-1]["response"]
                done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
                assert [i for i in done if i["type"] == "function_call"] == [
                    i for i in final["output"] if i["type"] == "function_call"
                ]
            else:
                final = response.json()
                check_response(final)
            assert final["status"] == "completed"
            items = [i for i in final["output"] if i["type"] == "function_call"]
            assert [(i["name"], json.loads(i["arguments"])) for i in items] == CALLS
            assert all(i["status"] == "completed" and i["call_id"] for i in items), items
            texts = [p["text"] for i in final["output"] if i["type"] == "message" for p in i["content"]]
            assert "".join(texts).strip() == sample.content


@pytest.mark.slow
def test_through_the_proxy_markup_that_did_not_parse_is_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = "Let me look. " + UNPARSED["hermes, not JSON"]
    caplog.set_level(logging.INFO, logger="conformant.access")
    with _proxy(text) as url:
        for stream in (True, False):
            response = httpx.post(url + "/v1/chat/completions", json={**BODY, "stream": stream}, timeout=30)
            assert response.status_code == 200, response.text[:500]
            calls, content, finish = _chat_calls(response, stream)
            assert (calls, content, finish) == ([], text, "stop")
        asked = {"model": "m", "input": "Weather?", "tools": RESPONSES_TOOLS}
        assert httpx.post(url + "/v1/responses", json=asked, timeout=30).status_code == 200
        page = httpx.get(url + "/metrics", timeout=10).text
    assert metric(page, "conformant_tool_text_unparsed_total", endpoint="chat") == 2
    assert metric(page, "conformant_tool_text_unparsed_total", endpoint="responses") == 1
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "conformant.access"]
    logged = [(line["path"], line["tool_text_unparsed"]) for line in lines if line["path"] != "/metrics"]
    assert logged == [
        ("/v1/chat/completions", True),
        ("/v1/chat/completions", True),
        ("/v1/responses", True),
    ]
    assert all(TOOL_TEXT_UNPARSED in line["repairs"] for line in lines if line["path"] != "/metrics")


@pytest.mark.slow
def test_through_the_proxy_a_clean_answer_is_not_counted_unparsed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="conformant.access")
    with _proxy(SAMPLES[0].text) as url:
        for stream in (True, False):
            response = httpx.post(url + "/v1/chat/completions", json={**BODY, "stream": stream}, timeout=30)
            assert response.status_code == 200, response.text[:500]
        page = httpx.get(url + "/metrics", timeout=10).text
    with pytest.raises(AssertionError, match="not in /metrics"):
        metric(page, "conformant_tool_text_unparsed_total", endpoint="chat")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "conformant.access"]
    assert [line["tool_text_unparsed"] for line in lines if line["path"] == "/v1/chat/completions"] == [
        False
    ] * 2
