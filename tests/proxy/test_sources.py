"""Sources without sockets: the fan-outs over scripted requests, the builder's choice of source, and one
upstream request read from answers held in memory (the empty stream retried whole, Q52; a stream broken
off after [DONE], which teaches that the upstream serves one request at a time). The scenario files
(test_faults.py, test_llamacpp_e2e.py) run the same paths against real servers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from conformance.api_errors import APIError
from conformance.request_info import RequestInfo
from proxy.adapters import OpenAIAdapter
from proxy.adapters.base import without_streaming
from proxy.config import ProxyConfig
from proxy.errors import UpstreamTimeout
from proxy.normalizer import Identity, Repairs, StreamNormalizer
from proxy.sources.base import Source
from proxy.sources.builder import SourceBuilder
from proxy.sources.fan_out import ConcurrentFanOut, SerialFanOut
from proxy.sources.token_prompt import TextPromptFallback, source_for
from proxy.sources.upstream import UpstreamSource
from proxy.upstream import Upstream

from .memory_upstream import HeldAnswer, HeldUpstream

_BODY = {"model": "m", "prompt": "The capital", "max_tokens": 4, "n": 2, "stream": True}


def _info(body: dict[str, Any] = _BODY) -> RequestInfo:
    return RequestInfo.from_body("completions", body)


def _chunk(identity: Identity, index: int, text: str, finish: str | None = None) -> dict[str, Any]:
    choice = {"text": text, "index": index, "logprobs": None, "finish_reason": finish}
    return {"id": identity.id, "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}


class _Scripted(Source):
    """One request of a fan-out, answering from a script: its batches, then its usage (or a failure)."""

    def __init__(
        self,
        request: RequestInfo,
        batches: list[list[dict[str, Any]]],
        *,
        usage: dict[str, Any] | None = None,
        fails: APIError | None = None,
        delay: float = 0.0,
        log: list[str] | None = None,
        name: str = "",
    ) -> None:
        self.normalizer = StreamNormalizer(request)
        self.identity = self.normalizer.identity
        self._batches = batches
        self._usage = usage
        self._fails = fails
        self._failure: APIError | None = None
        self._delay = delay
        self._log = log if log is not None else []
        self._name = name
        self.closed = False

    async def start(self) -> list[dict[str, Any]]:
        self._log.append(f"start {self._name}")
        await asyncio.sleep(self._delay)
        return await self.next_batch() or []

    async def next_batch(self) -> list[dict[str, Any]] | None:
        if self._batches:
            return self._batches.pop(0)
        if self._fails is not None:
            self._failure = self._fails
        return None

    async def aclose(self) -> None:
        self.closed = True


def _nowhere() -> Upstream:
    """An upstream never asked (the fan-out only takes its places in its pool)."""
    return Upstream(ProxyConfig(upstream="http://127.0.0.1:9/v1"))


async def _drain(source: Source) -> list[dict[str, Any]]:
    chunks = await source.start()
    while (batch := await source.next_batch()) is not None:
        chunks += batch
    return chunks


def test_concurrent_fan_out_ends_with_the_summed_usage_in_the_first_requests_identity() -> None:
    info = _info(_BODY | {"stream_options": {"include_usage": True}})

    async def scenario() -> tuple[list[dict[str, Any]], list[_Scripted], Repairs]:
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        first = _Scripted(info, [], usage=usage)
        ident = first.identity
        first._batches = [[_chunk(ident, 0, "Paris")], [_chunk(ident, 0, "", "stop"), _chunk(ident, 0, "")]]
        first._batches[1][1]["choices"] = []  # its own usage chunk: held for the sum
        second = _Scripted(info, [[_chunk(ident, 1, "Rome", "stop")]], usage=usage)
        fan_out = ConcurrentFanOut([first, second], info, _nowhere())  # type: ignore[list-item]
        return await _drain(fan_out), [first, second], fan_out.repairs

    chunks, sources, repairs = asyncio.run(scenario())
    assert sorted(c["choices"][0]["text"] for c in chunks[:-1]) == ["", "Paris", "Rome"]  # as they came
    last = chunks[-1]
    assert last["choices"] == []
    assert last["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}  # prompt once
    assert last["id"] == sources[0].identity.id
    assert repairs == {"Q71": 1}


def test_concurrent_fan_out_ends_at_a_requests_failure_and_closes_every_request() -> None:
    info = _info()
    broken = APIError.make("the upstream server closed the stream before its final chunk", 502)

    async def scenario() -> tuple[ConcurrentFanOut, list[_Scripted]]:
        first = _Scripted(info, [])
        first._batches = [[_chunk(first.identity, 0, "Paris")]]
        second = _Scripted(info, [], fails=broken)
        fan_out = ConcurrentFanOut([first, second], info, _nowhere())  # type: ignore[list-item]
        await _drain(fan_out)
        return fan_out, [first, second]

    fan_out, sources = asyncio.run(scenario())
    assert fan_out.failure is broken
    assert fan_out.usage is None
    assert all(source.closed for source in sources)


def test_concurrent_fan_out_sends_the_first_chunks_of_one_request_without_waiting_for_the_others() -> None:
    # Against an upstream that serves one request at a time (llama-server with one slot), the second
    # sample starts once the first ended: the first sample's chunks go out as they come, not after it.
    info = _info()

    async def scenario() -> tuple[list[str], list[str]]:
        first = _Scripted(info, [])
        first._batches = [[_chunk(first.identity, 0, "Paris")], [_chunk(first.identity, 0, "!", "stop")]]
        second = _Scripted(info, [[_chunk(first.identity, 1, "Rome", "stop")]], delay=0.3)
        fan_out = ConcurrentFanOut([first, second], info, _nowhere())  # type: ignore[list-item]
        async with asyncio.timeout(0.2):  # the second sample has sent nothing yet
            started = await fan_out.start()
        rest = []
        while (batch := await fan_out.next_batch()) is not None:
            rest += batch
        return [c["choices"][0]["text"] for c in started], [c["choices"][0]["text"] for c in rest]

    started, rest = asyncio.run(scenario())
    assert started == ["Paris"]
    assert rest == ["!", "Rome"]


def test_concurrent_fan_out_sends_no_choice_before_a_lower_one() -> None:
    # The second sample's chunks come first (the upstream's one slot took its request first): they wait
    # for the first sample's, as a client appending choices as they come would take them for index 0.
    info = _info()

    async def scenario() -> list[tuple[int, str]]:
        first = _Scripted(info, [], delay=0.2)
        first._batches = [[_chunk(first.identity, 0, "Paris")], [_chunk(first.identity, 0, "!", "stop")]]
        second = _Scripted(
            info, [[_chunk(first.identity, 1, "Rome")], [_chunk(first.identity, 1, ".", "stop")]]
        )
        fan_out = ConcurrentFanOut([first, second], info, _nowhere())  # type: ignore[list-item]
        chunks = await _drain(fan_out)
        return [(c["choices"][0]["index"], c["choices"][0]["text"]) for c in chunks]

    assert asyncio.run(scenario()) == [(0, "Paris"), (1, "Rome"), (1, "."), (0, "!")]


def test_concurrent_fan_out_sends_the_choices_after_one_that_ended_without_any() -> None:
    info = _info()

    async def scenario() -> list[tuple[int, str]]:
        first = _Scripted(info, [], delay=0.1)  # ended with nothing (an empty answer)
        second = _Scripted(info, [[_chunk(first.identity, 1, "Rome", "stop")]])
        fan_out = ConcurrentFanOut([first, second], info, _nowhere())  # type: ignore[list-item]
        chunks = await _drain(fan_out)
        return [(c["choices"][0]["index"], c["choices"][0]["text"]) for c in chunks]

    assert asyncio.run(scenario()) == [(1, "Rome")]


def test_concurrent_fan_out_answers_a_request_refused_before_any_chunk_with_its_status() -> None:
    info = _info()
    refused = APIError.make("'max_tokens' must be positive", 400, param="max_tokens")

    async def scenario() -> tuple[list[_Scripted], BaseException | None]:
        first = _Scripted(info, [], delay=0.2)
        first._batches = [[_chunk(first.identity, 0, "Paris")]]
        second = _Scripted(info, [], fails=refused)
        second.start = _refuse(refused)  # type: ignore[method-assign]
        fan_out = ConcurrentFanOut([first, second], info, _nowhere())  # type: ignore[list-item]
        try:
            await fan_out.start()
        except APIError as raised:
            return [first, second], raised
        return [first, second], None

    sources, raised = asyncio.run(scenario())
    assert raised is refused
    assert all(source.closed for source in sources)


def test_concurrent_fan_out_raises_a_fault_of_its_own_rather_than_wait_for_the_request_to_end() -> None:
    # A start that fails with anything but an APIError (a bug) ended its reader without its end: the
    # response waited for it forever. It is raised where the chunks are read, as the writer's 500.
    info = _info()

    async def scenario() -> BaseException | None:
        first = _Scripted(info, [], delay=0.1)
        first._batches = [[_chunk(first.identity, 0, "Paris")]]
        second = _Scripted(info, [])
        second.start = _refuse(KeyError("id"))  # type: ignore[method-assign]
        fan_out = ConcurrentFanOut([first, second], info, _nowhere())  # type: ignore[list-item]
        try:
            async with asyncio.timeout(5):
                await _drain(fan_out)
        except KeyError as raised:
            return raised
        return None

    assert isinstance(asyncio.run(scenario()), KeyError)


def _refuse(error: Exception) -> Any:
    async def start() -> list[dict[str, Any]]:
        raise error

    return start


def test_serial_fan_out_starts_each_request_after_the_last_one_answered() -> None:
    info = _info()
    log: list[str] = []

    async def scenario() -> list[dict[str, Any]]:
        first = _Scripted(info, [], log=log, name="0")
        first._batches = [[_chunk(first.identity, 0, "Paris", "stop")]]
        second = _Scripted(info, [[_chunk(first.identity, 1, "Rome", "stop")]], log=log, name="1")
        fan_out = SerialFanOut([first, second], info)  # type: ignore[list-item]
        chunks = await fan_out.start()
        log.append("first answered")
        while (batch := await fan_out.next_batch()) is not None:
            chunks += batch
        return chunks

    chunks = asyncio.run(scenario())
    assert log == ["start 0", "first answered", "start 1"]
    assert [c["choices"][0]["text"] for c in chunks] == ["Paris", "Rome"]


def test_serial_fan_out_gives_each_later_request_its_own_first_byte_timeout() -> None:
    info = _info()

    async def scenario() -> tuple[SerialFanOut, list[_Scripted]]:
        first = _Scripted(info, [], delay=0.2)
        first._batches = [[_chunk(first.identity, 0, "Paris", "stop")]]
        slow = _Scripted(info, [[_chunk(first.identity, 1, "Rome", "stop")]], delay=1.0)
        fan_out = SerialFanOut([first, slow], info, first_byte_timeout=0.1)  # type: ignore[list-item]
        await _drain(fan_out)  # the first, slower than 0.1 s, is the caller's to bound
        return fan_out, [first, slow]

    fan_out, sources = asyncio.run(scenario())
    assert fan_out.failure is not None
    assert isinstance(fan_out.failure, UpstreamTimeout)
    assert all(source.closed for source in sources)


def _builder(info: RequestInfo, *, serial: bool | None = None, upstream: Any = None) -> SourceBuilder:
    if upstream is None:
        upstream = _nowhere()
        upstream.traits.serial = serial
    return SourceBuilder(
        upstream,
        OpenAIAdapter(),
        "completions",
        info,
        [],
        max_line_bytes=1024,
        first_byte_timeout=5.0,
        fan_out=True,
    )


def _sent(source: Any) -> list[dict[str, Any]]:
    return [part._call.body for part in source._sources]


def test_builder_fans_out_at_once_unless_the_upstream_serves_one_request_at_a_time() -> None:
    body = _BODY | {"stream_options": {"include_usage": True}, "seed": 7}
    at_once = _builder(_info(body)).build(body)
    assert isinstance(at_once, ConcurrentFanOut)
    assert [(part["stream"], part["seed"], part["n"]) for part in _sent(at_once)] == [
        (True, 7, 1),
        (True, 8, 1),
    ]
    one_at_a_time = _builder(_info(body), serial=True).build(body)
    assert isinstance(one_at_a_time, SerialFanOut)
    assert _sent(one_at_a_time) == [without_streaming(part) for part in _sent(at_once)]
    assert all("stream_options" not in part and part["stream"] is False for part in _sent(one_at_a_time))


def test_builder_sends_one_request_as_it_is_and_wraps_a_token_prompt_in_its_text_fallback() -> None:
    single = {"model": "m", "prompt": "The capital", "max_tokens": 4}
    assert isinstance(_builder(_info(single)).build(single), UpstreamSource)
    assert _builder(_info(single)).fans_out(single) is False
    tokens = single | {"prompt": [1, 2, 3]}
    assert isinstance(source_for(_builder(_info(tokens)), tokens), TextPromptFallback)
    assert isinstance(source_for(_builder(_info(single)), single), UpstreamSource)


def _source(upstream: HeldUpstream, body: dict[str, Any], repairs: Repairs) -> UpstreamSource:
    info = RequestInfo.from_body("completions", body)
    call = OpenAIAdapter().call("completions", body)
    return UpstreamSource(
        upstream,  # type: ignore[arg-type]
        OpenAIAdapter(),
        info,
        call,
        max_line_bytes=1024,
        repairs=repairs,
    )


def test_a_stream_ended_before_its_first_byte_is_asked_again_whole() -> None:
    body = {
        "model": "m",
        "prompt": "The capital",
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    whole = {"id": "x", "object": "text_completion", "created": 1, "model": "m",
             "choices": [{"text": " is Paris", "index": 0, "logprobs": None, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}}  # fmt: skip
    upstream = HeldUpstream(
        [HeldAnswer("text/event-stream", []), HeldAnswer("application/json", [json.dumps(whole).encode()])]
    )
    repairs = Repairs()
    source = _source(upstream, body, repairs)
    assert asyncio.run(source.start()) == []
    assert upstream.sent[1] == without_streaming(body)
    assert source.failure is None
    assert source.body is not None
    assert source.body["choices"][0]["text"] == " is Paris"
    assert repairs["Q52"] == 1


def test_a_stream_that_failed_after_its_first_byte_is_not_asked_again() -> None:
    body = {"model": "m", "prompt": "The capital", "max_tokens": 4, "stream": True}
    cut = APIError.make("the upstream connection failed: ReadError", 502)
    upstream = HeldUpstream([HeldAnswer("text/event-stream", [b": ping\n\n", cut])])
    source = _source(upstream, body, Repairs())

    async def scenario() -> APIError:
        try:
            await source.start()
        except APIError as raised:
            return raised
        raise AssertionError("no failure")

    assert asyncio.run(scenario()) is cut
    assert len(upstream.sent) == 1


def test_a_stream_broken_off_after_done_fails_and_teaches_that_the_upstream_serves_one_at_a_time() -> None:
    body = {"model": "m", "prompt": "The capital", "max_tokens": 4, "stream": True}
    event = {"id": "x", "object": "text_completion", "created": 1, "model": "m",
             "choices": [{"text": " is", "index": 0, "logprobs": None, "finish_reason": None}]}  # fmt: skip
    sse = b"data: " + json.dumps(event).encode() + b"\n\ndata: [DONE]\n\n"
    reset = APIError.make("the upstream connection failed: ReadError", 502)
    upstream = HeldUpstream([HeldAnswer("text/event-stream", [sse, reset])])
    source = _source(upstream, body, Repairs())

    async def scenario() -> APIError:
        try:
            await source.start()  # the whole stream came in the first read: its failure is raised
        except APIError as raised:
            return raised
        raise AssertionError("no failure")

    assert "interrupted the stream" in asyncio.run(scenario()).body["error"]["message"]
    assert upstream.traits.serial is True


def test_a_refused_token_prompt_is_built_again_from_the_upstreams_text_of_it() -> None:
    class Detokenizing(HeldUpstream):
        async def answer(
            self,
            method: str,
            path: str,
            body: Any = None,
            timeout: float = 10.0,  # noqa: ASYNC109
        ) -> tuple[int, Any]:
            text = await self.json(method, path, body, timeout)
            return (404, None) if text is None else (200, text)

        async def json(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:  # noqa: ASYNC109
            if path != "/extras/detokenize":
                return None
            return {"text": " ".join(f"t{token}" for token in body["tokens"])}

    refused = HeldAnswer("application/json", [b'{"error": {"message": "no"}}'], status=500)
    whole = {"id": "x", "object": "text_completion", "created": 1, "model": "m",
             "choices": [{"text": " up", "index": 0, "logprobs": None, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}}  # fmt: skip
    upstream = Detokenizing([refused, HeldAnswer("application/json", [json.dumps(whole).encode()])])
    body = {"model": "m", "prompt": [1, 2], "max_tokens": 4}
    info = _info(body)
    source = source_for(_builder(info, upstream=upstream), body)
    assert asyncio.run(source.start()) == []
    assert [sent["prompt"] for sent in upstream.sent] == [[1, 2], "t1 t2"]
    assert source.body is not None
    assert source.body["choices"][0]["text"] == " up"
    assert source.repairs["Q74"] == 1
    assert upstream.traits.detokenizer == ("/extras/detokenize", "text")
