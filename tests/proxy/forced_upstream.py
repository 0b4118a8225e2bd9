"""A raw chat upstream scripted to honour some ways of asking for a forced tool call and to answer text
to the others (issue 37, Q86): ``required``, a named function, JSON output (a ``response_format`` JSON
Schema whose answer is ``{"tool_call": ...}``, proxy/adapters/tool_emulation.py), as servers that
ignore ``tool_choice`` answer; it records what it was asked. Behind the proxy for the proxy's tests
(tests/proxy/test_forced_tool_choice.py) and the JavaScript clients' (tests/clients)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

from .conftest import run_proxy
from .rawserver import Record, chat_requests, chunk_payload, http_chunk, json_answer, raw_server, sse_head

__all__ = ["ARGUMENTS", "TEXT", "proxied", "way"]

TEXT = ["I think", " the weather", " is nice."]
_WORDS_READ_AT_ONCE = 1024
"""Past this, a preamble's word is one of a few huge events: the call then comes a second after them, so
that the proxy has read them all, and judged the text it holds, before the call can be in a read."""
ARGUMENTS = '{"city": "Paris", "unit": "celsius"}'


def way(body: dict[str, Any]) -> str:
    """How the request asks for a call: ``json_output``, ``named``, ``required``, or ``auto``."""
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema" and "tools" not in body:
        return "json_output"
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return "named"
    return "required" if choice == "required" else "auto"


def _events(
    body: dict[str, Any], honours: set[str], finish: str, preamble: int = 0, word: str = "so "
) -> list[dict[str, Any]]:
    """The answer to ``body``: a call where its way is honoured (after ``preamble`` events of ``word``
    under ``required``), else text."""
    asked = way(body)
    if asked == "required" and preamble:
        text = [chunk_payload({"content": word}) for _ in range(preamble)]
        return text + _events(body, honours | {"required"}, finish)
    if asked == "json_output" and asked in honours:
        envelope = {"tool_call": {"name": "get_weather", "arguments": json.loads(ARGUMENTS)}}
        written = json.dumps(envelope)
        return [
            chunk_payload({"role": "assistant", "content": written[:10]}),
            chunk_payload({"content": written[10:]}, "stop"),
        ]
    if asked in honours:
        first = {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        }
        rest = {"index": 0, "function": {"arguments": ARGUMENTS}}
        return [
            chunk_payload({"role": "assistant", "tool_calls": [first]}),
            chunk_payload({"tool_calls": [rest]}, "tool_calls"),
        ]
    events = [chunk_payload({"role": "assistant", "content": TEXT[0]})]
    events += [chunk_payload({"content": piece}) for piece in TEXT[1:]]
    events[-1]["choices"][0]["finish_reason"] = finish
    return events


def _whole(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The events as one chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish = None
    for event in events:
        choice = event["choices"][0]
        delta = choice["delta"]
        if "content" in delta:
            message["content"] = (message["content"] or "") + delta["content"]
        for call in delta.get("tool_calls") or ():
            if "id" in call:
                message["tool_calls"] = [
                    {"id": call["id"], "type": "function", "function": dict(call["function"])}
                ]
            else:
                message["tool_calls"][0]["function"]["arguments"] += call["function"]["arguments"]
        finish = choice["finish_reason"] or finish
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [choice],
        "usage": usage,
    }


def _upstream(
    honours: set[str],
    asked: list[dict[str, Any]],
    finish: str,
    preamble: tuple[int, str],
    refuses: frozenset[str],
) -> Any:
    """A chat upstream that calls ``get_weather`` when asked a way it ``honours``, refuses the ways it
    ``refuses`` with a 400, and answers anything else with text finished ``finish``; each request's body
    goes into ``asked``. Every other path is a 404."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: Record) -> None:
        async for body in chat_requests(reader, writer):
            asked.append(body)
            if way(body) in refuses:
                error = {"message": "Unrecognized request argument", "type": "invalid_request_error"}
                writer.write(json_answer({"error": error}, "400 Bad Request"))
                await writer.drain()
                continue
            events = _events(body, honours, finish, *preamble)
            if not body.get("stream"):
                writer.write(json_answer(_whole(events)))
                await writer.drain()
                continue
            data = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]
            writer.write(sse_head())
            if preamble[0]:
                writer.write(http_chunk(b"".join(data[: preamble[0]])))
                await writer.drain()
                if len(preamble[1]) > _WORDS_READ_AT_ONCE:  # (the text bound is judged before the call)
                    await asyncio.sleep(1)
            writer.write(http_chunk(b"".join(data[preamble[0] :]) + b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()

    return handler


@contextlib.contextmanager
def proxied(
    honours: set[str],
    finish: str = "stop",
    preamble: int = 0,
    refuses: frozenset[str] = frozenset(),
    word: str = "so ",
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The proxy in front of the scripted upstream; yields its URL and the bodies the upstream got
    (``preamble`` events of ``word`` before a call asked as ``required``)."""
    asked: list[dict[str, Any]] = []
    with (
        raw_server(_upstream(honours, asked, finish, (preamble, word), refuses)) as (upstream, _),
        run_proxy(upstream, upstream_kind="openai") as url,
    ):
        yield url, asked
