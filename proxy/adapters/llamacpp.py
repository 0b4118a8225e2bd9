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

# llama-server parses /v1/completions and native /completion bodies with the same code
# (``params_from_json_cmpl``), so the client's keys go across unchanged (grammar, json_schema, top_k,
# min_p, repeat_penalty, mirostat*, dry_*, xtc_*, samplers, cache_prompt, id_slot, lora, ...),
# and ``model`` too: a llama-server in router mode picks the model for /completion by it. Left out:
# keys the proxy owns (stream, stream_options, n: fanned out) or answers from the native event shape
# (response_fields would strip the content/stop fields translate_native_event reads), and OpenAI-only
# keys native ignores (user; echo/logprobs/best_of/suffix only reach here when they ask for nothing).
_NOT_NATIVE = frozenset(
    {"stream", "stream_options", "n", "echo", "logprobs", "best_of", "suffix", "user", "response_fields"}
)
# OpenAI's names for native n_predict, by precedence (llama.cpp: n_predict > max_completion_tokens >
# max_tokens). They are folded into n_predict rather than passed on, so that the proxy's default below
# cannot shadow them and builds that read only n_predict still get them.
_MAX_TOKENS_KEYS = ("n_predict", "max_completion_tokens", "max_tokens")
_STOP_TYPES = {"limit": "length", "eos": "stop", "word": "stop"}


def is_llamacpp_props(answer: Any) -> bool:
    """Whether ``GET /props`` answered like llama-server / ik_llama.cpp."""
    return isinstance(answer, dict) and "default_generation_settings" in answer


def native_completion_body(body: dict[str, Any]) -> dict[str, Any]:
    """The client's ``/v1/completions`` body as a native ``/completion`` streaming request."""
    # Nulls are dropped: native reads a present null as "the default", and for json_schema that
    # default is ``{}``, which would constrain the output to any JSON value.
    native = {k: v for k, v in body.items() if v is not None and k not in _NOT_NATIVE}
    for key in _MAX_TOKENS_KEYS[1:]:
        native.pop(key, None)
    limit = next((body[k] for k in _MAX_TOKENS_KEYS if body.get(k) is not None), 16)
    native["n_predict"] = limit  # 16 is OpenAI's default max_tokens; native would run to the context end
    native["stream"] = True
    native.setdefault("cache_prompt", True)
    if isinstance(native.get("stop"), str):
        native["stop"] = [native["stop"]]  # native takes only an array (the OpenAI endpoint converts)
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
        # The native stream is read for its text only; what it cannot answer (logprobs, echo, several
        # choices) or would silently ignore (suffix, best_of) goes to the OpenAI endpoint, which honours
        # it or refuses it.
        native_ok = (
            isinstance(body.get("prompt"), str)
            and not body.get("logprobs")
            and not body.get("echo")
            and not body.get("n_probs")  # its probabilities come in a native shape the stream reader drops
            and body.get("suffix") is None
            and body.get("best_of") in (None, 1)
            and body.get("n") in (None, 1)
            and body.get("n_cmpl") in (None, 1)
        )
        if endpoint == "completions" and body.get("stream") is True and native_ok:
            return UpstreamCall("/completion", native_completion_body(body), translate_native_event)
        return UpstreamCall(OPENAI_PATHS[endpoint], body)

    async def count_tokens(self, upstream: Upstream, text: str, timeout: float) -> int | None:  # noqa: ASYNC109
        answer = await upstream.json("POST", "/tokenize", {"content": text}, timeout=timeout)
        if isinstance(answer, dict) and isinstance(answer.get("tokens"), list):
            return len(answer["tokens"])
        return None
