"""Issue 21, acceptance 2: ``previous_response_id`` continues a conversation across two requests served
by different ``--workers`` processes, in front of a real upstream (the bundled backend), and in front of
a recording chat upstream that shows what the second worker sent.

Which worker serves a request is read from the kernel, not from the server: a kept-alive connection
stays with the worker that accepted it, and ``/proc`` says which process holds the server's end of it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.servers import RecordingUpstream, free_port, run_asgi, run_process

SERVE = [sys.executable, "-m", "conformance", "serve"]


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def _is_worker(pid: int) -> bool:
    """A process uvicorn spawned to serve (not the bundled backend, not the resource tracker)."""
    return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()


def _server_socket_inode(server_port: int, client_port: int) -> str:
    """The inode of the server's end of the loopback connection from ``client_port``."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
            return fields[9]
    raise AssertionError(f"no connection from port {client_port} to {server_port}")


def _worker_of(response: httpx.Response, server_port: int, workers: list[int]) -> int:
    """The worker holding the (still open, kept-alive) connection that carried ``response``."""
    client_port = response.extensions["network_stream"].get_extra_info("client_addr")[1]
    target = f"socket:[{_server_socket_inode(server_port, client_port)}]"
    for pid in workers:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(fd) == target:
                    return pid
            except OSError:
                continue
    raise AssertionError("no worker holds the connection")


def _client_of_other_worker(url: str, port: int, workers: list[int], taken: int) -> httpx.Client:
    """A client whose kept-alive connection is held by a worker other than ``taken``."""
    for _ in range(50):
        client = httpx.Client(base_url=url, timeout=300)
        if _worker_of(client.get("/health"), port, workers) != taken:
            return client
        client.close()
    raise AssertionError("every connection went to the same worker")


def _texts(items: list[dict[str, Any]]) -> list[str]:
    return [part["text"] for item in items for part in item.get("content", []) if "text" in part]


@pytest.fixture
def chat_upstream() -> Iterator[tuple[str, RecordingUpstream]]:
    """A chat-completions upstream that answers "reply N" to its Nth request and keeps the bodies."""

    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        recording.seen.append(("/v1/chat/completions", body))
        text = f"reply {len(recording.seen)}"
        usage = {"prompt_tokens": 10 * len(body["messages"]), "completion_tokens": 2}
        usage["total_tokens"] = usage["prompt_tokens"] + 2
        base = {"id": "chatcmpl-1", "created": 1, "model": "m"}
        if not body.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            return JSONResponse({**base, "object": "chat.completion", "choices": [choice], "usage": usage})
        chunks = [
            {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None},
            {"index": 0, "delta": {}, "finish_reason": "stop"},
        ]
        events = [{**base, "object": "chat.completion.chunk", "choices": [c]} for c in chunks]
        events.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return Response(data, media_type="text/event-stream")

    recording = RecordingUpstream([Route("/v1/chat/completions", chat, methods=["POST"])])
    with run_asgi(recording.app) as url:
        yield url, recording


def test_previous_response_id_continues_a_conversation_on_another_worker_before_a_chat_upstream(
    tmp_path: Path, chat_upstream: tuple[str, RecordingUpstream]
) -> None:
    """The second worker sent the upstream the conversation that the first worker stored."""
    upstream, recording = chat_upstream
    first, second = _two_turns(tmp_path, ["--upstream", upstream, "--upstream-kind", "openai"])
    assert first["output"][0]["content"][0]["text"] == "reply 1"
    assert second["output"][0]["content"][0]["text"] == "reply 2"
    sent = recording.bodies("/v1/chat/completions")
    assert [m["content"] for m in sent[1]["messages"]] == [
        "My name is Ada. Remember it.",
        "reply 1",
        "What is my name?",
    ]


@pytest.mark.backend
@pytest.mark.timeout(900)  # the backend loads its model first, on a machine that may be busy
def test_previous_response_id_continues_a_conversation_on_another_worker(tmp_path: Path) -> None:
    """Before the bundled backend: the second answer's prompt held the first turn."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    first_turn, second_turn = _two_turns(tmp_path, [])
    one_usage, two_usage = first_turn["usage"], second_turn["usage"]
    assert two_usage["input_tokens"] > one_usage["input_tokens"] + one_usage["output_tokens"]


def _two_turns(tmp_path: Path, flags: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A conversation's two turns sent to ``serve --workers 2`` over connections held by different
    workers; checks what either worker says about them, and returns the two Responses."""
    port = free_port()
    store = tmp_path / "responses.sqlite3"
    args = [*SERVE, *flags, "--port", str(port), "--workers", "2", "--responses-store", str(store)]
    with run_process(args, health_path="/health", port=port, timeout=300) as (url, proc):
        workers = [pid for pid in _children(proc.pid) if _is_worker(pid)]
        assert len(workers) == 2, workers
        with httpx.Client(base_url=url, timeout=300) as first:
            one = first.post(
                "/v1/responses",
                json={"model": "gemma", "input": "My name is Ada. Remember it.", "max_output_tokens": 16},
            )
            assert one.status_code == 200, one.text
            served_first = _worker_of(one, port, workers)
        with contextlib.closing(_client_of_other_worker(url, port, workers, served_first)) as second:
            two = second.post(
                "/v1/responses",
                json={
                    "model": "gemma",
                    "input": "What is my name?",
                    "previous_response_id": one.json()["id"],
                    "max_output_tokens": 16,
                },
            )
            assert two.status_code == 200, two.text
            served_second = _worker_of(two, port, workers)
            assert served_second != served_first
            listed = second.get(f"/v1/responses/{two.json()['id']}/input_items", params={"order": "asc"})
        first_turn, second_turn = one.json(), two.json()
        assert second_turn["previous_response_id"] == first_turn["id"]
        # The second worker generated from the whole conversation the first one stored: the first
        # turn's input and answer, then the new input.
        first_answer = _texts(first_turn["output"])
        expected = ["My name is Ada. Remember it.", *first_answer, "What is my name?"]
        assert _texts(listed.json()["data"]) == expected
        # Either worker answers for what the other stored.
        with httpx.Client(base_url=url, timeout=60) as third:
            assert third.get(f"/v1/responses/{first_turn['id']}").json() == first_turn
    return first_turn, second_turn
