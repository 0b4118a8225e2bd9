"""Issue 21, acceptance 2: ``previous_response_id`` continues a conversation across two requests served
by different ``--workers`` processes, in front of a real upstream (the bundled backend).

Which worker serves a request is read from the kernel, not from the server: a kept-alive connection
stays with the worker that accepted it, and ``/proc`` says which process holds the server's end of it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.servers import free_port, run_process

pytestmark = pytest.mark.backend

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


def test_previous_response_id_continues_a_conversation_on_another_worker(tmp_path: Path) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    port = free_port()
    store = tmp_path / "responses.sqlite3"
    args = [*SERVE, "--port", str(port), "--workers", "2", "--responses-store", str(store)]
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
        with _client_of_other_worker(url, port, workers, served_first) as second:
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
        # turn's input and answer, then the new input (what it lists, and what the model was given).
        first_answer = _texts(first_turn["output"])
        assert _texts(listed.json()["data"]) == [
            "My name is Ada. Remember it.",
            *first_answer,
            "What is my name?",
        ]
        one_usage, two_usage = first_turn["usage"], second_turn["usage"]
        assert two_usage["input_tokens"] > one_usage["input_tokens"] + one_usage["output_tokens"]
        # Either worker answers for what the other stored.
        with httpx.Client(base_url=url, timeout=60) as third:
            assert third.get(f"/v1/responses/{first_turn['id']}").json() == first_turn
