"""Token-id prompts (Q74) through the proxy when the upstream refuses them: detokenized and sent once more.

llama-cpp-python's own server is the real case (it answers a token prompt with a 500 and detokenizes on
``/extras/detokenize``); a small upstream stands in for what no server here does: a llama.cpp-style
``/detokenize``, or no detokenizer at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.adapters.token_prompts import is_token_prompt
from tests.support.servers import run_asgi

from .conftest import judge, run_proxy

# A toy vocabulary: id -> UTF-8 bytes; 9 and 10 are the two halves of "é".
VOCAB = {1: b"The", 2: b" sky", 3: b" is", 4: b" blue", 9: b"\xc3", 10: b"\xa9"}


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ([1, 2], True),
        ([[1, 2], [3]], True),
        ("text", False),
        (["a", "b"], False),
        ([], False),
        ([[]], False),
        ([1, "a"], False),  # llama.cpp's mixed prompt is its own extension
        ([True, False], False),
        (None, False),
    ],
)
def test_what_counts_as_a_token_prompt(prompt: Any, expected: bool) -> None:
    assert is_token_prompt(prompt) is expected


def _upstream(
    detokenizer: tuple[str, str] | None, accepts_tokens: bool = False, unavailable: int = 0
) -> Starlette:
    """An upstream that refuses token prompts as llama-cpp-python does, with the detokenizer given (its
    first ``unavailable`` calls answered 503, as while a model loads)."""
    seen: list[Any] = []
    failures = [unavailable]

    async def completions(request: Request) -> Response:
        body = await request.json()
        seen.append(body)
        prompt = body["prompt"]
        if accepts_tokens and isinstance(prompt, list) and not set(prompt) <= set(VOCAB):
            invalid = {"code": 400, "message": "Prompt contains invalid tokens"}  # llama-server's words
            return JSONResponse({"error": {**invalid, "type": "invalid_request_error"}}, status_code=400)
        if not accepts_tokens and not isinstance(prompt, str):
            return JSONResponse(
                {"error": {"message": "prompt: Input should be a valid string"}}, status_code=500
            )
        text = prompt if isinstance(prompt, str) else "tokens"
        choice = {"index": 0, "text": f"[{text}]", "logprobs": None, "finish_reason": "stop"}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        return JSONResponse(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "created": 1,
                "model": "m",
                "choices": [choice],
                "usage": usage,
            }
        )

    async def detokenize(request: Request) -> Response:
        assert detokenizer is not None
        if failures[0] > 0:
            failures[0] -= 1
            return JSONResponse({"error": {"message": "Loading model"}}, status_code=503)
        tokens = (await request.json())["tokens"]
        try:  # strict, as llama-cpp-python decodes
            text = b"".join(VOCAB[t] for t in tokens).decode()
        except (KeyError, UnicodeDecodeError):
            return JSONResponse({"error": {"message": "cannot decode"}}, status_code=500)
        return JSONResponse({detokenizer[1]: text})

    routes = [Route("/v1/completions", completions, methods=["POST"])]
    if detokenizer is not None:
        routes.append(Route(detokenizer[0], detokenize, methods=["POST"]))
    app = Starlette(routes=routes)
    app.state.seen = seen
    return app


@pytest.fixture(
    params=[("/extras/detokenize", "text"), ("/detokenize", "content")], ids=["llama-cpp-python", "llama.cpp"]
)
def detokenizing(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[Any]]]:
    app = _upstream(request.param)
    with run_asgi(app) as upstream, run_proxy(upstream, upstream_kind="openai") as url:
        yield url, app.state.seen


def _complete(url: str, body: dict[str, Any]) -> httpx.Response:
    response = httpx.post(url + "/v1/completions", json=body, timeout=30)
    assert judge(response, "/v1/completions", body).errors == []
    return response


def test_a_refused_token_prompt_is_sent_again_as_its_text(detokenizing: tuple[str, list[Any]]) -> None:
    url, seen = detokenizing
    response = _complete(url, {"model": "m", "prompt": [1, 2, 3, 4]})
    assert response.status_code == 200
    assert response.json()["choices"][0]["text"] == "[The sky is blue]"
    assert [b["prompt"] for b in seen] == [[1, 2, 3, 4], "The sky is blue"]  # once as ids, once as text


def test_ids_that_end_inside_a_character_still_come_through(detokenizing: tuple[str, list[Any]]) -> None:
    url, _ = detokenizing
    whole = _complete(url, {"model": "m", "prompt": [1, 9, 10]})
    assert whole.json()["choices"][0]["text"] == "[Theé]"
    cut = _complete(url, {"model": "m", "prompt": [1, 2, 9]})  # the strict decoder refuses the whole list
    assert cut.json()["choices"][0]["text"] == "[The sky\ufffd]"


def test_token_id_arrays_become_one_text_each(detokenizing: tuple[str, list[Any]]) -> None:
    url, _ = detokenizing
    for stream in (False, True):
        body = {"model": "m", "prompt": [[1, 2], [3, 4]], "stream": stream}
        response = _complete(url, body)
        assert response.status_code == 200
        if not stream:
            texts = sorted((c["index"], c["text"]) for c in response.json()["choices"])
            assert texts == [(0, "[The sky]"), (1, "[ is blue]")]


def test_without_a_detokenizer_the_client_gets_a_clear_400() -> None:
    with run_asgi(_upstream(None)) as upstream, run_proxy(upstream, upstream_kind="openai") as url:
        body = {"model": "m", "prompt": [1, 2]}
        response = _complete(url, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("prompt", "unsupported_prompt")
    assert "send the prompt as text" in error["message"]


@pytest.mark.parametrize("where", [("/extras/detokenize", "text"), ("/detokenize", "content")])
def test_a_detokenizer_that_failed_once_is_asked_again(where: tuple[str, str]) -> None:
    """Only an answer settles the probe: a 503 (or a timeout) says nothing of the endpoint."""
    with (
        run_asgi(_upstream(where, unavailable=1)) as upstream,
        run_proxy(upstream, upstream_kind="openai") as url,
    ):
        first = httpx.post(url + "/v1/completions", json={"model": "m", "prompt": [1, 2]}, timeout=30)
        second = _complete(url, {"model": "m", "prompt": [1, 2]})
    assert first.status_code == 503  # worth asking again, unlike "no detokenizer"
    assert second.status_code == 200, second.text
    assert second.json()["choices"][0]["text"] == "[The sky]"


def test_an_upstream_that_takes_token_prompts_gets_them_unchanged() -> None:
    app = _upstream(("/extras/detokenize", "text"), accepts_tokens=True)
    with run_asgi(app) as upstream, run_proxy(upstream, upstream_kind="openai") as url:
        response = _complete(url, {"model": "m", "prompt": [1, 2]})
    assert response.json()["choices"][0]["text"] == "[tokens]"
    assert [b["prompt"] for b in app.state.seen] == [[1, 2]]


def test_ids_the_upstreams_vocabulary_lacks_are_the_clients_400() -> None:
    """Not a refusal of token prompts: their text would not mend them. Read as one, the prompt was
    detokenized, the bad id sent as U+FFFD, and a 200 answered a prompt the client never sent."""
    app = _upstream(("/detokenize", "content"), accepts_tokens=True)
    with run_asgi(app) as upstream, run_proxy(upstream, upstream_kind="openai") as url:
        response = _complete(url, {"model": "m", "prompt": [1, 2, 99999999]})
    assert response.status_code == 400
    assert "invalid tokens" in response.json()["error"]["message"]
    assert [b["prompt"] for b in app.state.seen] == [[1, 2, 99999999]]  # asked once, as the client sent it


@pytest.mark.backend
def test_llama_cpp_python_serves_token_prompts_through_the_proxy(llama_cpp_python: str) -> None:
    direct = httpx.post(
        llama_cpp_python + "/v1/completions",
        json={"prompt": [100, 200, 300, 400], "max_tokens": 2},
        timeout=60,
    )
    assert direct.status_code == 500  # Q74: refused by llama-cpp-python itself
    with run_proxy(llama_cpp_python) as url:
        for prompt in ([100, 200, 300, 400], [[2, 23391], [2, 1902]]):
            for stream in (False, True):
                body = {"model": "m", "prompt": prompt, "max_tokens": 2, "temperature": 0, "stream": stream}
                response = _complete(url, body)
                assert response.status_code == 200, response.text
        metrics = httpx.get(url + "/metrics", timeout=10).text
    assert 'rule="Q74"' in metrics
