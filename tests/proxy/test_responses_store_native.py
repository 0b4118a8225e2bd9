"""State with ``--responses native``: the proxy keeps it, as it does when translating. The upstream's
own ids never reach the client (every Response gets the proxy's), so a continuation is sent to the
upstream as the whole conversation, and the proxy stores what it answered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.responses_checks import check_response, sse_events
from tests.support.servers import RecordingUpstream, run_asgi

from .conftest import run_proxy


def _answer(number: int) -> dict[str, Any]:
    message = {"type": "message", "id": f"msg_up{number}", "role": "assistant", "status": "completed"}
    message["content"] = [{"type": "output_text", "text": f"answer {number}", "annotations": []}]
    return {
        "id": f"resp_upstream{number}",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "m",
        "output": [message],
        "usage": {
            "input_tokens": 5,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 2,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 7,
        },
        "store": True,
        "previous_response_id": None,
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
    }


@pytest.fixture
def upstream() -> Iterator[tuple[str, RecordingUpstream]]:
    async def responses(request: Request) -> Response:
        body = json.loads(await request.body())
        recording.seen.append(("/v1/responses", body))
        answer = _answer(len(recording.seen))
        if not body.get("stream"):
            return JSONResponse(answer)
        created = {**answer, "status": "in_progress", "output": [], "usage": None}
        events = [
            {"type": "response.created", "sequence_number": 0, "response": created},
            {"type": "response.completed", "sequence_number": 1, "response": answer},
        ]
        text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
        return Response(text, media_type="text/event-stream")

    recording = RecordingUpstream([Route("/v1/responses", responses, methods=["POST"])])
    with run_asgi(recording.app) as url:
        yield url, recording


def test_previous_response_id_is_resolved_by_the_proxy_in_front_of_a_native_endpoint(
    upstream: tuple[str, RecordingUpstream],
) -> None:
    url, recording = upstream
    with run_proxy(url, responses="native", upstream_kind="openai") as proxy:
        first = httpx.post(proxy + "/v1/responses", json={"model": "m", "input": "first"}, timeout=30)
        assert first.status_code == 200, first.text
        one = first.json()
        check_response(one)
        assert one["id"] != "resp_upstream1"
        asked = {"model": "m", "input": "second", "previous_response_id": one["id"], "stream": True}
        second = httpx.post(proxy + "/v1/responses", json=asked, timeout=30)
        assert second.status_code == 200, second.text
        events = sse_events(second.content)
        assert [event["type"] for event in events] == ["response.created", "response.completed"]
        two = events[-1]["response"]
        check_response(two)
        assert (two["previous_response_id"], two["store"]) == (one["id"], True)
        stored = httpx.get(proxy + f"/v1/responses/{two['id']}", timeout=30)
        assert stored.json() == two
        missing = httpx.post(
            proxy + "/v1/responses", json={**asked, "previous_response_id": "resp_nothing"}, timeout=30
        )
        assert missing.status_code == 400
        assert missing.json()["error"]["code"] == "previous_response_not_found"
    sent = recording.bodies("/v1/responses")
    assert len(sent) == 2  # the unknown id never reached the upstream
    user = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "first"}]}]
    assert sent[0]["input"] == "first"  # sent as the client wrote it
    assert sent[1]["input"] == [
        *user,
        one["output"][0],
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "second"}]},
    ]
    assert all("previous_response_id" not in body for body in sent)
