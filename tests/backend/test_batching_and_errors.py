"""Acceptance 3: batched outputs equal solo outputs at temperature 0; cancellation frees the slot within
one decode step; invalid parameters, over-long prompts and a full queue get the right errors."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from backend.engine import Event, Job
from backend.requests import SamplingParams
from backend.sampling import Sampler
from backend.service import Backend
from tests.backend.conftest import CTX_PER_SLOT, RecordingTransport, assert_conformant

pytestmark = pytest.mark.backend

PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "The best way to learn"]


def test_concurrent_outputs_equal_solo_outputs(client: Any, recorder: RecordingTransport) -> None:
    def complete(prompt: str) -> str:
        r = client.completions.create(model="gemma", prompt=prompt, max_tokens=16, temperature=0)
        return str(r.choices[0].text)

    solo = [complete(p) for p in PROMPTS]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        together = list(pool.map(complete, PROMPTS))
    assert together == solo
    assert_conformant(recorder)


def _wait_idle(backend: Backend, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while backend.engine.health()["slots_processing"] or backend.engine.health()["queued"]:
        assert time.monotonic() < deadline, backend.engine.health()
        time.sleep(0.02)


def test_disconnect_frees_the_slot_within_one_step(gemma_url: str, gemma_backend: Backend) -> None:
    _wait_idle(gemma_backend)
    before = len(gemma_backend.engine.stats.cancel_latency_steps)
    body = {"prompt": "Count:", "max_tokens": 400, "stream": True, "ignore_eos": True}
    with httpx.Client() as http, http.stream("POST", gemma_url + "/v1/completions", json=body) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
        assert gemma_backend.engine.health()["slots_processing"] == 1
    _wait_idle(gemma_backend)
    latencies = gemma_backend.engine.stats.cancel_latency_steps[before:]
    assert latencies
    assert max(latencies) <= 1


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x", "temperature": 5}, "temperature"),
        ({"prompt": "x", "top_p": "high"}, "top_p"),
        ({"prompt": "x", "logprobs": 9}, "logprobs"),
        ({"prompt": "x", "n": 0}, "n"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
        ({"prompt": "x", "grammar": "root ::= ("}, "grammar"),
        # Past what llama.cpp's parser takes: 20,000 nested rules overflowed its stack and killed the
        # process before this was refused.
        ({"prompt": "x", "grammar": 'root ::= "a"{0,20000}'}, "grammar"),
        ({"prompt": "x", "json_schema": {"type": "string", "maxLength": 524288}}, "json_schema"),
        ({"prompt": "x", "mirostat": 3}, "mirostat"),
        ({"prompt": [999999999]}, "prompt"),
        ({"prompt": {"a": 1}}, "prompt"),
        ({"prompt": "x", "suffix": "y"}, "suffix"),  # Gemma 3 270M has no fill-in-the-middle tokens
    ],
)
def test_invalid_parameters_are_400_naming_the_parameter(
    client: Any, recorder: RecordingTransport, body: dict[str, Any], param: str
) -> None:
    extra = {k: v for k, v in body.items() if k != "prompt"}
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="gemma", prompt=body["prompt"], extra_body=extra)
    error = info.value.body
    assert info.value.status_code == 400
    assert error["type"] == "invalid_request_error", error
    assert error["param"] == param, error
    assert_conformant(recorder)


def test_chat_parameter_errors(client: Any, recorder: RecordingTransport) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gemma", messages=[], max_tokens=2)
    assert info.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="gemma", messages=[{"role": "user", "content": "hi"}], top_logprobs=2, max_tokens=2
        )
    assert info.value.body["param"] == "top_logprobs"
    assert_conformant(recorder)


@pytest.mark.parametrize(
    ("endpoint", "body", "param", "code"),
    [
        ("completions", {"max_tokens": -1}, "max_tokens", "integer_below_minimum_value"),
        ("chat", {"max_tokens": -1}, "max_tokens", "integer_below_minimum_value"),
        ("chat", {"max_completion_tokens": -1}, "max_completion_tokens", "integer_below_minimum_value"),
        ("completions", {"stop": ["a", "b", "c", "d", "e"]}, "stop", "array_above_max_length"),
        ("chat", {"stop": ["a", "b", "c", "d", "e"]}, "stop", "array_above_max_length"),
    ],
)
def test_out_of_spec_values_are_400_with_openais_code(
    client: Any, recorder: RecordingTransport, endpoint: str, body: dict[str, Any], param: str, code: str
) -> None:
    """OpenAI's limits, with the codes it (and the proxy) answers: max_tokens >= 0 (no -1 for "unlimited"),
    at most 4 stop sequences."""
    chat = endpoint == "chat"
    create = client.chat.completions.create if chat else client.completions.create
    first = {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "x"}
    with pytest.raises(openai.BadRequestError) as info:
        create(model="gemma", **first, **body)
    error = info.value.body
    assert info.value.status_code == 400
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code), error
    assert_conformant(recorder)


def test_stop_takes_four_sequences(client: Any, recorder: RecordingTransport) -> None:
    r = client.completions.create(model="gemma", prompt="x", max_tokens=2, stop=["a", "b", "c", "d"])
    assert r.choices[0].finish_reason in ("stop", "length")
    assert_conformant(recorder)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_prompt_beyond_the_context_is_400_before_any_stream_byte(
    client: Any, recorder: RecordingTransport, stream: bool
) -> None:
    long_prompt = "hello " * (CTX_PER_SLOT + 50)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="gemma", messages=[{"role": "user", "content": long_prompt}], stream=stream, max_tokens=4
        )
    assert info.value.body["code"] == "context_length_exceeded"
    assert recorder.exchanges[-1].headers["content-type"].startswith("application/json")
    assert_conformant(recorder)


def test_full_queue_is_429_with_retry_after(gemma_url: str, gemma_backend: Backend) -> None:
    _wait_idle(gemma_backend)
    # One request with n=6 takes the 4 slots and the 2 queue places; the next one does not fit.
    hog = {"prompt": "Count:", "max_tokens": 300, "n": 6, "stream": True, "ignore_eos": True}
    with httpx.Client() as http, http.stream("POST", gemma_url + "/v1/completions", json=hog) as held:
        assert held.status_code == 200
        refused = http.post(gemma_url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["type"] == "rate_limit_exceeded"
    _wait_idle(gemma_backend)


def _generate(
    backend: Backend, prompts: list[str], max_tokens: list[int], *, cache_prompt: bool = False
) -> list[str]:
    """Greedy texts of jobs submitted together (so admitted in this order), through the engine itself."""
    done = threading.Semaphore(0)
    texts = [""] * len(prompts)

    def emit(event: Event) -> None:  # (on the engine's thread: the test asserts on what it keeps)
        texts[event.index] += event.text if event.error is None else f"<error: {event.error}>"
        if event.finish_reason is not None or event.error is not None:
            done.release()

    jobs = [
        Job(
            index=i,
            prompt=backend.vocab.tokenize(prompt, add_special=True),
            sampler=Sampler(backend.vocab.ptr, SamplingParams(temperature=0), eog_tokens=[]),
            emit=emit,
            max_tokens=limit,
            cache_prompt=cache_prompt,
        )
        for i, (prompt, limit) in enumerate(zip(prompts, max_tokens, strict=True))
    ]
    backend.engine.submit(jobs)
    for _ in jobs:
        assert done.acquire(timeout=300)
    return texts


def test_a_sequence_moved_to_close_a_gap_goes_on_unchanged(gemma_backend: Backend) -> None:
    """When the middle of three running sequences ends, one of the others moves next to the third (one
    run of consecutive ids, one graph run a step) and its text is the one it has alone."""
    _wait_idle(gemma_backend)
    prompts, limits = ["Once upon a time", "The capital of France is", "def fibonacci(n):"], [24, 2, 24]
    alone = [_generate(gemma_backend, [p], [n])[0] for p, n in zip(prompts, limits, strict=True)]
    before = gemma_backend.engine.stats.packing_moves
    together = _generate(gemma_backend, prompts, limits)
    assert together == alone
    assert gemma_backend.engine.stats.packing_moves == before + 1


def test_a_conversation_keeps_its_cache_when_another_runs_beside_it(gemma_backend: Backend) -> None:
    """Two conversations, each turn reusing its own cached prefix: one running alone on a slot above 0 is
    one run already and is not moved (a move would overwrite the other's cache)."""
    _wait_idle(gemma_backend)
    engine = gemma_backend.engine
    first = "A story about a lighthouse keeper who counts the ships that pass at night, " * 3
    second = "A recipe for bread that needs only flour, water, salt and a long patient wait, " * 3
    _generate(gemma_backend, [first, second], [2, 2], cache_prompt=True)
    moves = engine.stats.packing_moves
    for prompt in (second, first):  # each on its own slot, alone
        reused = engine.stats.reused_prompt_tokens
        _generate(gemma_backend, [prompt + " And then?"], [2], cache_prompt=True)
        assert (
            engine.stats.reused_prompt_tokens - reused
            >= len(gemma_backend.vocab.tokenize(prompt, add_special=True)) - 8
        )
    assert engine.stats.packing_moves == moves
