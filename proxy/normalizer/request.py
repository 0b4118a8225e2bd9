"""What the normalizer needs to know about the client's request, read once per request."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Endpoint", "RequestInfo", "clean_model_name"]

Endpoint = Literal["chat", "completions"]


def clean_model_name(name: str) -> str:
    """A served model name without a local path or a ``.gguf`` suffix (Q09 path leak)."""
    if ("/" in name and (name.startswith(("/", "./", "~")) or name.endswith(".gguf"))) or "\\" in name:
        name = re.split(r"[\\/]", name)[-1]
    return name.removesuffix(".gguf") or "model"


def _stop_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list):
        return tuple(s for s in value if isinstance(s, str) and s)
    return ()


def _echo(body: dict[str, Any]) -> tuple[str, int]:
    """With ``echo``: the text prompt the answer's text begins with, or how many token ids it has."""
    prompt = body.get("prompt")
    if body.get("echo") is not True:
        return "", 0
    if isinstance(prompt, str):
        return prompt, 0
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return "", len(prompt)
    return "", 0


def _limit(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _positive_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


@dataclass(frozen=True, slots=True)
class RequestInfo:
    endpoint: Endpoint
    model: str | None = None
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    logprobs: bool = False
    alternatives: bool = True
    """Whether a chat request asked for ``top_logprobs``: without it OpenAI sends ``top_logprobs: []``."""
    echoed: str = ""
    """The prompt a completion's text begins with (``echo`` and a text prompt): no stop sequence in it."""
    echoed_tokens: int = 0
    """How many token ids the prompt a completion's text begins with has (``echo``, a token prompt)."""
    generates: bool = True
    """False for ``max_tokens: 0`` (a prompt scored with ``echo``): no generated text at all. The
    upstream is asked for one token (for 0 some generate without end), which an empty stop sequence,
    matching where the generated text begins, cuts off."""

    @classmethod
    def from_body(cls, endpoint: Endpoint, body: dict[str, Any], *, alias: str | None = None) -> RequestInfo:
        """What ``body`` asks for; the model reported is ``alias`` when given, else the body's, cleaned."""
        options = body.get("stream_options")
        stream = body.get("stream") is True
        include_usage = stream and isinstance(options, dict) and options.get("include_usage") is True
        max_tokens = _positive_int(body.get("max_completion_tokens")) or _positive_int(body.get("max_tokens"))
        generates = 0 not in (_limit(body.get("max_completion_tokens")), _limit(body.get("max_tokens")))
        asked = body.get("model")
        model = alias or (clean_model_name(asked) if isinstance(asked, str) and asked else None)
        logprobs = body.get("logprobs")
        echoed, echoed_tokens = _echo(body)
        return cls(
            endpoint=endpoint,
            model=model,
            stream=stream,
            include_usage=include_usage,
            max_tokens=max_tokens,
            stop=_stop_list(body.get("stop")) if generates else ("",),
            n=_positive_int(body.get("n")) or 1,
            logprobs=logprobs is True or (type(logprobs) is int and logprobs >= 0),
            alternatives=endpoint != "chat" or bool(body.get("top_logprobs")),
            echoed=echoed,
            echoed_tokens=echoed_tokens,
            generates=generates,
        )

    def echoing(self, body: dict[str, Any]) -> RequestInfo:
        """This request's info for the request ``body`` sent for it (one of a fan-out, or a prompt asked
        again as text): the prompt its text echoes is that request's own."""
        if self.endpoint != "completions" or body.get("echo") is not True:
            return self
        echoed, echoed_tokens = _echo(body)
        return dataclasses.replace(self, echoed=echoed, echoed_tokens=echoed_tokens)

    @property
    def object_name(self) -> str:
        return "chat.completion.chunk" if self.endpoint == "chat" else "text_completion"

    @property
    def body_object_name(self) -> str:
        return "chat.completion" if self.endpoint == "chat" else "text_completion"
