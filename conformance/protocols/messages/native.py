"""An upstream's own ``/v1/messages`` (llama-server, vLLM, Ollama serve one), normalized by the rules the
translation keeps: every message and every call named with the proxy's ids (``msg_``, ``toolu_``), the
model as the client may name it (Q09: no local path, or ``--model-alias``), usage with both cache counts
and cumulative in ``message_delta``, a stop sequence met said so (Q89), block indexes from 0 in order,
each block stopped before the message ends, and a stream that breaks off ended with Anthropic's
``error`` event instead of being cut.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..front_end import named_events
from .errors import messages_error
from .response import STOP_REASONS, PrefillEcho, continuation, new_id

__all__ = ["NativeMessages", "normalize_message"]

_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _usage(usage: Any) -> dict[str, Any]:
    given = usage if isinstance(usage, Mapping) else {}
    out = dict(given)
    for key in _USAGE_KEYS:
        value = given.get(key)
        out[key] = value if isinstance(value, int) and not isinstance(value, bool) else 0
    return out


def _stop_reason(value: Any, matched: Any) -> Any:
    """A ``stop_reason`` an upstream gave in chat's words (``stop``, ``length``) in Anthropic's;
    ``stop_sequence`` where it names the sequence met (llama-server says ``end_turn``, Q89)."""
    reason = STOP_REASONS.get(value, value) if isinstance(value, str) else value
    return "stop_sequence" if reason == "end_turn" and isinstance(matched, str) else reason


def normalize_message(message: dict[str, Any], model: str | None, prefill: str = "") -> dict[str, Any]:
    """An upstream's ``Message`` with the proxy's ids and model, its usage whole, its stop reason in
    Anthropic's words, and its text the ``prefill``'s continuation alone (``continuation``)."""
    message["id"] = new_id("msg")
    message["type"] = "message"
    message["role"] = "assistant"
    if model is not None:
        message["model"] = model
    message["usage"] = _usage(message.get("usage"))
    message.setdefault("stop_sequence", None)
    message["stop_reason"] = _stop_reason(message.get("stop_reason"), message["stop_sequence"])
    for block in message.get("content") or ():
        if isinstance(block, dict) and block.get("type") == "tool_use":
            block["id"] = new_id("toolu")
            if not isinstance(block.get("input"), dict):
                block["input"] = {}
        elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            block["text"], prefill = continuation(block["text"], prefill), ""  # the answer's first text
    return message


class NativeMessages:
    """One answer of an upstream's own ``/v1/messages``: the protocol's
    :class:`conformance.protocols.front_end.NativeStream`."""

    answer_name = "Message"

    def __init__(self, model: str | None, prefill: str = "") -> None:
        """``prefill``: the request's final assistant text, which the answer continues; llama-server
        with ``--jinja`` writes it again first on its own endpoint too."""
        self._model = model
        self._echo = PrefillEcho(prefill)
        self._echo_index = 0  # the block whose text ``_echo`` holds
        self._ended = False
        self._open: set[int] = set()
        self._blocks = 0
        self._indexes: dict[Any, int] = {}
        self._usage: dict[str, Any] = _usage(None)

    @property
    def ended(self) -> bool:
        return self._ended

    def answers(self, body: Mapping[str, Any]) -> bool:
        return body.get("type") == "message" or (
            "content" in body and "choices" not in body and "error" not in body
        )

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        if self._ended or not isinstance(kind, str):
            return []
        if self._echo.prefill:
            return self._unechoed(event)
        return self._fed(event, kind)

    def _fed(self, event: dict[str, Any], kind: str) -> list[dict[str, Any]]:
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = normalize_message(event["message"], self._model)
            message["stop_reason"] = None
            self._usage.update({k: message["usage"][k] for k in _USAGE_KEYS})
        elif kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            self._block(event, kind)
        elif kind == "message_delta":
            self._delta(event)
            return [*self._closed(), event]  # every block ends before the message's delta, as Anthropic's
        elif kind in ("message_stop", "error"):
            out = self._closed() if kind == "message_stop" else []
            self._ended = True
            return [*out, event]
        return [event]

    def _unechoed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """``event`` while the answer may still begin with the prefill written again: its text held
        until that is known (``PrefillEcho``), and sent on before whatever comes next."""
        out = self._fed(event, event["type"])
        delta = event.get("delta")
        if (
            event["type"] == "content_block_delta"
            and isinstance(delta, dict)
            and delta.get("type") == "text_delta"
        ):
            text = delta.get("text")
            if isinstance(text, str):
                self._echo_index = event["index"]
                delta["text"] = self._echo.text(text)
                return out if delta["text"] else []
        if not self._echo.holding:
            return out
        released = {"type": "text_delta", "text": self._echo.release()}
        return [{"type": "content_block_delta", "index": self._echo_index, "delta": released}, *out]

    def _block(self, event: dict[str, Any], kind: str) -> None:
        """The block's index in the proxy's order (from 0, as blocks start), its call's id the proxy's."""
        given = event.get("index")
        if kind == "content_block_start":
            self._indexes[given] = self._blocks
            self._open.add(self._blocks)
            self._blocks += 1
            block = event.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                block["id"] = new_id("toolu")
                block["input"] = {}
        index = self._indexes.get(given, max(self._blocks - 1, 0))
        event["index"] = index
        if kind == "content_block_stop":
            self._open.discard(index)

    def _delta(self, event: dict[str, Any]) -> None:
        """``message_delta``: its stop reason in Anthropic's words, its usage cumulative and whole."""
        delta = event.get("delta")
        if isinstance(delta, dict):
            delta.setdefault("stop_sequence", None)
            delta["stop_reason"] = _stop_reason(delta.get("stop_reason"), delta["stop_sequence"])
        given = event.get("usage")
        for key, value in given.items() if isinstance(given, Mapping) else ():
            if isinstance(value, int) and not isinstance(value, bool):
                self._usage[key] = value
        event["usage"] = dict(self._usage)

    def _closed(self) -> list[dict[str, Any]]:
        """``content_block_stop`` for each block still open when the message ends (at its delta, else
        at its stop)."""
        out = [{"type": "content_block_stop", "index": index} for index in sorted(self._open)]
        self._open.clear()
        return out

    def fail(self, error: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        self._ended = True
        return [messages_error(dict(error or {}))]

    def whole(self, body: dict[str, Any]) -> dict[str, Any]:
        return normalize_message(body, self._model, self._echo.prefill)

    def encode(self, events: list[dict[str, Any]]) -> bytes:
        return named_events(events)

    async def kept(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return events  # nothing is stored: the Messages API keeps no state

    async def kept_body(self, body: dict[str, Any]) -> dict[str, Any]:
        return body
