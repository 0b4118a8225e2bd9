"""A large body is parsed, checked and translated beside the event loop, not on it (issue 32: 400,000
input items on /v1/responses, 10.8 MB and under --max-body, held the loop 18.7 s, and /health with it).

Each front-end's ``translate`` runs as a task while the test turns the loop: a body translated on the loop
finishes within the task's first step, so the loop turns at most once or twice meanwhile; one translated
in a worker thread leaves the loop turning for as long as the work takes (a second or so here), hundreds
of times. No clock is read: the count of turns is the measure.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.protocols import chat, messages, responses
from conformance.protocols.front_end import OFF_LOOP_BYTES, SCHEMAS_OFF_LOOP_OBJECTS, FrontEnd, Translation
from conformance.protocols.responses.store import ResponseStore

ITEMS = 200_000


def _turns_while(translate: Callable[[], Any]) -> tuple[int, Translation]:
    async def main() -> tuple[int, Translation]:
        task = asyncio.ensure_future(translate())
        turns = 0
        while not task.done():
            await asyncio.sleep(0)
            turns += 1
        return turns, task.result()

    return asyncio.run(main())


def _responses(tmp_path: Path) -> FrontEnd:
    return responses.front_end(ResponseStore(tmp_path / "responses.sqlite3", max_bytes=1 << 20, max_age=60))


BODIES: dict[str, tuple[Callable[[Path], FrontEnd], dict[str, Any]]] = {
    "chat": (
        lambda _: chat.front_end(),
        {"model": "m", "messages": [{"role": "user", "content": "hi"}] * ITEMS},
    ),
    "messages": (
        lambda _: messages.front_end(),
        {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}] * ITEMS},
    ),
    "responses": (_responses, {"model": "m", "input": [{"role": "user", "content": "hi"}] * ITEMS}),
}


@pytest.mark.parametrize("protocol", sorted(BODIES))
def test_a_large_body_is_translated_while_the_loop_keeps_turning(protocol: str, tmp_path: Path) -> None:
    make, body = BODIES[protocol]
    raw = json.dumps(body).encode()
    assert len(raw) > OFF_LOOP_BYTES
    turns, translation = _turns_while(lambda: make(tmp_path).translate(raw))
    assert translation.body is not None  # translated whole, as on the loop
    assert turns > 50


@pytest.mark.parametrize("protocol", sorted(BODIES))
def test_a_small_body_stays_on_the_loop(protocol: str, tmp_path: Path) -> None:
    """Nearly every real request: no thread hand-off, the translation done in the task's first step."""
    make, body = BODIES[protocol]
    small = {**body, **{k: v[:3] for k, v in body.items() if isinstance(v, list)}}
    turns, translation = _turns_while(lambda: make(tmp_path).translate(json.dumps(small).encode()))
    assert translation.body is not None
    assert turns <= 2


def _tools(count: int, properties: int) -> list[dict[str, Any]]:
    """``count`` functions, each with a schema of ``properties`` properties never seen before."""

    def schema(tool: int) -> dict[str, Any]:
        fields = {f"t{tool}p{i}": {"type": "string", "description": "x"} for i in range(properties)}
        return {"type": "object", "properties": fields}

    return [
        {"type": "function", "function": {"name": f"f{t}", "parameters": schema(t)}} for t in range(count)
    ]


@pytest.mark.parametrize(
    "tools",
    [
        _tools(8, 120),
        # 32 KB of empty subschemas, compact: 10,600 of them held the loop for 250 ms (a review's find).
        [{"type": "function", "function": {"name": "f", "parameters": {"allOf": [{}] * 10_600}}}],
    ],
)
def test_a_body_of_new_schemas_under_the_size_limit_is_read_off_the_loop(tools: list[dict[str, Any]]) -> None:
    """Each new schema is checked against the meta-schema (20-60 us a subschema); a body of a few small
    tools stays on the loop."""
    messages = [{"role": "user", "content": "hi"}]
    raw = json.dumps({"model": "m", "messages": messages, "tools": tools}, separators=(",", ":")).encode()
    assert len(raw) < OFF_LOOP_BYTES
    assert raw.count(b"{") > SCHEMAS_OFF_LOOP_OBJECTS
    turns, translation = _turns_while(lambda: chat.front_end().translate(raw))
    assert translation.body is not None
    assert turns > 5
    raw = json.dumps({"model": "m", "messages": messages, "tools": _tools(3, 4)}).encode()
    turns, translation = _turns_while(lambda: chat.front_end().translate(raw))
    assert translation.body is not None
    assert turns <= 2
