"""``stream: false`` on a stream-only upstream (seed 002): normalized chunks folded into one response.

What is held is bounded by ``Aggregator.limit`` (the proxy's 64 MiB cap on an upstream's answer): each
text part counts its characters and the cost of one more string object, logprobs their JSON size, each
choice a fixed 2 KiB (300,000 choice indexes once held 887 MB when a choice counted nothing). Past
it the answer is a 502 (``APIError``); unbounded, a 200 MB stream took the proxy to a 1 GB peak.
"""

from __future__ import annotations

from typing import Any

from conformance import jsoncodec
from conformance.api_errors import APIError
from conformance.request_info import RequestInfo

from ..upstream import MAX_JSON_BODY

__all__ = ["Aggregator"]


class _Choice:
    __slots__ = ("arguments", "calls", "finish", "logprobs", "reasoning", "refusal", "text")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        # Each call's arguments in their fragments, joined once: appended to one string, a 20 MB call in
        # 1 KB fragments took 16 s of the event loop (each fragment copied all before it).
        self.arguments: dict[int, list[str]] = {}
        self.logprobs: dict[str, Any] | None = None
        self.finish = "stop"


_PART_COST = 64  # bytes of a short str object and its list slot, beside its characters
_CHOICE_COST = 2048  # bytes of one choice held: its _Choice, lists and dict, and the normalizer's state


class Aggregator:
    limit = MAX_JSON_BODY
    """The most bytes held (estimated) before the answer is refused."""

    def __init__(self, request: RequestInfo) -> None:
        self._request = request
        self._choices: dict[int, _Choice] = {}
        self._head: dict[str, Any] | None = None
        self._held = 0
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        """Fold ``chunk`` in; a ``APIError`` (502) once the answer holds more than ``limit``."""
        self._fold(chunk)
        if self._held > self.limit:
            raise APIError.make(
                f"the upstream's answer is over the {self.limit >> 20} MiB the proxy holds to answer "
                "without streaming; ask for it with stream: true",
                502,
            )

    def _hold(self, parts: list[str], text: str) -> None:
        parts.append(text)
        self._held += len(text) + _PART_COST

    def _fold(self, chunk: dict[str, Any]) -> None:
        if self._head is None:
            self._head = {k: chunk[k] for k in ("id", "created", "model")}
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        for raw in chunk["choices"]:
            choice = self._choices.get(raw["index"])
            if choice is None:
                choice = self._choices[raw["index"]] = _Choice()
                self._held += _CHOICE_COST
            if raw.get("finish_reason"):
                choice.finish = raw["finish_reason"]
            self._logprobs(choice, raw.get("logprobs"))
            if self._request.endpoint == "completions":
                self._hold(choice.text, raw["text"])
                continue
            delta = raw["delta"]
            if delta.get("content"):
                self._hold(choice.text, delta["content"])
            if delta.get("refusal"):
                self._hold(choice.refusal, delta["refusal"])
            reasoning = delta.get(self._request.reasoning_field)
            if reasoning:
                self._hold(choice.reasoning, reasoning)
            for call in delta.get("tool_calls") or ():
                index, function = call["index"], call["function"]
                if index not in choice.calls:
                    choice.calls[index] = {"id": call["id"], "type": "function", "function": dict(function)}
                    choice.arguments[index] = []
                self._hold(choice.arguments[index], function.get("arguments") or "")

    def result(self, usage: dict[str, Any] | None) -> dict[str, Any]:
        head = self._head or {}
        choices = [self._body_choice(index, c) for index, c in sorted(self._choices.items())]
        return {
            "id": head.get("id"),
            "object": self._request.body_object_name,
            "created": head.get("created"),
            "model": head.get("model"),
            "choices": choices,
            "usage": self.usage or usage,
        }

    def _logprobs(self, choice: _Choice, logprobs: Any) -> None:
        if not isinstance(logprobs, dict):
            return
        self._held += len(jsoncodec.dumps(logprobs))
        if choice.logprobs is None:
            choice.logprobs = {
                key: list(value) if isinstance(value, list) else value for key, value in logprobs.items()
            }
            return
        for key, value in logprobs.items():
            if isinstance(value, list) and isinstance(choice.logprobs.get(key), list):
                choice.logprobs[key].extend(value)

    def _body_choice(self, index: int, choice: _Choice) -> dict[str, Any]:
        text = "".join(choice.text)
        if self._request.endpoint == "completions":
            return {"text": text, "index": index, "logprobs": choice.logprobs, "finish_reason": choice.finish}
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text if text or not choice.calls else None,
            "refusal": "".join(choice.refusal) or None,
        }
        if choice.calls:
            for index, call in choice.calls.items():
                call["function"]["arguments"] = "".join(choice.arguments[index])
            message["tool_calls"] = [choice.calls[i] for i in sorted(choice.calls)]
        if choice.reasoning:
            message[self._request.reasoning_field] = "".join(choice.reasoning)
        return {
            "index": index,
            "message": message,
            "logprobs": choice.logprobs,
            "finish_reason": choice.finish,
        }
