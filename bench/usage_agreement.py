"""The usage the proxy computes (Q28) against the upstream's own count, on ``conformant check``'s battery.

The proxy runs in front of a relay to a real server (llama-cpp-python's, llama-server); the relay
takes ``usage`` out of every answer, JSON or stream, and keeps it: the proxy then computes the usage of
each answer itself, as for an upstream that sends none, and the two counts of the same answer are
compared. Only the proxy's five one-token requests that learn a chat template's markup ("Hi" messages,
a tool, a tool result: proxy/adapters/template_overhead.py) keep theirs, as llama-cpp-python
answers every unstreamed request with usage. Requests: the chat and completions probes of the battery
that are answered (intent ``success``, ``two-calls``, ``finish-length``), each streamed with
``include_usage``; where the server sends no usage in a stream (llama-cpp-python), the prompt's count
is the one it gave the same request unstreamed, and the completion is compared on the unstreamed probes
alone.

    python bench/usage_agreement.py --upstream http://127.0.0.1:8080 [--label llama-server] [--only NAME...]

Prints one line per answer (the upstream's prompt and completion tokens, the proxy's, and whether the
proxy marked its usage estimated in the access log) and the largest differences. Not a timed test: the
figures go to docs/proxy.md (usage).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from conformance.probe import ProbeContext  # noqa: E402
from conformance.protocols.chat.probes import PROBES as CHAT  # noqa: E402
from conformance.protocols.completions.probes import PROBES as COMPLETIONS  # noqa: E402
from proxy.app import create_app  # noqa: E402
from proxy.config import ProxyConfig  # noqa: E402
from tests.support.servers import run_asgi  # noqa: E402
from tests.support.usage_relay import relayed  # noqa: E402

_ANSWERED = {"success", "two-calls", "finish-length"}
_SKIPPED = {"disconnect", "reasoning"}  # a hang-up; a 256-token run that says nothing more on counting


class AccessLines(logging.Handler):
    """The proxy's access log lines, by request id."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[str, dict[str, Any]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        line = json.loads(record.getMessage())
        self.lines[line["request_id"]] = line


def _requests(model: str, only: set[str]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    context = ProbeContext(model=model)
    for probe in (*CHAT, *COMPLETIONS):
        if probe.intent not in _ANSWERED or probe.name in _SKIPPED or (only and probe.name not in only):
            continue
        spec = probe.request(context)
        body = {k: v for k, v in spec.body.items() if k not in ("stream", "stream_options")}
        yield probe.name, spec.path, body


def _summed(usages: list[dict[str, Any]], n: int) -> dict[str, Any] | None:
    """The usage of a fan-out's answers as one (the proxy's count: each prompt once, every completion)."""
    if not usages:
        return None
    prompt = sum(u["prompt_tokens"] for u in usages) // n
    return {"prompt_tokens": prompt, "completion_tokens": sum(u["completion_tokens"] for u in usages)}


def _usage_of(response: httpx.Response, stream: bool) -> dict[str, Any] | None:
    if not stream:
        usage: dict[str, Any] | None = response.json().get("usage")
        return usage
    for line in response.text.splitlines():
        if line.startswith("data: {") and (usage := json.loads(line[6:]).get("usage")):
            return dict(usage)
    return None


def measure(upstream: str, label: str, only: set[str]) -> list[tuple[str, int, int | None]]:
    access = AccessLines()
    logging.getLogger("conformant.access").addHandler(access)
    logging.getLogger("conformant.access").setLevel(logging.INFO)
    differences: list[tuple[str, int, int | None]] = []
    with (
        relayed(upstream) as (relay_url, relay),
        run_asgi(create_app(ProxyConfig(upstream=relay_url))) as proxy,
    ):
        client = httpx.Client(timeout=300)
        model = client.get(proxy + "/v1/models").json()["data"][0]["id"]
        # One stream first: the proxy then learns llama-cpp-python's template (its first count waits for
        # that only as long as a usage count may take).
        hello = {"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2}
        client.post(proxy + "/v1/chat/completions", json={**hello, "stream": True})
        prompts: dict[str, int] = {}
        for name, path, body in _requests(model, only):
            for stream in (False, True):
                asked = (
                    {**body, "stream": True, "stream_options": {"include_usage": True}} if stream else body
                )
                before = len(relay.withheld)
                answer = client.post(proxy + path, json=asked)
                if answer.status_code != 200:
                    print(f"{label} {name} stream={stream}: status {answer.status_code}")
                    continue
                theirs = _summed(relay.withheld[before:], body.get("n", 1))
                if theirs is None:  # no usage in its stream: the prompt's count from the same request whole
                    if name not in prompts:  # (none unstreamed either: llama.cpp's native route)
                        print(f"{label} {name} stream={stream}: no usage from the server to compare with")
                        continue
                    theirs = {"prompt_tokens": prompts[name], "completion_tokens": None}
                prompts[name] = theirs["prompt_tokens"]
                ours = _usage_of(answer, stream) or {}
                line = access.lines.get(answer.headers.get("x-request-id", ""), {})
                prompt_diff = ours.get("prompt_tokens", 0) - theirs["prompt_tokens"]
                completion_diff = (
                    None
                    if theirs["completion_tokens"] is None
                    else ours.get("completion_tokens", 0) - theirs["completion_tokens"]
                )
                differences.append((f"{name} stream={stream}", prompt_diff, completion_diff))
                print(
                    f"{label} {name:28} stream={stream!s:5} upstream {theirs['prompt_tokens']!s:>4} "
                    f"{theirs['completion_tokens']!s:>4}  proxy {ours.get('prompt_tokens')!s:>4} "
                    f"{ours.get('completion_tokens')!s:>4}  estimated={line.get('usage_estimated')}"
                )
    return differences


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--upstream", required=True, help="the real server's base URL")
    parser.add_argument("--label", default="upstream")
    parser.add_argument("--only", nargs="*", default=[], help="these probes alone (by name)")
    args = parser.parse_args()
    differences = measure(args.upstream.rstrip("/"), args.label, set(args.only))
    prompt = max(differences, key=lambda d: abs(d[1]))
    completions = [d for d in differences if d[2] is not None]
    print(f"{args.label}: {len(differences)} answers; largest prompt difference {prompt[1]:+d} ({prompt[0]})")
    if completions:
        completion = max(completions, key=lambda d: abs(d[2] or 0))
        print(f"{args.label}: largest completion difference {completion[2]:+d} ({completion[0]})")


if __name__ == "__main__":
    main()
