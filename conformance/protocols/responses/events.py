"""Normalized chat-completion chunks as the Responses API's stream events: a state machine, one per stream.

The event sequence is OpenAI's (openai-python ``ResponseStreamEvent``; OpenAPI ``ResponseStreamEvent``):
``response.created``, ``response.in_progress``; per output item ``response.output_item.added``, for a
message or reasoning ``response.content_part.added``, the deltas (``response.output_text.delta``,
``response.reasoning_text.delta``, ``response.function_call_arguments.delta``), their ``.done``,
``response.content_part.done``, ``response.output_item.done``; then exactly one of
``response.completed``, ``response.incomplete`` (``finish_reason: "length"``: ``max_output_tokens``
reached) or ``response.failed`` (:meth:`ResponseEvents.fail`: an upstream fault mid-stream, so that
the stream always ends with a terminal event, never cut). ``sequence_number`` counts from 0 without a
gap over every event; ``output_index`` counts items, ``content_index`` is 0 (one part per item).

Input: the chunks the proxy's normalizer (or the backend) emits: one choice at index 0, ``delta``
with ``content``, ``reasoning_content`` (or ``reasoning``: vLLM's name, Q39) and ``tool_calls``
fragments (``index``, ``id`` and ``name`` on the first), ``finish_reason`` on the last, usage on a
``choices: []`` chunk. A ``custom`` tool's call (sent upstream as a function with one ``input``
string) is told whole when it ends, as ``response.custom_tool_call_input.delta``/``.done``: its text
is inside JSON until then.

An item's text (or a call's arguments) is held in a ``TextSpool``: past ``SPOOL_CHARS`` characters it
goes to a temporary file, and the events that repeat it whole (an item's ``.done`` events, the terminal
event's Response) carry the spool's placeholder in its place, the spool in ``ResponseEvents.spools``
under it; the events' writer (output.py) writes the text there a piece at a time (protocols/
spooled_text.py: 200 MiB of text held whole took the proxy to 2.3 GB). A custom tool's input is read
back whole: it is parsed out of its JSON arguments. A text its file would not take (``TextSpool.failure``:
no writable ``TMPDIR``, a full disk) ends its item as ``incomplete`` with the text empty, never a part of
it told as the whole, and the stream as ``response.failed`` with the reason (``failed_spool``; its
writers stop at it: proxy/writer.py, backend/generation.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..spooled_text import SpoolFile, TextSpool
from .logprobs import response_logprobs
from .response import (
    custom_input,
    error_object,
    failed_error,
    function_call_item,
    message_item,
    new_item_id,
    new_response_id,
    output_text_part,
    phase_of,
    reasoning_item,
    response_object,
    response_status,
    response_usage,
)

__all__ = ["ResponseEvents"]


@dataclass(slots=True)
class _Item:
    kind: str  # "message", "reasoning", "call"
    output_index: int
    item_id: str
    text: TextSpool
    """The text (or arguments) as it came: its deltas joined once, at the end (``+=`` on an attribute
    copies the whole text for every delta, quadratic over a long answer), or the answer's file past
    ``SPOOL_CHARS`` (``ResponseEvents.spool_file``)."""
    call_index: int | None = None
    call_id: str = ""
    name: str = ""
    custom: bool = False
    namespaced: Mapping[str, tuple[str, str]] | None = None
    """The translation's namespaced tools, which name this call (see ``function_call_item``)."""
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    """A message's token logprobs so far (logprobs.py), when the request asked for them."""

    def finished(self, text: str, status: str, phase: str | None = None) -> dict[str, Any]:
        if self.kind == "message":
            return message_item(self.item_id, text, status, self.logprobs, phase)
        if self.kind == "reasoning":
            return reasoning_item(self.item_id, text, status)
        return function_call_item(
            self.item_id,
            self.call_id,
            self.name,
            text,
            custom=self.custom,
            status=status,
            namespaced=self.namespaced,
        )

    def started(self) -> dict[str, Any]:
        if self.kind == "message":
            return message_item(self.item_id, "", "in_progress")
        if self.kind == "reasoning":
            return reasoning_item(self.item_id, "", "in_progress")
        return function_call_item(
            self.item_id,
            self.call_id,
            self.name,
            "",
            custom=self.custom,
            status="in_progress",
            namespaced=self.namespaced,
        )


class ResponseEvents:
    """The Response events of one stream: ``start()``, ``feed(chunk)`` for each chunk, then ``finish()``
    or ``fail(error)``; each returns the events to send, in order."""

    def __init__(
        self,
        echo: Mapping[str, Any],
        *,
        model: str | None = None,
        response_id: str | None = None,
        created_at: int | None = None,
        custom_tools: frozenset[str] = frozenset(),
        namespaced: Mapping[str, tuple[str, str]] | None = None,
        logprobs: bool = False,
    ) -> None:
        self.echo = echo
        self.model = model
        self.response_id = response_id or new_response_id()
        self.created_at = created_at if created_at is not None else int(time.time())
        self.custom_tools = custom_tools
        self.namespaced = namespaced
        self.logprobs = logprobs
        """Whether the request asked for the text's logprobs: not asked, none is passed on."""
        self.output: list[dict[str, Any]] = []
        self.usage: dict[str, Any] | None = None
        self.finish_reason: Any = None
        self.response: dict[str, Any] | None = None
        """The final Response, once the terminal event is made (with placeholders for ``spools``)."""
        self.spools: dict[str, TextSpool] = {}
        """The texts gone to a file, by the placeholder that stands for each in the events and in
        ``response`` (see the module's docstring)."""
        self.spool_file = SpoolFile()
        """The one file of the answer's long texts, and their count held in memory together."""
        self._sequence = 0
        self._spool_failure: str | None = None
        self._open: _Item | None = None
        self._held_logprobs: list[dict[str, Any]] = []

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _snapshot(self, status: str, **extra: Any) -> dict[str, Any]:
        return response_object(
            self.echo,
            self.response_id,
            self.created_at,
            model=self.model,
            status=status,
            output=list(self.output),
            **extra,
        )

    def start(self) -> list[dict[str, Any]]:
        return [
            self._event("response.created", response=self._snapshot("in_progress")),
            self._event("response.in_progress", response=self._snapshot("in_progress")),
        ]

    def feed(self, chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
        # The per-chunk path of every Responses stream: plain dict checks (an ABC's isinstance costs
        # several times more), and one event built directly for the usual chunk, a text delta.
        out: list[dict[str, Any]] = []
        usage = chunk.get("usage")
        if usage is not None and isinstance(usage, dict):
            self.usage = dict(usage)
        if self.model is None and isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        choices = chunk.get("choices")
        if type(choices) is not list:
            return out
        for choice in choices:
            if type(choice) is not dict or choice.get("index", 0) != 0:
                continue  # a Response has one answer
            delta = choice.get("delta")
            if type(delta) is dict:
                out += self._delta(choice, delta)
            finish = choice.get("finish_reason")
            if finish is not None:
                self.finish_reason = finish
        return out

    def _delta(self, choice: dict[str, Any], delta: dict[str, Any]) -> list[dict[str, Any]]:
        """The events of one chunk's delta: reasoning, text (with its logprobs), a refusal, call fragments."""
        out: list[dict[str, Any]] = []
        # ``reasoning_content``, or ``reasoning`` where the chat route is set to send that name
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and type(reasoning) is str:
            out += self._text("reasoning", reasoning)
        text = delta.get("content")
        logprobs = choice.get("logprobs") if self.logprobs else None
        if text and type(text) is str:
            out += self._text("message", text, response_logprobs(logprobs) if logprobs else None)
        elif logprobs and not (reasoning or delta.get("refusal") or delta.get("tool_calls")):
            # Tokens whose text the server holds back (a character cut in two) come before it.
            self._held_logprobs += response_logprobs(logprobs)
        text = delta.get("refusal")
        if text and type(text) is str:
            entries = response_logprobs(logprobs, "refusal") if logprobs else None
            out += self._text("message", text, entries)
        calls = delta.get("tool_calls")
        if calls and type(calls) is list:
            for fragment in calls:
                if type(fragment) is dict:
                    out += self._call(fragment)
        return out

    def _open_item(self, item: _Item) -> list[dict[str, Any]]:
        out = self._close("completed", phase_of(True) if item.kind == "call" else None)
        if item.kind != "message":
            self._held_logprobs = []  # held for a text that did not come
        item.output_index = len(self.output)  # after the item it follows is done and counted
        self._open = item
        out.append(
            self._event("response.output_item.added", output_index=item.output_index, item=item.started())
        )
        if item.kind == "message":
            part: dict[str, Any] = output_text_part("")
        elif item.kind == "reasoning":
            part = {"type": "reasoning_text", "text": ""}
        else:
            return out
        out.append(self._content_event("response.content_part.added", item, part=part))
        return out

    def _content_event(self, kind: str, item: _Item, **fields: Any) -> dict[str, Any]:
        return self._event(
            kind, item_id=item.item_id, output_index=item.output_index, content_index=0, **fields
        )

    def _text(
        self, kind: str, text: str, entries: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        item = self._open
        if item is None or item.kind != kind:
            item_id = new_item_id("msg" if kind == "message" else "rs")
            item = _Item(kind, len(self.output), item_id, TextSpool(file=self.spool_file))
            out += self._open_item(item)
        item.text.append(text)
        event: dict[str, Any] = {
            "type": "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta",
            "sequence_number": self._sequence,
            "item_id": item.item_id,
            "output_index": item.output_index,
            "content_index": 0,
            "delta": text,
        }
        if kind == "message":
            entries = entries or []
            if self._held_logprobs:
                entries, self._held_logprobs = self._held_logprobs + entries, []
            item.logprobs += entries
            event["logprobs"] = entries
        self._sequence += 1
        out.append(event)
        return out

    def _call(self, fragment: Mapping[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        index = fragment.get("index", 0)
        index = index if isinstance(index, int) else 0
        function = fragment.get("function") if isinstance(fragment.get("function"), Mapping) else {}
        assert isinstance(function, Mapping)
        item = self._open
        if item is None or item.kind != "call" or item.call_index != index:
            name = function.get("name") if isinstance(function.get("name"), str) else ""
            call_id = (
                fragment.get("id")
                if isinstance(fragment.get("id"), str) and fragment.get("id")
                else new_item_id("call")
            )
            custom = name in self.custom_tools
            item_id = new_item_id("ctc" if custom else "fc")
            item = _Item("call", len(self.output), item_id, TextSpool(file=self.spool_file), call_index=index)
            item.call_id, item.name, item.custom = str(call_id), str(name), custom
            item.namespaced = self.namespaced
            out += self._open_item(item)
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.text.append(arguments)
            if not item.custom:
                out.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        item_id=item.item_id,
                        output_index=item.output_index,
                        delta=arguments,
                    )
                )
        return out

    def _close(self, status: str, phase: str | None = None) -> list[dict[str, Any]]:
        """The events that end the open item, if any (``status``: the item's own; ``phase``: a
        message's, where it is known: see ``phase_of``)."""
        item, self._open = self._open, None
        if item is None:
            return []
        out: list[dict[str, Any]] = []
        if item.kind == "message" and self._held_logprobs:
            item.logprobs += self._held_logprobs
            self._held_logprobs = []
        text = self._whole_text(item)
        if item.text.failure is not None:
            status = "incomplete"  # its text was not kept (see the module's docstring)
        done = item.finished(text, status, phase)
        if item.kind == "message":
            logprobs = item.logprobs
            out.append(self._content_event("response.output_text.done", item, text=text, logprobs=logprobs))
            part = output_text_part(text, logprobs)
            out.append(self._content_event("response.content_part.done", item, part=part))
        elif item.kind == "reasoning":
            out.append(self._content_event("response.reasoning_text.done", item, text=text))
            part = {"type": "reasoning_text", "text": text}
            out.append(self._content_event("response.content_part.done", item, part=part))
        elif item.custom:
            text = custom_input(text)
            where = {"item_id": item.item_id, "output_index": item.output_index}
            out.append(self._event("response.custom_tool_call_input.delta", **where, delta=text))
            out.append(self._event("response.custom_tool_call_input.done", **where, input=text))
        else:
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item.item_id,
                    output_index=item.output_index,
                    name=done["name"],
                    arguments=text,
                )
            )
        out.append(self._event("response.output_item.done", output_index=item.output_index, item=done))
        self.output.append(done)
        return out

    def _whole_text(self, item: _Item) -> str:
        """An ending item's whole text, or the placeholder of its spooled text (a custom tool's input
        is read back: it is parsed out of its arguments)."""
        spool = item.text
        if item.custom:
            text = spool.text()
            spool.close()
        else:
            text = spool.placed(self.spools)
        if spool.failure is not None:
            self._spool_failure = self._spool_failure or spool.failure
        return text

    def failed_spool(self) -> str | None:
        """Why a text of this stream could not be kept (see the module's docstring), or None: the
        stream's writer then ends it with ``fail``."""
        item = self._open
        if item is not None and item.text.failure is not None:
            return item.text.failure
        return self._spool_failure

    def finish(self, usage: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The events that end a stream that ended well: the open item's end, then
        ``response.completed`` or ``response.incomplete``; ``response.failed`` where a text could not
        be kept (its last part written to its file by that end)."""
        if usage is not None:
            self.usage = dict(usage)
        status, incomplete = response_status(self.finish_reason)
        out = self._close("incomplete" if status == "incomplete" else "completed", phase_of(False))
        if (failure := self.failed_spool()) is not None:
            return out + self.fail({"message": failure})
        self.response = self._snapshot(
            status, usage=response_usage(self.usage), incomplete_details=incomplete
        )
        kind = "response.completed" if status == "completed" else "response.incomplete"
        out.append(self._event(kind, response=self.response))
        return out

    def error(self, error: Mapping[str, Any]) -> dict[str, Any]:
        """An ``error`` event (OpenAI's for a stream that stops where it stands, without a Response)
        made from an OpenAI error body: what ends a stream when ``fail``'s events cannot be sent in
        order (the proxy's shutdown deadline during its last event)."""
        inner, message = error_object(error)
        return self._event(
            "error",
            code=inner.get("code") if isinstance(inner.get("code"), str) else None,
            message=message,
            param=inner.get("param") if isinstance(inner.get("param"), str) else None,
        )

    def fail(self, error: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """The events that end a stream the upstream broke off: the open item ended as incomplete, then
        ``response.failed`` with ``error`` (an OpenAI error body) as the Response's ``error``."""
        out = self._close("incomplete")
        self.response = self._snapshot("failed", usage=response_usage(self.usage), error=failed_error(error))
        out.append(self._event("response.failed", response=self.response))
        return out
