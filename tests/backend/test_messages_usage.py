"""A Messages stream opens with its prompt's tokens (Q88) on the bundled backend and through the proxy in
front of it: ``message_start``'s ``input_tokens`` is the count ``count_tokens`` gives and the answer's own
usage gives at the end, as Anthropic's streams have it (Claude Code's context meter reads it there)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.proxy.conftest import only_upstream, run_proxy, serve_proxy
from tests.support.messages_checks import judged, message_events

ASKED: dict[str, Any] = {
    "model": "gemma",
    "max_tokens": 8,
    "system": "You answer in one word.",
    "messages": [{"role": "user", "content": "Name a colour of the sea."}],
    "tools": [
        {
            "name": "get_weather",
            "description": "The weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ],
}


@pytest.fixture(params=["backend", "proxy"])
def url(request: pytest.FixtureRequest, gemma_url: str) -> Iterator[str]:
    if request.param == "backend":
        yield gemma_url
        return
    with run_proxy(gemma_url, upstream_kind="openai") as proxied:
        yield proxied


def test_a_message_stream_opens_with_its_prompts_tokens(url: str) -> None:
    streamed = httpx.post(url + "/v1/messages", json={**ASKED, "stream": True}, timeout=120)
    judged(streamed.content, {**ASKED, "stream": True}, streamed.status_code, streamed.headers)
    events = message_events(streamed.content)
    started = events[0]["message"]["usage"]
    ended = next(event["usage"] for event in events if event["type"] == "message_delta")
    counted = httpx.post(url + "/v1/messages/count_tokens", json=ASKED, timeout=120).json()["input_tokens"]
    assert started["input_tokens"] == counted > 20  # the system prompt, the tool and the question
    assert ended["input_tokens"] + ended["cache_read_input_tokens"] == counted


# A 1x1 PNG: the bundled model reads no images.
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def test_an_image_its_model_cannot_read_is_refused_alike_by_count_tokens(url: str) -> None:
    # Found black-box: through the proxy, count_tokens answered it 404 "cannot count tokens for the
    # model" where the backend, and create through the proxy, answer 400.
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}}
    asked = {
        **ASKED,
        "messages": [{"role": "user", "content": [image, {"type": "text", "text": "What is it?"}]}],
    }
    created = httpx.post(url + "/v1/messages", json=asked, timeout=120)
    counted = httpx.post(url + "/v1/messages/count_tokens", json=asked, timeout=120)
    assert created.status_code == counted.status_code == 400, (created.text, counted.text)
    assert counted.json()["error"]["type"] == "invalid_request_error"
    assert counted.json()["error"]["message"] == created.json()["error"]["message"]


def test_the_proxy_asks_the_backends_count_beside_the_answer(gemma_url: str) -> None:
    # Its /props says it serves beside a stream: detected, the proxy asks a Message's count with the
    # answer, not before it (which adds the count's time to the first token), from the first stream on.
    # No tools: a request offering them reads the listing, which tells it too.
    plain = {key: value for key, value in ASKED.items() if key != "tools"}
    with serve_proxy(gemma_url) as (proxied, app):
        streamed = httpx.post(proxied + "/v1/messages", json={**plain, "stream": True}, timeout=120)
        assert message_events(streamed.content)[0]["message"]["usage"]["input_tokens"] > 10
        assert only_upstream(app).traits.serial is False
