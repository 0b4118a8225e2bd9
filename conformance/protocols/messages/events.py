"""Normalized chat-completion chunks as the Messages API's stream events: a state machine, one per stream.

The event sequence is Anthropic's (its "Streaming Messages" guide; anthropic-python
``types/raw_message_stream_event.py``, whose ``MessageStream`` accumulates a message from them):
``message_start`` (the message with empty ``content``, ``stop_reason: null`` and the prompt's
``input_tokens`` where they were counted before it, ``prompt_tokens``), then a ``ping``; per
content block ``content_block_start`` with its ``index`` (0, 1, ... in order), its deltas
(``text_delta``, ``thinking_delta`` then one ``signature_delta``, ``input_json_delta`` whose
``partial_json`` joined is the call's ``input``), ``content_block_stop``; then ``message_delta`` with
``stop_reason``, ``stop_sequence`` and the usage so far (cumulative, ``output_tokens`` with the input
counts), and ``message_stop``. A fault after the first event (a cut connection, an upstream's error
inside the stream) ends the stream with an ``error`` event, as Anthropic's end an overloaded stream:
the SDKs raise it; never a stream cut without a word.

Input: the chunks the proxy's normalizer (or the backend) emits: one choice at index 0, ``delta`` with
``content``, ``reasoning_content`` (or ``reasoning``, Q39) and ``tool_calls`` fragments (``index``,
``id`` and ``name`` on the first), ``finish_reason`` on the last, usage on a ``choices: []`` chunk. A call
cut off by the token limit leaves its ``input_json_delta`` unfinished and ends ``stop_reason:
"max_tokens"``: what a client reads as a call it must not run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import messages_error
from .response import PrefillEcho, Signature, message_object, message_usage, new_id, stop_reason

__all__ = ["MessageEvents"]


class MessageEvents:
    """The events of one stream: ``start()``, ``feed(chunk)`` for each chunk, then ``finish()`` or
    ``fail(error, status)``; each returns the events to send, in order."""

    def __init__(self, model: str, stops: tuple[str, ...] = (), prefill: str = "") -> None:
        self.model = model
        self.stops = stops
        self._echo = PrefillEcho(prefill)  # the request's final assistant text, which the answer continues
        self.message_id = new_id("msg")
        self.usage: Mapping[str, Any] | None = None
        self.prompt_tokens = 0
        """The prompt's tokens where counted before the stream opened (else 0): ``message_start``'s
        ``input_tokens``, as Anthropic's own stream has them (Q88); ``message_delta`` then gives the
        count the answer came with, its cached tokens apart."""
        self.finish_reason: Any = None
        self.matched: Any = None
        self.called = False
        self._index = -1
        self._open: str | None = None  # the open block's type
        self._call_index: int | None = None
        self._thinking = Signature()

    def start(self) -> list[dict[str, Any]]:
        usage = message_usage({"prompt_tokens": self.prompt_tokens})
        message = message_object(self.message_id, self.model, [], None, None, usage)
        return [{"type": "message_start", "message": message}, {"type": "ping"}]

    def feed(self, chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
        # The per-chunk path of every Messages stream: plain dict checks, and one event built directly
        # for the usual chunk, a text delta.
        usage = chunk.get("usage")
        if usage is not None and type(usage) is dict:
            self.usage = usage
        choices = chunk.get("choices")
        if type(choices) is not list:
            return []
        out: list[dict[str, Any]] = []
        for choice in choices:
            if type(choice) is not dict or choice.get("index", 0) != 0:
                continue  # a Message has one answer
            delta = choice.get("delta")
            if type(delta) is dict:
                out += self._delta(delta)
            finish = choice.get("finish_reason")
            if finish is not None:
                self.finish_reason, self.matched = finish, choice.get("stop_reason")
        return out

    def _delta(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        thinking = delta.get("reasoning_content") or delta.get("reasoning")
        if thinking and type(thinking) is str:
            out += self._release()
            out += self._text("thinking", thinking)
        text = delta.get("content")
        if text and type(text) is str:
            text = self._echo.text(text) if self._echo.prefill else text
            if text:
                out += self._text("text", text)
        calls = delta.get("tool_calls")
        if calls and type(calls) is list:
            out += self._release()
            for fragment in calls:
                if type(fragment) is dict:
                    out += self._call(fragment)
        return out

    def _text(self, kind: str, text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._open != kind:
            block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else None
            out += self._start_block(kind, block or {"type": "text", "text": ""})
        if kind == "thinking":
            self._thinking.add(text)
            delta: dict[str, Any] = {"type": "thinking_delta", "thinking": text}
        else:
            delta = {"type": "text_delta", "text": text}
        out.append({"type": "content_block_delta", "index": self._index, "delta": delta})
        return out

    def _release(self) -> list[dict[str, Any]]:
        """The text held as a possible prefill, sent as it is: anything else came after it."""
        held = self._echo.release()
        return self._text("text", held) if held else []

    def _call(self, fragment: Mapping[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        index = fragment.get("index", 0)
        function = fragment.get("function") if isinstance(fragment.get("function"), Mapping) else {}
        assert isinstance(function, Mapping)
        if self._open != "tool_use" or self._call_index != index:
            name = function.get("name") if isinstance(function.get("name"), str) else ""
            block: dict[str, Any] = {"type": "tool_use", "id": new_id("toolu"), "name": name, "input": {}}
            out += self._start_block("tool_use", block)
            self._call_index = index if isinstance(index, int) else 0
            self.called = True
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            delta = {"type": "input_json_delta", "partial_json": arguments}
            out.append({"type": "content_block_delta", "index": self._index, "delta": delta})
        return out

    def _start_block(self, kind: str, block: dict[str, Any]) -> list[dict[str, Any]]:
        out = self._close()
        self._index += 1
        self._open = kind
        out.append({"type": "content_block_start", "index": self._index, "content_block": block})
        return out

    def _close(self) -> list[dict[str, Any]]:
        """The events that end the open block, if any: a thinking block's signature first."""
        kind, self._open = self._open, None
        if kind is None:
            return []
        out: list[dict[str, Any]] = []
        if kind == "thinking":
            signed, self._thinking = self._thinking.value(), Signature()
            delta = {"type": "signature_delta", "signature": signed}
            out.append({"type": "content_block_delta", "index": self._index, "delta": delta})
        out.append({"type": "content_block_stop", "index": self._index})
        return out

    def finish(self, usage: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The events that end a stream that ended well: the open block's end, ``message_delta`` with
        the stop reason and the whole usage, ``message_stop``."""
        out = self._release() + self._close()
        reason, sequence = stop_reason(self.finish_reason, self.matched, self.stops, self.called)
        counts = message_usage(usage if usage is not None else self.usage)
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        out.append({"type": "message_delta", "delta": delta, "usage": counts})
        out.append({"type": "message_stop"})
        return out

    def fail(self, error: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """The event that ends a stream the upstream broke off: Anthropic's ``error`` event, made from
        an OpenAI error body."""
        self._open = None
        return [messages_error(dict(error or {}))]
