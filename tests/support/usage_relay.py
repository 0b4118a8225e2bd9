"""A relay in front of a real server whose answers carry no ``usage``: the proxy behind it computes every
answer's usage itself (Q28), and what the relay took out is kept to compare it with (issue 37, point 4:
bench/usage_agreement.py, tests/proxy/test_usage_agreement.py). The proxy's one-token requests that learn
a chat template's markup (proxy/adapters/template_overhead.py) keep theirs, as llama-cpp-python answers
every unstreamed request with usage."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from .servers import run_asgi

__all__ = ["Relay", "relayed"]


def _is_calibration(body: Any) -> bool:
    """The proxy's template-learning requests: one token, the first message "Hi"."""
    if not isinstance(body, dict):
        return False
    messages = body.get("messages")
    return body.get("max_tokens") == 1 and isinstance(messages, list) and messages[0].get("content") == "Hi"


class Relay:
    """An upstream in front of ``target`` whose answers carry no ``usage``; what was taken is kept."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.withheld: list[dict[str, Any]] = []
        self.client = httpx.AsyncClient(base_url=target, timeout=300)

    def _strip(self, payload: Any) -> Any:
        if isinstance(payload, dict) and isinstance(payload.get("usage"), dict):
            self.withheld.append(payload.pop("usage"))
        return payload

    async def handle(self, request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw) if raw else None
        keep = _is_calibration(body) or not request.url.path.startswith("/v1/")
        upstream = self.client.build_request(
            request.method,
            request.url.path,
            content=raw,
            headers={"content-type": request.headers.get("content-type", "application/json")},
        )
        answer = await self.client.send(upstream, stream=True)
        if "event-stream" in answer.headers.get("content-type", ""):
            return StreamingResponse(
                self._events(answer), status_code=answer.status_code, media_type="text/event-stream"
            )
        content = await answer.aread()
        await answer.aclose()
        if not keep and answer.status_code == 200:
            with contextlib.suppress(ValueError):
                content = json.dumps(self._strip(json.loads(content))).encode()
        return Response(content, answer.status_code, media_type=answer.headers.get("content-type"))

    async def _events(self, answer: httpx.Response) -> AsyncIterator[bytes]:
        async for line in answer.aiter_lines():
            if line.startswith("data: {"):
                line = "data: " + json.dumps(self._strip(json.loads(line[6:])))
            yield (line + "\n").encode()
        await answer.aclose()


@contextlib.contextmanager
def relayed(target: str) -> Iterator[tuple[str, Relay]]:
    """A relay to ``target`` served on a free port: its base URL, and the relay (its ``withheld``)."""
    relay = Relay(target)
    app = Starlette(routes=[Route("/{path:path}", relay.handle, methods=["GET", "POST"])])
    with run_asgi(app) as url:
        yield url, relay
