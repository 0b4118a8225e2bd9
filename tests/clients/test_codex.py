"""Codex CLI (``codex exec``) runs one turn to exit status 0 through the proxy's ``/v1/responses`` in front
of the bundled backend (issue 21, acceptance 3).

Codex speaks only the Responses API; against a server without ``/v1/responses`` it retried five times and
failed on "404 Not Found". It is set up as a user with a local server sets it up (docs/clients.md): a
custom model provider with ``wire_api = "responses"`` and an ``env_key`` naming a variable with a key the
proxy does not check, in a ``CODEX_HOME`` of its own (no login, no user config).

One turn of ``codex exec`` (0.171.0) sends a request of about 40 KB: a system prompt of about 4,500
tokens, seven function tools, one ``namespace`` tool (multi_agent_v1, grouping function tools) and one
``web_search`` tool, ``reasoning``, ``include`` and ``client_metadata``, and no output limit (the proxy's
--default-max-tokens caps it). Codex fails the turn on a 400 for any of it, and on a
``response.incomplete``. Two runs:

- the backend serving a scripted synthetic model that answers every prompt and ends its turn: the whole
  path is real and the turn must complete with the model's answer;
- the backend's default model, Gemma 3 270M (a base model): whether its reply ends before the cap is the
  draw's; cut by the cap, the test is marked as the expected failure it is (docs/clients.md has what was
  measured).

And one turn against a scripted chat upstream, for what the model's draw reaches only now and then: its
first answer calls ``create_goal``, after which Codex sends its goal back as a ``function_call_output``
without ``call_id`` (``name`` and ``namespace`` instead). CI's run on the Gemma model drew such a turn and
the proxy refused it with a 400; the scripted upstream makes the path certain.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.clients.conftest import DEFAULT_MAX_TOKENS, SCRIPTED_REPLY, serve
from tests.clients.node import NodeClients
from tests.clients.scripted_chat import call_then_answer
from tests.support.servers import run_asgi

PROVIDER = "conformant"
KEY_VARIABLE = "CONFORMANT_CODEX_TEST_KEY"


def _events(stdout: str) -> list[dict[str, Any]]:
    """``codex exec --json``'s JSON lines (thread.started, item.completed, turn.completed...)."""
    events = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def _codex_exec(node_clients: NodeClients, proxy_url: str, model: str, tmp_path: Path) -> tuple[Any, str]:
    """``codex exec --json "Say hello."`` through the proxy: the finished process and what to show of it."""
    # Said first and plainly: Codex itself would only retry five times and print the last 404.
    probe = httpx.post(
        proxy_url + "/v1/responses", json={"model": model, "input": "Hi", "max_output_tokens": 4}, timeout=300
    )
    if probe.status_code == 404:
        pytest.fail(
            f"POST /v1/responses through conformant serve answered 404 ({probe.text[:200]}): the proxy has "
            "no Responses route, and Codex CLI speaks only the Responses API (issue 21)"
        )
    home = tmp_path / "codex-home"
    home.mkdir()
    provider = (
        f'model_providers.{PROVIDER}={{name="{PROVIDER}",base_url="{proxy_url}/v1",'
        f'wire_api="responses",env_key="{KEY_VARIABLE}"}}'
    )
    args = node_clients.bin("@openai/codex", "bin/codex.js")
    args += ["exec", "--skip-git-repo-check", "--json", "-c", provider, "-c", f"model_provider={PROVIDER}"]
    args += ["-m", model, "Say hello."]
    # Nothing of the user's: HOME and CODEX_HOME are the test's, and the one key is a dummy.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(home), KEY_VARIABLE: "unused"}
    run = subprocess.run(
        args, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600
    )
    shown = f"codex exec exited {run.returncode}\n--- stdout ---\n{run.stdout[-4000:]}"
    shown += f"\n--- stderr ---\n{run.stderr[-4000:]}"
    return run, shown


def test_codex_exec_runs_one_turn_to_its_answer(
    node_clients: NodeClients, scripted_proxy_url: str, tmp_path: Path
) -> None:
    # The bundled backend serving a scripted synthetic model, which ends every reply: Codex's whole turn
    # (its ~40 KB request, tools, the event stream it reads) goes through the real proxy and backend.
    model = httpx.get(scripted_proxy_url + "/v1/models", timeout=30).json()["data"][0]["id"]
    run, shown = _codex_exec(node_clients, scripted_proxy_url, model, tmp_path)
    assert run.returncode == 0, shown
    events = _events(run.stdout)
    kinds = [event.get("type") for event in events]
    assert "turn.completed" in kinds, shown
    assert "turn.failed" not in kinds, shown
    said = [e["item"].get("text") for e in events if e.get("type") == "item.completed" and "item" in e]
    assert SCRIPTED_REPLY in said, shown  # the model's answer, as Codex shows it


def test_codex_exec_runs_one_turn_on_the_default_model(
    node_clients: NodeClients, proxy_url: str, model: str, tmp_path: Path
) -> None:
    run, shown = _codex_exec(node_clients, proxy_url, model, tmp_path)
    if run.returncode != 0 and "reason: max_output_tokens" in run.stdout:
        # Not the wiring: every request and event was accepted, and the model wrote until the cap. Marked
        # as the known failure it is; any other failure fails.
        pytest.xfail(
            f"the model did not end its reply within --default-max-tokens {DEFAULT_MAX_TOKENS}: the proxy "
            "answered response.incomplete (max_output_tokens), and Codex fails such a turn. The bundled "
            "Gemma 3 270M base model, after Codex's ~8,700-token prompt, ends a reply (with <end_of_turn> "
            "or a whole tool call) only by the sampler's draw (docs/clients.md, what it measured)\n" + shown
        )
    assert run.returncode == 0, shown
    kinds = [event.get("type") for event in _events(run.stdout)]
    assert "turn.completed" in kinds, shown
    assert "turn.failed" not in kinds, shown


def test_codex_sends_its_goal_back_without_a_call_id_and_the_turn_completes(
    node_clients: NodeClients, tmp_path: Path
) -> None:
    # First a create_goal call; once the goal is sent back as a tool message, the scripted reply.
    upstream = call_then_answer("create_goal", {"objective": "Say hello."}, lambda _: SCRIPTED_REPLY)
    with run_asgi(upstream.app) as upstream_url, serve(["--upstream", upstream_url]) as proxy_url:
        run, shown = _codex_exec(node_clients, proxy_url, "scripted", tmp_path)
    assert run.returncode == 0, shown
    kinds = [event.get("type") for event in _events(run.stdout)]
    assert "turn.completed" in kinds, shown
    # What Codex sent after the call, as the upstream got it: the goal as the answer of a call of its own.
    last = upstream.bodies("/v1/chat/completions")[-1]["messages"]
    calls = {c["id"]: c["function"]["name"] for m in last for c in m.get("tool_calls", [])}
    answers = {m["tool_call_id"]: m["content"] for m in last if m["role"] == "tool"}
    assert calls.get("call_s1") == "create_goal", last
    goal = [answers[i] for i, name in calls.items() if name == "agent__goal_objective"]
    assert goal == ["Say hello."], last


@pytest.mark.parametrize("name", ["web_search", "no_such_tool"])
def test_codex_answers_a_call_of_a_tool_it_does_not_run_and_the_turn_completes(
    node_clients: NodeClients, tmp_path: Path, name: str
) -> None:
    """The proxy offers Codex's hosted ``web_search`` to the model as a function, whose call comes back to
    Codex as a ``function_call`` it does not run; and a model may call a tool no one offered. A call sent
    back without its output is OpenAI's 400 (the Responses translation refuses it), so Codex must answer
    each: it does, with an output saying the call is unsupported, and the turn completes."""
    upstream = call_then_answer(name, {"query": "weather in Paris"}, lambda _: SCRIPTED_REPLY)
    with run_asgi(upstream.app) as upstream_url, serve(["--upstream", upstream_url]) as proxy_url:
        run, shown = _codex_exec(node_clients, proxy_url, "scripted", tmp_path)
    assert run.returncode == 0, shown
    assert "turn.completed" in [event.get("type") for event in _events(run.stdout)], shown
    last = upstream.bodies("/v1/chat/completions")[-1]["messages"]
    answers = [m for m in last if m["role"] == "tool"]
    assert [a["tool_call_id"] for a in answers] == ["call_s1"], last
