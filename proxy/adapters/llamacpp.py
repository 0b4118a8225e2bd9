"""llama.cpp family (llama-server, ik_llama.cpp): streamed ``/v1/completions`` go to native ``/completion``.

Builds with the ik_llama.cpp #767 bug (Q14) stream ``"text": ""`` on every OpenAI chunk; the native
endpoint still carries the text, so the adapter reads that and translates each event to an OpenAI
``text_completion`` chunk for the normalizer.
"""

from __future__ import annotations

from typing import Any

from ..normalizer.request import Endpoint
from ..upstream import Upstream
from .base import OPENAI_PATHS, UpstreamCall

__all__ = ["LlamaCppAdapter", "is_llamacpp_props", "native_completion_body", "translate_native_event"]

# OpenAI request keys and their native names; the rest is left out (native rejects little, but guesses).
_NATIVE_KEYS = {
    "prompt": "prompt",
    "max_tokens": "n_predict",
    "temperature": "temperature",
    "top_p": "top_p",
    "stop": "stop",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "logit_bias": "logit_bias",
}
_STOP_TYPES = {"limit": "length", "eos": "stop", "word": "stop"}


def is_llamacpp_props(answer: Any) -> bool:
    """Whether ``GET /props`` answered like llama-server / ik_llama.cpp."""
    return isinstance(answer, dict) and "default_generation_settings" in answer


def native_completion_body(body: dict[str, Any]) -> dict[str, Any]:
    native: dict[str, Any] = {"stream": True, "cache_prompt": True}
    for key, name in _NATIVE_KEYS.items():
        if body.get(key) is not None:
            native[name] = body[key]
    if isinstance(native.get("stop"), str):
        native["stop"] = [native["stop"]]
    native.setdefault("n_predict", 16)  # OpenAI's default max_tokens; native would run to the context end
    return native


def translate_native_event(payload: Any) -> Any:
    """A native ``/completion`` event as an OpenAI ``text_completion`` chunk (errors pass through)."""
    if not isinstance(payload, dict) or "error" in payload or "content" not in payload:
        return payload
    final = payload.get("stop") is True
    chunk: dict[str, Any] = {
        "object": "text_completion",
        "model": payload.get("model") or "",
        "choices": [
            {
                "text": payload.get("content") or "",
                "index": 0,
                "logprobs": None,
                "finish_reason": _STOP_TYPES.get(str(payload.get("stop_type")), "stop") if final else None,
            }
        ],
    }
    if final:
        prompt = payload.get("tokens_evaluated")
        completion = payload.get("tokens_predicted")
        if isinstance(prompt, int) and isinstance(completion, int):
            chunk["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
    return chunk


class LlamaCppAdapter:
    name = "llamacpp"

    def call(self, endpoint: Endpoint, body: dict[str, Any]) -> UpstreamCall:
        native_ok = isinstance(body.get("prompt"), str) and not body.get("logprobs") and not body.get("echo")
        if endpoint == "completions" and body.get("stream") is True and native_ok:
            return UpstreamCall("/completion", native_completion_body(body), translate_native_event)
        return UpstreamCall(OPENAI_PATHS[endpoint], body)

    async def count_tokens(self, upstream: Upstream, text: str) -> int | None:
        answer = await upstream.json("POST", "/tokenize", {"content": text})
        if isinstance(answer, dict) and isinstance(answer.get("tokens"), list):
            return len(answer["tokens"])
        return None
