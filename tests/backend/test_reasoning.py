"""A thinking model's output split into reasoning and content (backend/reasoning.py), on outputs in the
formats their model cards show, fed whole and token by token.

- DeepSeek-R1's model card ("Usage Recommendations"): the answer starts with ``<think>\\n``, the
  thinking ends at ``</think>``, the answer follows; R1 0528 (and llama.cpp's ``thinking_forced_open``)
  ends the prompt with ``<think>\\n`` itself, so the output holds only the closing marker.
- Qwen 3's model card ("Switching Between Thinking and Non-Thinking Mode"): ``<think>...</think>`` then
  two newlines and the answer; with thinking off the template writes an empty ``<think>\\n\\n</think>``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from backend import synthetic
from backend.answers import AnswerBuilder
from backend.app import create_app
from backend.context import ContextOptions
from backend.engine import Event
from backend.reasoning import (
    MARKERS,
    ChoiceReasoning,
    ReasoningSplitter,
    ThinkingMarkers,
    markers_in_template,
)
from backend.request_errors import RequestError
from backend.requests import GenerationRequest, SamplingParams, parse_chat_request
from backend.service import Backend, Prompt
from conformance.judge import judge_response
from tests.support.servers import run_asgi

THINK = MARKERS[0]
R1 = "<think>\nOkay, the user asks for 1+1. That is 2.\n</think>\n\nThe answer is **2**."
R1_FORCED = "Okay, the user asks for 1+1. That is 2.\n</think>\n\nThe answer is **2**."
QWEN3 = "<think>\nThe user greets me. I should greet back.\n</think>\n\nHello! How can I help you today?"
QWEN3_TEMPLATE_PART = (
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
)


def _split(text: str, size: int, *, forced_open: bool = False) -> tuple[str, str]:
    splitter = ReasoningSplitter(THINK, forced_open=forced_open)
    reasoning, content = [], []
    for i in range(0, len(text), size):
        r, c = splitter.feed(text[i : i + size])
        reasoning.append(r)
        content.append(c)
    r, c = splitter.finish()
    return "".join(reasoning) + r, "".join(content) + c


@pytest.mark.parametrize("size", [1, 2, 3, 5, 1000])
def test_thinking_is_split_out_whole_and_token_by_token(size: int) -> None:
    assert _split(R1, size) == ("Okay, the user asks for 1+1. That is 2.\n", "The answer is **2**.")
    assert _split(QWEN3, size) == (
        "The user greets me. I should greet back.\n",
        "Hello! How can I help you today?",
    )
    assert _split(R1_FORCED, size, forced_open=True) == (
        "Okay, the user asks for 1+1. That is 2.\n",
        "The answer is **2**.",
    )


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_text_without_thinking_is_all_content(size: int) -> None:
    assert _split("Hello there", size) == ("", "Hello there")
    # A tag later in an answer is text about the tag, not thinking.
    assert _split("Use <think> tags.", size) == ("", "Use <think> tags.")
    # A partial marker at the very start that never completes is text too.
    assert _split("<thi", size) == ("", "<thi")


def test_unfinished_thinking_stays_reasoning() -> None:
    assert _split("<think>still going", 3) == ("still going", "")


def test_the_prompt_tells_whether_thinking_is_forced_open() -> None:
    assert THINK.forced_open("<|im_start|>assistant\n<think>\n")
    assert not THINK.forced_open("<|im_start|>assistant\n")
    assert not THINK.forced_open("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # thinking off


def test_markers_come_from_the_template() -> None:
    assert markers_in_template(QWEN3_TEMPLATE_PART) == THINK
    command_r7b = "{{ '<|START_THINKING|>' }}{{ message.tool_plan }}{{ '<|END_THINKING|>' }}"
    assert markers_in_template(command_r7b) == ThinkingMarkers("<|START_THINKING|>", "<|END_THINKING|>")
    assert markers_in_template("{{ '<seed:think>' }}x{{ '</seed:think>' }}") == MARKERS[2]
    assert markers_in_template("{% for m in messages %}{{ m['content'] }}{% endfor %}") is None
    assert markers_in_template(None) is None


def test_reasoning_tokens_are_the_tokens_generated_while_thinking() -> None:
    choice = ChoiceReasoning(THINK, "<|im_start|>assistant\n<think>\n")  # forced open
    deltas = [choice.delta(piece, n) for n, piece in enumerate(["Hm", ", two", ".</think>", "\n\n", "2"], 1)]
    deltas.append(choice.end())
    assert deltas == [
        {"reasoning_content": "Hm"},
        {"reasoning_content": ", two"},
        {"reasoning_content": "."},
        {},
        {"content": "2"},
        {},
    ]
    assert choice.tokens == 3
    assert ("".join(choice.reasoning), "".join(choice.content)) == ("Hm, two.", "2")


ASK = {"messages": [{"role": "user", "content": "1+1?"}]}


@pytest.mark.parametrize("effort", ["none", "minimal", "low", "medium", "high", "xhigh", "max", None])
def test_reasoning_effort_is_accepted(effort: str | None) -> None:
    assert parse_chat_request({**ASK, "reasoning_effort": effort}).reasoning_effort == effort


def test_an_unknown_reasoning_effort_is_a_400_naming_it() -> None:
    with pytest.raises(RequestError) as refused:
        parse_chat_request({**ASK, "reasoning_effort": "extreme"})
    assert refused.value.param == "reasoning_effort"
    assert refused.value.status == 400


def _builder(stream: bool) -> AnswerBuilder:
    req = GenerationRequest(
        endpoint="chat",
        model="m",
        prompts=[],
        messages=[],
        sampling=SamplingParams(),
        max_tokens=None,
        stop=[],
        stream=stream,
        include_usage=stream,
    )
    prompt = Prompt([1, 2, 3], "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    return AnswerBuilder(req, [prompt], "m", lambda token: b"", THINK)


@pytest.mark.parametrize("stream", [False, True])
def test_a_last_token_without_text_while_thinking_is_a_reasoning_token(stream: bool) -> None:
    """Stopped by the limit in the middle of a character, the last token's text is held back: its
    event has no text, and its token counts all the same (the stream once counted it as no reasoning)."""
    builder = _builder(stream=stream)
    events = [
        Event(0, text=piece, completion_tokens=n) for n, piece in enumerate(["<think>", "\nHm", "m"], 1)
    ]
    events.append(Event(0, finish_reason="length", completion_tokens=4))
    if stream:
        for event in events:
            builder.chunks(event)
        usage = builder.usage_chunk()["usage"]
    else:
        for event in events:
            builder.add(event)
        usage = builder.body()["usage"]
    assert usage["completion_tokens"] == 4
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 3}  # all but the opening marker


def _events() -> list[Event]:
    pieces = ["<think>", "\nHm", ".</", "think>", "\n\nHello", "!"]
    events = [Event(0, text=piece, completion_tokens=n) for n, piece in enumerate(pieces, 1)]
    events.append(Event(0, finish_reason="stop", completion_tokens=len(pieces)))
    return events


def test_a_streamed_chat_answer_carries_reasoning_deltas_and_reasoning_tokens() -> None:
    builder = _builder(stream=True)
    chunks = [chunk for event in _events() for chunk in builder.chunks(event)]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Hm."
    assert "".join(d.get("content", "") for d in deltas) == "Hello!"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    usage = builder.usage_chunk()["usage"]
    assert usage["completion_tokens"] == 6
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 3}


def test_a_whole_chat_answer_carries_reasoning_content_and_reasoning_tokens() -> None:
    builder = _builder(stream=False)
    for event in _events():
        builder.add(event)
    body = builder.body()
    message = body["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == ("Hm.", "Hello!")
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}


# ChatML whose generation prompt opens the thinking, as DeepSeek R1 0528's does: the synthetic model's
# random output then is all reasoning (it never writes the closing marker).
THINKING_CHATML = (
    # As gpt-oss's template reads the request's reasoning_effort: into the system turn.
    "{% if reasoning_effort is defined %}"
    "{{ '<|im_start|>system\\nReasoning: ' + reasoning_effort + '<|im_end|>\\n' }}{% endif %}"
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'].split('</think>')[-1] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def thinking_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    spec = synthetic.SyntheticSpec(chat_template=THINKING_CHATML)
    path = synthetic.write_synthetic(tmp_path_factory.mktemp("models") / "thinking.gguf", spec)
    backend = Backend.open(str(path), context=ContextOptions(ctx_size=512, parallel=1, threads=2))
    try:
        with run_asgi(create_app(backend)) as url:
            yield url
    finally:
        backend.close()


@pytest.mark.parametrize("stream", [False, True])
def test_a_synthetic_thinking_model_answers_in_reasoning_content(thinking_url: str, stream: bool) -> None:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
        "ignore_eos": True,
        "reasoning_effort": "low",
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    response = httpx.post(thinking_url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    if stream:
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: {")]
        chunks = [json.loads(event) for event in events]
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
        reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
        content = "".join(d.get("content") or "" for d in deltas)
        usage = chunks[-1]["usage"]
    else:
        answer = response.json()
        reasoning = answer["choices"][0]["message"].get("reasoning_content", "")
        content = answer["choices"][0]["message"]["content"]
        usage = answer["usage"]
    assert reasoning
    assert content == ""
    assert usage["completion_tokens_details"]["reasoning_tokens"] == usage["completion_tokens"] > 0
    request = {"method": "POST", "path": "/v1/chat/completions", "body": body}
    headers = {"content-type": response.headers["content-type"]}
    verdict = judge_response(response.content, request=request, status=200, headers=headers)
    assert [f.message for f in verdict.errors] == []


def test_the_reasoning_effort_reaches_the_chat_template(thinking_url: str) -> None:
    def prompt_tokens(**extra: Any) -> int:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, **extra}
        response = httpx.post(thinking_url + "/v1/chat/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        return int(response.json()["usage"]["prompt_tokens"])

    plain = prompt_tokens()
    # The template's system turn, "Reasoning: high", is in the prompt only when the request says so.
    assert prompt_tokens(reasoning_effort="high") > plain
    assert prompt_tokens(reasoning_effort="high", tools=[_TOOL]) > prompt_tokens(tools=[_TOOL])


_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


def test_an_unknown_reasoning_effort_is_answered_400(thinking_url: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "reasoning_effort": "extreme"}
    response = httpx.post(thinking_url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "reasoning_effort"
