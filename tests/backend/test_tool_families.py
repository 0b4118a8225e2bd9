"""End to end on the bundled backend: a scripted model whose template carries a family's markers answers
a call in that family's syntax, and ``/v1/chat/completions`` returns it as ``tool_calls`` (whole and
streamed) that the judge finds nothing wrong with. One small model file per family: the scripted reply is
one token (it repeats characters, see backend/synthetic.py), which the family's lazy grammar must take."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("llama_cpp")
import httpx

from backend.app import create_app
from backend.context import ContextOptions
from backend.service import Backend
from backend.synthetic import CHATML_TEMPLATE, SyntheticSpec, write_synthetic
from tests.backend.fixtures import Exchange
from tests.support.servers import run_asgi

PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}]
ARGUMENTS = {"city": "Paris", "days": 3}


@dataclass(frozen=True)
class Family:
    name: str
    markers: str
    """What the template shows of the family (llama.cpp's detection markers), in a Jinja comment."""
    reply: str


FAMILIES = [
    Family(
        "kimi",
        "<|im_system|>tool_declare<|im_middle|> <|tool_calls_section_begin|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Paris", "days": 3}<|tool_call_end|><|tool_calls_section_end|>',
    ),
    Family(
        "granite",
        "elif thinking <|tool_call|>",
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
    ),
    Family(
        "gemma",
        "<start_function_call>call:",
        "<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>",
    ),
    Family(
        "harmony",
        "<|start|>assistant<|channel|>commentary to=functions.",
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city": "Paris", "days": 3}',
    ),
]


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda f: f.name)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    family: Family = request.param
    template = "{# " + family.markers + " #}" + CHATML_TEMPLATE
    spec = SyntheticSpec(reply=family.reply, chat_template=template, n_ctx_train=1024)
    path = write_synthetic(tmp_path_factory.mktemp(family.name) / "m.gguf", spec)
    backend = Backend.open(str(path), context=ContextOptions(ctx_size=1024, parallel=1, threads=2))
    try:
        assert backend.tool_format.name == family.name
        with run_asgi(create_app(backend)) as url:
            yield family.name, url
    finally:
        backend.close()


def _post(url: str, body: dict[str, Any]) -> Exchange:
    exchange = Exchange("POST", "/v1/chat/completions", body)
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as response:
        exchange.status = response.status_code
        exchange.headers = dict(response.headers)
        for chunk in response.iter_bytes():
            exchange.raw += chunk
    return exchange


def _streamed_calls(raw: bytes) -> list[tuple[str, str]]:
    calls: dict[int, list[str]] = {}
    for line in raw.decode().splitlines():
        if not line.startswith("data: {"):
            continue
        for choice in json.loads(line[6:])["choices"]:
            for call in choice["delta"].get("tool_calls") or []:
                entry = calls.setdefault(call["index"], ["", ""])
                entry[0] += call["function"].get("name") or ""
                entry[1] += call["function"].get("arguments") or ""
    return [(name, arguments) for name, arguments in calls.values()]


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_familys_call_comes_back_as_tool_calls(
    served: tuple[str, str], tool_choice: str, stream: bool
) -> None:
    _, url = served
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Weather in Paris for 3 days?"}],
        "tools": TOOLS,
        "tool_choice": tool_choice,
        "max_tokens": 16,
        "stream": stream,
    }
    exchange = _post(url, body)
    assert exchange.status == 200, bytes(exchange.raw)
    if stream:
        calls = _streamed_calls(bytes(exchange.raw))
    else:
        message = json.loads(bytes(exchange.raw))["choices"][0]["message"]
        assert not message["content"]
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
    assert [(name, json.loads(arguments)) for name, arguments in calls] == [("get_weather", ARGUMENTS)]
    assert exchange.judge_errors() == []
