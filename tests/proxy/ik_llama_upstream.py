"""A small upstream that answers as ik_llama.cpp's ``llama-server`` at the commit before its PR #768
(540a2651) does, where the proxy's behaviour depends on it (its answers recorded from a build of that
commit serving Gemma 3 270M with ``-c 2048``; field names and shapes as recorded):

- ``/props`` gives ``n_ctx`` (top level, and one slot's in ``default_generation_settings``);
  there is no ``/apply-template`` (the handler exists in the source but is not routed: 404);
  ``/tokenize`` adds the start token with ``add_special: true`` (``[2, 23391, 29104, 29104]``);
- its OpenAI endpoints read ``max_tokens`` or ``n_predict`` and never ``max_completion_tokens``; with no
  limit it generates on through a shifting context (recorded: ``max_completion_tokens: 3`` streamed 63
  tokens in 8 s and went on; here: ``ENDLESS`` tokens, then ``length``);
- a prompt longer than the context is cut and answered 200 (3,000 words: ``prompt_tokens`` 1978);
- started without ``--jinja``, it refuses any chat request with ``tools`` (500 ``tools param requires
  --jinja flag``) and an image part (500 ``Failed to parse messages: Unsupported content part type:
  "image_url"``), while it enforces ``response_format``'s JSON Schema (here: the first function the
  schema names is called with ``CALLED_WITH``, or, where the schema has no call, a ``response``) and
  finishes ``stop`` (it finishes ``stop`` at its limit too: ``send_final_response``);
- ``logprobs`` on its OpenAI endpoints come back ``null`` (chat, stream: no key at all), while native
  ``/completion`` with ``n_probs`` carries ``completion_probabilities`` as
  ``[{"content": token, "probs": [{"tok_str", "prob"}]}]``, greedy: the chosen token 1.0, the rest 0.0;
  streamed, every event has its token's, and the last (text ``""``) repeats them all.

Its tokenizer is one token per word (and per leading-space word piece), so counts are easy to reason
about; ``WORDS`` is what it generates, in a cycle.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.servers import RecordingUpstream

__all__ = ["CALLED_WITH", "ENDLESS", "WORDS", "IkLlama"]

WORDS = (" one", " two", " three", " four", " five")
ENDLESS = 300
"""Tokens generated for a request without a limit read by the server (it would go on for ever)."""


CALLED_WITH = {"city": "Paris"}
"""The arguments of a call the server writes as JSON output."""


def tokenize(text: str) -> list[int]:
    return [sum(word.encode()) % 50000 for word in text.split()]


class IkLlama(RecordingUpstream):
    def __init__(self, n_ctx: int = 64) -> None:
        self.n_ctx = n_ctx
        self.props = True
        """Whether ``/props`` answers (else 404, as a server that has none)."""
        self.newer_probs = False
        """Native probabilities in llama-server's newer shape (OpenAI's chat entries) instead."""
        self.sampled = False
        """Probabilities as when sampling: the chosen token the third likeliest (0.2), not the first."""
        self.tokenize_delay = 0.0
        """Seconds each ``/tokenize`` takes (a busy server's)."""
        self.tokenized: list[dict[str, Any]] = []
        """The bodies ``/tokenize`` was asked with."""
        self.tokenizing = self.tokenizing_most = 0
        """``/tokenize`` calls in flight now, and the most at once."""
        super().__init__(
            [
                Route("/props", self._props),
                Route("/tokenize", self._tokenize, methods=["POST"]),
                Route("/completion", self._native, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
            ]
        )

    async def _props(self, _: Request) -> Response:
        self.seen.append(("/props", {}))
        if not self.props:
            return JSONResponse({"error": {"code": 404, "message": "File Not Found"}}, status_code=404)
        settings = {"n_ctx": self.n_ctx, "n_predict": -1, "n_probs": 0, "temperature": 0.8}
        props = {"system_prompt": "", "default_generation_settings": settings, "total_slots": 1}
        props |= {"chat_template": "", "bos_token": "<bos>", "eos_token": "<eos>", "n_ctx": self.n_ctx}
        return JSONResponse(props)

    async def _tokenize(self, request: Request) -> Response:
        body = await request.json()
        self.tokenized.append(body)
        self.tokenizing += 1
        self.tokenizing_most = max(self.tokenizing, self.tokenizing_most)
        try:
            await asyncio.sleep(self.tokenize_delay)
        finally:
            self.tokenizing -= 1
        return JSONResponse({"tokens": tokenize(str(body.get("content", "")))})

    def _generated(self, body: dict[str, Any], prompt_tokens: int) -> tuple[list[str], int, str]:
        """(tokens, prompt tokens after the cut, finish reason) for a request, as the server decides."""
        limit = body.get("n_predict", body.get("max_tokens", -1))  # not max_completion_tokens
        prompt_tokens = min(prompt_tokens, self.n_ctx - 4)  # over-long prompts are cut, not refused
        count = ENDLESS if not isinstance(limit, int) or limit < 0 else limit
        return list(itertools.islice(itertools.cycle(WORDS), count)), prompt_tokens, "length"

    async def _native(self, request: Request) -> Response:
        body = await request.json()
        self.seen.append(("/completion", body))
        tokens, prompt_tokens, _ = self._generated(body, len(tokenize(body["prompt"])))
        n_probs = body.get("n_probs", 0)
        shape = _newer_probs if self.newer_probs else _sampled_probs if self.sampled else _probs
        probs = [shape(token, n_probs) for token in tokens]
        final = {"content": "", "stop": True, "id_slot": 0, "stopped_limit": True, "stopped_eos": False}
        final |= {"tokens_predicted": len(tokens), "tokens_evaluated": prompt_tokens, "model": "gemma"}
        if not body.get("stream"):
            whole = final | {"content": "".join(tokens)}
            return JSONResponse(whole | ({"completion_probabilities": probs} if n_probs else {}))

        async def events() -> AsyncIterator[bytes]:
            for token, prob in zip(tokens, probs, strict=True):
                event: dict[str, Any] = {"content": token, "stop": False, "id_slot": 0, "multimodal": False}
                if n_probs:
                    event["completion_probabilities"] = [prob]
                yield _event(event)
            yield _event(final | ({"completion_probabilities": probs} if n_probs else {}))

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        self.seen.append(("/v1/completions", body))
        tokens, prompt_tokens, finish = self._generated(body, len(tokenize(str(body["prompt"]))))
        usage = _usage(prompt_tokens, len(tokens))
        choice = {"text": "".join(tokens), "index": 0, "logprobs": None, "finish_reason": finish}
        answer = {"choices": [choice], "created": 1, "model": "gemma", "object": "text_completion"}
        return JSONResponse(answer | {"usage": usage, "id": "chatcmpl-ik"})

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        self.seen.append(("/v1/chat/completions", body))
        refused = _refusal(body)
        if refused is not None:
            error = {"code": 500, "message": refused, "type": "server_error"}
            return JSONResponse({"error": error}, status_code=500)
        prompt = " ".join(str(m.get("content", "")) for m in body["messages"])
        tokens, prompt_tokens, finish = self._generated(body, len(tokenize(prompt)) + 6)
        if (answer := _json_output(body)) is not None:
            tokens, finish = [answer], "stop"
        usage = _usage(prompt_tokens, len(tokens))
        head = {"id": "chatcmpl-ik", "created": 1, "model": "gemma"}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(tokens)}
            choice = {"finish_reason": finish, "index": 0, "message": message}
            return JSONResponse(head | {"object": "chat.completion", "choices": [choice], "usage": usage})

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            choice = {"finish_reason": finish_reason, "index": 0, "delta": delta}
            return _event(head | {"object": "chat.completion.chunk", "choices": [choice], "usage": usage})

        async def events() -> AsyncIterator[bytes]:
            yield chunk({"role": "assistant", "content": None})
            for token in tokens:
                yield chunk({"content": token})
            yield chunk({}, finish)

        return StreamingResponse(events(), media_type="text/event-stream")


def _refusal(body: dict[str, Any]) -> str | None:
    """What the server without ``--jinja`` refuses a chat request with, if it does."""
    if body.get("tools"):
        return "tools param requires --jinja flag"
    for message in body["messages"]:
        parts = message.get("content")
        for part in parts if isinstance(parts, list) else ():
            if part.get("type") != "text":
                return f'Failed to parse messages: Unsupported content part type: "{part.get("type")}"'
    return None


def _json_output(body: dict[str, Any]) -> str | None:
    """The JSON a ``json_schema`` format makes it write: a call of the schema's first function, or a
    response where it names none."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    names = re.findall(r'"const": "([^"]+)"', json.dumps(fmt["json_schema"]["schema"]))
    if names:
        return json.dumps({"tool_call": {"name": names[0], "arguments": CALLED_WITH}})
    return json.dumps({"response": "one two"})


def _probs(token: str, n_probs: int) -> dict[str, Any]:
    others = [{"tok_str": f" other{i}", "prob": 0.0} for i in range(max(n_probs - 1, 0))]
    return {"content": token, "probs": [{"tok_str": token, "prob": 1.0}, *others]}


def _sampled_probs(token: str, n_probs: int) -> dict[str, Any]:
    likeliest = [(" other0", 0.5), (" other1", 0.3), (token, 0.2)] + [
        (f" other{i}", 0.0) for i in range(2, 20)
    ]
    return {"content": token, "probs": [{"tok_str": t, "prob": p} for t, p in likeliest[:n_probs]]}


def _newer_probs(token: str, n_probs: int) -> dict[str, Any]:
    """llama-server's entry: the chosen token's own logprob, and its alternatives'."""
    chosen = {"id": 7, "token": token, "bytes": list(token.encode()), "logprob": -0.5}
    others = [{"id": i, "token": f" other{i}", "bytes": [32], "logprob": -3.0} for i in range(n_probs)]
    return chosen | {"top_logprobs": [chosen, *others][:n_probs]}


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"completion_tokens": completion, "prompt_tokens": prompt, "total_tokens": prompt + completion}


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"
