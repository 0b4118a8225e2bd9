"""An upstream's error object relayed to the client: its ``type``, ``param`` and ``code`` are not
scrubbed as its message is, so only OpenAI's types and short names pass (a traceback or a local path in
them would reach the client and the access log), and a ``code`` in digits ``int`` cannot read ("²")
is no status (it made the proxy answer its own 500, and a stream's error event "not valid JSON").
Both for a non-stream error answer and for a stream's error event.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from .conftest import serve_proxy as proxy
from .rawserver import chunk, raw_server
from .test_faults import CHAT, _streams, assert_error, assert_idle
from .test_hostile_upstreams import _json_reply, _routes

TRACEBACK = 'Traceback (most recent call last): File "/home/alice/app.py"'
PATH = "/home/alice/models/secret.gguf"


def _error_from(error: dict[str, Any], status: int, stream: bool) -> tuple[int, dict[str, Any]]:
    """The status and error the client gets for an upstream ``error`` object: answered with ``status``
    (non-stream) or as an event after a first chunk (stream)."""
    body = json.dumps({"error": error}).encode()
    if stream:
        handler = _streams(chunk("Hello"), b"data: " + body + b"\n\n", b"data: [DONE]\n\n", then_wait=False)
    else:
        handler = _routes({b"/v1/chat/completions": _json_reply(body, f"{status} Upstream Error")})
    with raw_server(handler) as (upstream, _), proxy(upstream, upstream_kind="openai") as (url, app):
        response = httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
        assert_idle(app)
    if not stream:
        return response.status_code, assert_error(response, response.status_code)
    assert response.status_code == 200
    assert "Hello" in response.text
    last = json.loads(response.text.rsplit("data: ", 1)[-1])
    assert set(last["error"]) == {"message", "type", "param", "code"}
    return 200, last["error"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_code_in_digits_int_cannot_read_is_the_upstreams_error(stream: bool) -> None:
    status, error = _error_from({"message": "x", "code": "\u00b2"}, 500, stream)
    assert status == (200 if stream else 500)
    assert error["message"] == "x"
    assert error["type"] == "server_error"


@pytest.mark.parametrize("stream", [False, True])
def test_a_traceback_or_a_path_outside_the_message_does_not_reach_the_client(
    stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="conformant.access")
    upstream_error = {"message": "bad request", "type": TRACEBACK, "param": PATH, "code": PATH}
    status, error = _error_from(upstream_error, 400, stream)
    assert status == (200 if stream else 400)
    # An error event mid-stream is the upstream's failure (a 500's type); before it, the 400's.
    etype = "server_error" if stream else "invalid_request_error"
    assert error == {"message": "bad request", "type": etype, "param": None, "code": None}
    assert '"error_code"' in caplog.text  # the access line was written, without the upstream's path
    assert "/home/alice" not in caplog.text


@pytest.mark.parametrize("stream", [False, True])
def test_openai_types_and_short_names_are_relayed(stream: bool) -> None:
    upstream_error = {
        "message": "quota",
        "type": "insufficient_quota",
        "param": "tools[0].function",
        "code": "insufficient_quota",
    }
    _, error = _error_from(upstream_error, 429, stream)
    assert error == upstream_error
