"""Stop sequences met: the one that ended a choice, named for a protocol that names it (a Message's
``stop_sequence``, ``RequestInfo.names_stop``): from vLLM's ``stop_reason`` (Q37), SGLang's
``matched_stop`` (Q38), llama-server's ``__verbose`` (asked by the adapter), or the proxy's own cut
where the upstream ignored the sequence (Q76); a chat client's finish never carries the mark. An
answer that a sequence emptied is no lost text, and an empty sequence is never sent."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from conformance.api_errors import APIError
from conformance.request_info import RequestInfo
from proxy.adapters.base import fitted_request
from proxy.normalizer.body import normalize_body
from proxy.normalizer.repairs import Repairs
from proxy.normalizer.stop import truncate_at_stop
from proxy.normalizer.stream import StreamNormalizer
from proxy.upstream_traits import UpstreamTraits
from tests.proxy.conftest import run_proxy
from tests.support.messages_checks import message_events
from tests.support.servers import RecordingUpstream, run_asgi

STOPS = ["END", "e"]
ASKED = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": STOPS}


def _info(names_stop: bool, stream: bool) -> RequestInfo:
    return RequestInfo.from_body("chat", {**ASKED, "stream": stream}, names_stop=names_stop)


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra.pop("choice", {})}
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [choice],
        **extra,
    }


def _streamed_finish(names_stop: bool, chunks: list[dict[str, Any]]) -> dict[str, Any]:
    normalizer = StreamNormalizer(_info(names_stop, True))
    out = [c for chunk in chunks for c in normalizer.feed_payload(chunk)]
    out += normalizer.close()
    assert normalizer.failure is None
    finals = [c["choices"][0] for c in out if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finals) == 1
    return finals[0]


def _whole_choice(names_stop: bool, choice: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice], **extra}
    normalized = normalize_body(body, _info(names_stop, False), repairs=Repairs())
    return dict(normalized["choices"][0])


UPSTREAM_NAMES = [
    pytest.param({"choice": {"stop_reason": "END"}}, id="vllm-stop_reason"),
    pytest.param({"choice": {"matched_stop": "END"}}, id="sglang-matched_stop"),
    pytest.param({"__verbose": {"stop_type": "word", "stopping_word": "END"}}, id="llama-server-verbose"),
]


@pytest.mark.parametrize("named", UPSTREAM_NAMES)
def test_a_stream_names_the_stop_the_upstream_says_it_met(named: dict[str, Any]) -> None:
    chunks = [_chunk({"role": "assistant", "content": "abc"}), _chunk({}, "stop", **named)]
    assert _streamed_finish(True, chunks)["stop_reason"] == "END"
    assert "stop_reason" not in _streamed_finish(False, chunks)


@pytest.mark.parametrize("named", UPSTREAM_NAMES)
def test_a_whole_answer_names_the_stop_the_upstream_says_it_met(named: dict[str, Any]) -> None:
    choice = {"index": 0, "message": {"role": "assistant", "content": "abc"}, "finish_reason": "stop"}
    choice.update(named.get("choice", {}))
    extra = {k: v for k, v in named.items() if k != "choice"}
    assert _whole_choice(True, choice, **extra)["stop_reason"] == "END"
    assert "stop_reason" not in _whole_choice(False, choice, **extra)


def test_a_stop_named_that_the_request_never_gave_is_no_stop_met() -> None:
    """vLLM's ``stop_reason`` is a token id for an end-of-turn token, and a server may name a stop
    string of its own (a template's): neither is a sequence the client gave."""
    for named in ({"choice": {"stop_reason": 106}}, {"choice": {"stop_reason": "<end_of_turn>"}}):
        chunks = [_chunk({"role": "assistant", "content": "abc"}), _chunk({}, "stop", **named)]
        assert "stop_reason" not in _streamed_finish(True, chunks)
    eos = {"__verbose": {"stop_type": "eos", "stopping_word": ""}}
    chunks = [_chunk({"role": "assistant", "content": "abc"}), _chunk({}, "stop", **eos)]
    assert "stop_reason" not in _streamed_finish(True, chunks)


def test_the_proxys_own_cut_names_the_earliest_stop() -> None:
    """An upstream that ignored the sequences (Q76): the proxy cuts at the earliest one met, across
    chunks, and names it; of two, the one that comes first in the text."""
    chunks = [
        _chunk({"role": "assistant", "content": "a b EN"}),
        _chunk({"content": "D then more"}),
        _chunk({}, "length"),
    ]
    assert _streamed_finish(True, chunks)["stop_reason"] == "END"
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "one END two"},
        "finish_reason": "length",
    }
    assert _whole_choice(True, choice)["stop_reason"] == "e"  # ("one": its e comes first)


def test_a_limit_met_names_no_stop() -> None:
    chunks = [
        _chunk({"role": "assistant", "content": "abc"}),
        _chunk({}, "length", choice={"stop_reason": "END"}),
    ]
    assert _streamed_finish(True, chunks)["finish_reason"] == "length"
    assert "stop_reason" not in _streamed_finish(True, chunks)


def _upstream_that_names_its_stop() -> RecordingUpstream:
    """An upstream that says it names the stop sequence it met (the bundled backend's /props), and
    names it in every answer both as llama-server (``__verbose``) and as vLLM does (``stop_reason``)."""

    async def chat(request: Request) -> Response:
        body = await request.json()
        upstream.seen.append((request.url.path, body))
        verbose = {"__verbose": {"stop_type": "word", "stopping_word": "END"}}
        if body.get("stream"):
            events = [_chunk({"role": "assistant", "content": "abc"}), _chunk({}, "stop", **verbose)]
            events[1]["choices"][0]["stop_reason"] = "END"
            text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            return Response(text, media_type="text/event-stream")
        choice = {"index": 0, "message": {"role": "assistant", "content": "abc"}, "finish_reason": "stop"}
        choice["stop_reason"] = "END"
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        answer = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "usage": usage}
        return JSONResponse(answer | {"choices": [choice], **verbose})

    async def props(_: Request) -> Response:
        return JSONResponse({"reports_stopping_word": True})

    upstream = RecordingUpstream(
        [Route("/v1/chat/completions", chat, methods=["POST"]), Route("/props", props)]
    )
    return upstream


@pytest.mark.parametrize("stream", [False, True])
def test_only_a_protocol_that_names_the_stop_asks_for_it_and_gets_it(stream: bool) -> None:
    """A Messages request asks the upstream to name its stop (``verbose``, ``response_fields``) and
    gets it; a chat request with the same stop asks for nothing more, and its client never sees the
    marks the upstream sent (``__verbose``, vLLM's ``stop_reason``)."""
    upstream = _upstream_that_names_its_stop()
    chat = {**ASKED, "stream": stream}
    message = {"model": "m", "max_tokens": 8, "messages": ASKED["messages"], "stop_sequences": STOPS}
    with run_asgi(upstream.app) as url, run_proxy(url) as proxy:
        chatted = httpx.post(proxy + "/v1/chat/completions", json=chat, timeout=30)
        named = httpx.post(proxy + "/v1/messages", json={**message, "stream": stream}, timeout=30)
    assert chatted.status_code == named.status_code == 200, (chatted.text, named.text)
    assert "stop_reason" not in chatted.text
    assert "__verbose" not in chatted.text
    asked = upstream.bodies("/v1/chat/completions")
    assert "verbose" not in asked[0]
    assert asked[1]["verbose"] is True
    assert asked[1]["response_fields"] == ["stop_type", "stopping_word"]  # not llama-server's prompt back
    ended = message_events(named.content)[-2]["delta"] if stream else named.json()
    assert (ended["stop_reason"], ended["stop_sequence"]) == ("stop_sequence", "END")


def test_of_two_stop_sequences_at_one_place_the_first_given_is_named() -> None:
    assert truncate_at_stop("say one END", ("END", "E")) == ("say one ", "END")
    assert truncate_at_stop("say one END", ("E", "END")) == ("say one ", "E")
    assert truncate_at_stop("say one", ("END",)) == ("say one", None)


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_that_begins_with_a_stop_sequence_is_empty_not_lost(stream: bool) -> None:
    """llama-server and the bundled backend count the tokens of the sequence they met and cut them
    from the text: a sequence of two tokens where the answer begins leaves it empty with 2 counted.
    That is no lost text (Q14), which the same answer to a request without stop sequences is, and one
    with more tokens counted than the sequences could hold."""
    usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    for stops, lost, tokens in ((STOPS, False, 2), ([], True, 2), (STOPS, True, 300)):
        usage["completion_tokens"] = tokens  # (300: more than any of the sequences could be)
        body = {**ASKED, "stop": stops, "stream": stream, "stream_options": {"include_usage": True}}
        if not stream:
            del body["stream_options"]
        info = RequestInfo.from_body("chat", body)
        if stream:
            normalizer = StreamNormalizer(info)
            normalizer.feed_payload(_chunk({"role": "assistant", "content": ""}))
            normalizer.feed_payload({**_chunk({}, "stop"), "usage": usage})
            normalizer.close()
            assert (normalizer.failure is not None) is lost
            continue
        message = {"role": "assistant", "content": ""}
        answer = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "usage": usage}
        answer["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
        if lost:
            with pytest.raises(APIError, match="Q14"):
                normalize_body(answer, info, repairs=Repairs())
        else:
            assert normalize_body(answer, info, repairs=Repairs())["choices"][0]["message"]["content"] == ""


def test_an_empty_stop_sequence_is_not_sent() -> None:
    """An empty sequence is met where the text begins: llama-server answered every request that gave
    one with nothing. The judge reads none, nor does the bundled backend; the others go as they came."""
    for stop, sent in (("", None), (["", "END"], ["END"]), ([""], None), (["END"], ["END"]), ("END", "END")):
        body = {**ASKED, "stop": stop}
        fitted = fitted_request(UpstreamTraits(), body, RequestInfo.from_body("chat", body))
        assert fitted.get("stop") == sent
