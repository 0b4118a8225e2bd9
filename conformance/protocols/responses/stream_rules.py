"""Responses API streams: the event sequence, its indices, and deltas against what they add up to.

Spec facts (openapi.yaml ``ResponseStreamEvent`` and the ``Response*Event`` schemas; openai-python
``lib/streaming/responses/_responses.py``, whose ``ResponseStreamState`` builds the final Response from the
events by ``output_index`` and ``content_index``):

- every event carries ``sequence_number``; OpenAI numbers them from 0 without a gap (its streams start
  ``response.created`` with 0), so a client can tell a lost event;
- ``response.created`` comes first; exactly one terminal event (``response.completed``,
  ``response.incomplete``, ``response.failed``, or an ``error`` event) comes last; OpenAI sends no
  ``[DONE]`` after it (openai-python stops at one, so one is only a warning);
- ``response.output_item.added`` opens output ``output_index`` (0, 1, ... in order), with the item's id
  that every later event of the item repeats as ``item_id``; ``response.content_part.added`` opens
  ``content_index`` of it; deltas and ``.done`` events name both, and openai-python indexes its snapshot
  by them (an unknown index raises);
- the deltas of a part joined are its ``.done`` text (``output_text``, ``refusal``, ``reasoning_text``,
  ``reasoning_summary_text``) and a function call's joined argument deltas are the ``.done`` arguments;
  ``response.output_item.done`` carries the item so accumulated, and the terminal response's ``output``
  holds exactly the items done;
- the terminal event agrees with the response's ``status``: ``completed`` / ``incomplete`` / ``failed``;
  the terminal response is judged as a body is (response_rules.py);
- OpenAI's Responses streams name each event on an ``event:`` line equal to its ``type`` (unlike its chat
  streams, which carry only data lines); openai-python reads the type from the data.

Deltas are not kept: each part's joined text is held as its length, a SHA-256 and its first characters
(:class:`Joined`), so a long stream costs the memory of its items, not of its text.

llama-server's native ``/v1/responses`` (clients.md) lacked ``sequence_number``, ``output_index`` and
``content_index``: the schema reports them missing and the index rules stay quiet on what is absent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance.rules.context import Context, ProtocolRules, clipped
from conformance.rules.leaks import model_path
from conformance.rules.schema_checks import schema_findings
from conformance.rules.template_tokens import TokenScan, text_tokens
from conformance.sse import SSEBlock

from .open_responses import response_fields
from .response_rules import item_id_prefix, judge_response, response_id

__all__ = [
    "END_RULES",
    "EVENT_RULES",
    "RULES",
    "TERMINAL",
    "ItemState",
    "PartState",
    "ResponsesState",
    "arguments_delta",
    "arguments_done",
    "body_tokens",
    "created_first",
    "done_sentinel",
    "event_line",
    "event_schema",
    "is_responses_payload",
    "item_added",
    "item_done",
    "items_done",
    "judge_body",
    "judge_event",
    "judged_state",
    "limit_reached",
    "part_added",
    "part_done",
    "response_started",
    "sequence_number",
    "state",
    "stream_failed",
    "terminal_last",
    "terminal_missing",
    "terminal_response",
    "text_delta",
    "text_done",
    "text_tokens_delta",
]

TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})
_LIFECYCLE = frozenset({"response.created", "response.in_progress", "response.queued"})
_STATUS = {
    "response.completed": "completed",
    "response.incomplete": "incomplete",
    "response.failed": "failed",
}
_DEFINED = frozenset(
    {
        *TERMINAL,
        *_LIFECYCLE,
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_text.annotation.added",
        "response.refusal.delta",
        "response.refusal.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
    }
)
# The text a part's .done event repeats, by its delta event's type: (done type, key of the text there).
_PART_TEXT = {
    "response.output_text.delta": ("response.output_text.done", "text"),
    "response.refusal.delta": ("response.refusal.done", "refusal"),
    "response.reasoning_text.delta": ("response.reasoning_text.done", "text"),
}
_DONE_TEXT = {done: key for done, key in _PART_TEXT.values()}
_TEXT_DELTAS = frozenset({*_PART_TEXT, "response.reasoning_summary_text.delta"})
_TEXT_DONES = frozenset({*_DONE_TEXT, "response.reasoning_summary_text.done"})
_PART_ADDED = frozenset({"response.content_part.added", "response.reasoning_summary_part.added"})
_PART_DONE = frozenset({"response.content_part.done", "response.reasoning_summary_part.done"})
# Where each kind of part keeps its text inside its item.
_PART_KEY = {"output_text": "text", "refusal": "refusal", "reasoning_text": "text", "summary_text": "text"}


def event_schema(kind: Any) -> str:
    """The schema definition an event of type ``kind`` is judged by."""
    name = kind if kind in _DEFINED else "other"
    return f"response_stream_event#/$defs/{name}"


_HEAD = 60
"""Characters of a joined text kept to show in a finding."""


class Joined:
    """Deltas joined, as far as judging needs them: whether a text equals them, and their start."""

    __slots__ = ("_digest", "deltas", "head", "length")

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self.head = ""
        self.length = 0
        self.deltas = 0

    def add(self, delta: str) -> None:
        self._digest.update(delta.encode("utf-8", "surrogatepass"))
        self.length += len(delta)
        self.deltas += 1
        if len(self.head) < _HEAD:
            self.head = (self.head + delta)[:_HEAD]

    def equals(self, text: str) -> bool:
        if len(text) != self.length:
            return False
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest() == self._digest.digest()

    def shown(self) -> str:
        return repr(self.head) if self.length <= _HEAD else f"{self.head!r}... ({self.length} characters)"


@dataclass(slots=True)
class PartState:
    """One content part (or reasoning summary part) of an item: its text as the deltas built it."""

    event: int
    kind: str | None
    text: Joined = field(default_factory=Joined)
    done: bool = False


@dataclass(slots=True)
class ItemState:
    """One output item, opened by ``response.output_item.added``."""

    event: int
    item_id: str | None
    kind: str | None
    added: Mapping[str, Any]
    parts: dict[int, PartState] = field(default_factory=dict)
    summaries: dict[int, PartState] = field(default_factory=dict)
    arguments: Joined = field(default_factory=Joined)
    done: Mapping[str, Any] | None = None


@dataclass(slots=True)
class ResponsesState:
    """What a Responses stream showed so far."""

    next_sequence: int | None = 0
    """The sequence_number the next event must carry; None once a gap or a missing one was reported."""
    first_type: str | None = None
    terminal_event: int | None = None
    terminal_type: str | None = None
    items: dict[int, ItemState] = field(default_factory=dict)
    late_reported: bool = False
    final: Mapping[str, Any] | None = None
    """The finished Response: a body, or the terminal event's ``response``."""
    text_key: tuple[Any, ...] | None = None
    """The output text the last ``output_text`` delta added to (its item id, output and content index)."""
    tokens: TokenScan = field(default_factory=TokenScan)
    """That text's scan for a chat template's control tokens (a bounded tail): one text at a time, as
    a stream sends them, so it needs no open part (llama-server's deltas named no index)."""


def state(ctx: Context) -> ResponsesState:
    """The Responses state of ``ctx``, made at its first event or body."""
    if not isinstance(ctx.protocol_state, ResponsesState):
        ctx.protocol_state = ResponsesState()
    return ctx.protocol_state


def judged_state(ctx: Context) -> ResponsesState | None:
    """The Responses state of ``ctx`` once an event or a body was judged; None before."""
    return ctx.protocol_state if isinstance(ctx.protocol_state, ResponsesState) else None


def judge_event(ctx: Context, event: int, payload: dict[str, Any], block: SSEBlock | None = None) -> None:
    """Every rule on one event of a Responses stream."""
    stream = state(ctx)
    kind = payload.get("type")
    schema_findings(ctx, event, payload, event_schema(kind))
    if block is not None:
        event_line(ctx, event, block, kind)
    for rule in EVENT_RULES:
        rule(ctx, stream, event, payload)
    if kind in TERMINAL and stream.terminal_event is None:
        stream.terminal_event, stream.terminal_type = event, kind


def event_line(ctx: Context, event: int, block: SSEBlock, kind: Any) -> None:
    """An ``event:`` line, when there is one, names the data's type (OpenAI sends both)."""
    if block.event is not None and isinstance(kind, str) and block.event != kind:
        ctx.warn(
            "responses-event-line",
            f"'event: {block.event[:60]}' on an event whose type is {clipped(kind, 60)}",
            event=event,
            quirk="spec",
        )


def sequence_number(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """``sequence_number`` counts the events from 0 without a gap (reported once: one gap shifts the rest)."""
    expected = state.next_sequence
    if expected is None:
        return
    value = payload.get("sequence_number")
    if isinstance(value, int) and not isinstance(value, bool) and value == expected:
        state.next_sequence = expected + 1
        return
    state.next_sequence = None
    if "sequence_number" not in payload:
        return  # the schema reports it missing (llama-server's native events had none)
    ctx.error(
        "responses-sequence-number",
        f"sequence_number {str(value)[:20]} where {expected} was due: OpenAI numbers the events from 0 "
        "without a gap",
        event=event,
        pointer="/sequence_number",
        quirk="spec",
    )


def created_first(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """The first event is ``response.created``: clients take the response's id and model from it."""
    if state.first_type is not None:
        return
    kind = payload.get("type")
    state.first_type = str(kind)
    if kind != "response.created" and kind != "error":
        ctx.error(
            "responses-created-first",
            f"the stream starts with {clipped(str(kind), 60)}, not 'response.created'",
            event=event,
            pointer="/type",
            quirk="spec",
        )


def terminal_last(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """Nothing follows the terminal event: one of completed, incomplete, failed or error, once."""
    if state.terminal_event is None or state.late_reported:
        return
    kind = payload.get("type")
    state.late_reported = True
    again = kind in TERMINAL
    ctx.error(
        "responses-terminal-last" if not again else "responses-terminal-once",
        f"{clipped(str(kind), 60)} after the terminal {state.terminal_type!r} (event {state.terminal_event})"
        + ("; a stream ends with exactly one" if again else "; it ends the stream"),
        event=event,
        pointer="/type",
        quirk="spec",
    )


def response_started(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """``response.created`` / ``in_progress`` / ``queued``: the response as it starts, its id and model
    judged, its status not yet a finished one."""
    response = payload.get("response")
    if payload.get("type") not in _LIFECYCLE or not isinstance(response, Mapping):
        return
    response_id(ctx, event, response, "/response")
    response_fields(ctx, event, response, "/response")
    if ctx.unset(ctx.model) and isinstance(response.get("model"), str):
        ctx.model = response["model"]
        model_path(ctx, event, ctx.model, "/response/model")
    status = response.get("status")
    if status not in (None, "in_progress", "queued"):
        ctx.error(
            "responses-status-early",
            f"{payload.get('type')} with status {clipped(str(status), 40)}: the response has not finished",
            event=event,
            pointer="/response/status",
            quirk="spec",
        )


def terminal_response(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """The terminal event agrees with its response's status, and its output holds the items done."""
    kind = str(payload.get("type"))
    response = payload.get("response")
    if kind not in _STATUS or not isinstance(response, Mapping):
        return
    status = response.get("status")
    if status != _STATUS[kind]:
        ctx.error(
            "responses-terminal-status",
            f"{kind} carries a response with status {clipped(str(status), 40)}, not {_STATUS[kind]!r}",
            event=event,
            pointer="/response/status",
            quirk="spec",
        )
    _output_matches(ctx, state, event, response)
    state.final = response
    judge_response(ctx, event, response, "/response")


def _output_matches(ctx: Context, state: ResponsesState, event: int, response: Mapping[str, Any]) -> None:
    output = response.get("output")
    if not isinstance(output, list) or not state.items:
        return
    done = {index: item.done for index, item in state.items.items() if item.done is not None}
    for index, item in sorted(done.items()):
        if index >= len(output) or output[index] != item:
            ctx.error(
                "responses-output-mismatch",
                f"the terminal response's output[{index}] is not the item output_item.done sent",
                event=event,
                pointer=f"/response/output/{index}",
                quirk="spec",
            )
            return
    if len(output) > len(state.items):
        ctx.error(
            "responses-output-mismatch",
            f"the terminal response has {len(output)} output items; the stream added {len(state.items)}",
            event=event,
            pointer="/response/output",
            quirk="spec",
        )


def item_added(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """``output_item.added`` opens the next output index, with the item's id that its events repeat."""
    index, item = payload.get("output_index"), payload.get("item")
    if payload.get("type") != "response.output_item.added":
        return
    if not isinstance(item, Mapping) or not isinstance(index, int):
        return
    if index != len(state.items) or index in state.items:
        ctx.error(
            "responses-output-index",
            f"output_item.added with output_index {index}; the next item is {len(state.items)}",
            event=event,
            pointer="/output_index",
            quirk="spec",
        )
    # A reused index opens a new item there: the events after it are judged against the new one, so one
    # wrong index is one finding (and the terminal output's mismatch), not one per later event.
    item_id, kind = item.get("id"), item.get("type")
    state.items[index] = ItemState(
        event, item_id if isinstance(item_id, str) else None, kind if isinstance(kind, str) else None, item
    )
    item_id_prefix(ctx, event, item, "/item")
    if kind == "function_call" and isinstance(item.get("arguments"), str) and item["arguments"]:
        state.items[index].arguments.add(item["arguments"])  # arguments given whole when the call opens


def _item(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> ItemState | None:
    """The item an event names by ``output_index`` and ``item_id``; reported when it was never added."""
    index = payload.get("output_index")
    if not isinstance(index, int):
        return None  # the schema reports it
    item = state.items.get(index)
    kind = str(payload.get("type"))
    if item is None:
        ctx.error(
            "responses-index-unknown",
            f"{kind} names output_index {index}, which no output_item.added opened",
            event=event,
            pointer="/output_index",
            quirk="spec",
        )
        return None
    given = payload.get("item")
    item_id = (
        payload.get("item_id")
        if "item_id" in payload
        else given.get("id")
        if isinstance(given, Mapping)
        else None
    )
    if isinstance(item_id, str) and item.item_id is not None and item_id != item.item_id:
        ctx.error(
            "responses-item-id-mismatch",
            f"{kind} names item {clipped(item_id, 60)} at output_index {index}, which is"
            f" {clipped(item.item_id, 60)}",
            event=event,
            pointer="/item_id" if "item_id" in payload else "/item/id",
            quirk="spec",
        )
    if item.done is not None and kind != "response.output_item.done":
        ctx.error(
            "responses-item-after-done",
            f"{kind} for output_index {index} after its output_item.done",
            event=event,
            pointer="/type",
            quirk="spec",
        )
    return item


def _part(
    ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any], *, summary: bool = False
) -> PartState | None:
    item = _item(ctx, state, event, payload)
    key = "summary_index" if summary else "content_index"
    index = payload.get(key)
    if item is None or not isinstance(index, int):
        return None
    parts = item.summaries if summary else item.parts
    part = parts.get(index)
    if part is None:
        ctx.error(
            "responses-index-unknown",
            f"{payload.get('type')} names {key} {index} of output {payload.get('output_index')}, which no "
            f"{'reasoning_summary_part' if summary else 'content_part'}.added opened",
            event=event,
            pointer=f"/{key}",
            quirk="spec",
        )
    return part


def part_added(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """``content_part.added`` (``reasoning_summary_part.added``) opens the item's next part."""
    if payload.get("type") not in _PART_ADDED:
        return
    summary = payload.get("type") == "response.reasoning_summary_part.added"
    key = "summary_index" if summary else "content_index"
    item = _item(ctx, state, event, payload)
    index, part = payload.get(key), payload.get("part")
    if item is None or not isinstance(index, int):
        return
    parts = item.summaries if summary else item.parts
    if index != len(parts):
        ctx.error(
            "responses-content-index",
            f"{payload.get('type')} with {key} {index}; the item's next part is {len(parts)}",
            event=event,
            pointer=f"/{key}",
            quirk="spec",
        )
        if index in parts:
            return
    kind = part.get("type") if isinstance(part, Mapping) else None
    parts[index] = PartState(event, kind if isinstance(kind, str) else None)


def text_delta(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """A text delta names a part that was opened; its text is joined for the part's ``.done``."""
    if payload.get("type") not in _TEXT_DELTAS:
        return
    summary = payload.get("type") == "response.reasoning_summary_text.delta"
    part = _part(ctx, state, event, payload, summary=summary)
    if part is not None and isinstance(payload.get("delta"), str):
        part.text.add(payload["delta"])


def text_tokens_delta(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """An output text, joined across its deltas, holds no chat template's control token."""
    if payload.get("type") != "response.output_text.delta":
        return
    key = tuple(
        value if isinstance(value, (str, int)) else None
        for value in (payload.get("item_id"), payload.get("output_index"), payload.get("content_index"))
    )
    if key != state.text_key:  # another text begins: a token does not span two
        state.text_key, state.tokens = key, TokenScan()
    text_tokens(ctx, state.tokens, payload.get("delta"), event, "/delta")


def body_tokens(ctx: Context, body: Mapping[str, Any]) -> None:
    """A body's output texts hold no chat template's control token. Not judge_response's: a stream's
    terminal response is judged there too, and its text was judged delta by delta, where the client saw
    it."""
    output = body.get("output")
    for index, item in enumerate(output if isinstance(output, list) else ()):
        content = item.get("content") if isinstance(item, Mapping) else None
        for position, part in enumerate(content if isinstance(content, list) else ()):
            if isinstance(part, Mapping) and part.get("type") == "output_text":
                where = f"/output/{index}/content/{position}/text"
                text_tokens(ctx, TokenScan(), part.get("text"), None, where)


def text_done(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """A text's ``.done`` repeats its deltas joined."""
    kind = str(payload.get("type"))
    if kind not in _TEXT_DONES:
        return
    summary = kind == "response.reasoning_summary_text.done"
    part = _part(ctx, state, event, payload, summary=summary)
    key = "text" if summary else _DONE_TEXT[kind]
    text = payload.get(key)
    if part is not None and isinstance(text, str):
        _same_text(ctx, event, kind, f"/{key}", text, part.text)


def _same_text(ctx: Context, event: int, kind: str, pointer: str, done: str, joined: Joined) -> None:
    if not joined.equals(done):
        ctx.error(
            "responses-done-text",
            f"{kind} says {_clip(done)}; its deltas joined are {joined.shown()}",
            event=event,
            pointer=pointer,
            quirk="spec",
        )


def _clip(text: str) -> str:
    return repr(text) if len(text) <= _HEAD else f"{text[:_HEAD]!r}... ({len(text)} characters)"


def part_done(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """``content_part.done`` carries the part with the text its deltas made."""
    kind = str(payload.get("type"))
    if kind not in _PART_DONE:
        return
    summary = kind == "response.reasoning_summary_part.done"
    part_state = _part(ctx, state, event, payload, summary=summary)
    part = payload.get("part")
    if part_state is None or not isinstance(part, Mapping):
        return
    part_state.done = True
    key = _PART_KEY.get(str(part.get("type")))
    text = part.get(key) if key else None
    if isinstance(text, str):
        _same_text(ctx, event, kind, f"/part/{key}", text, part_state.text)


def arguments_delta(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """A call's arguments delta names an item that was added; it is joined for the ``.done``."""
    if payload.get("type") != "response.function_call_arguments.delta":
        return
    item = _item(ctx, state, event, payload)
    if item is not None and isinstance(payload.get("delta"), str):
        item.arguments.add(payload["delta"])


def arguments_done(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """A call's ``arguments.done`` repeats its deltas joined."""
    if payload.get("type") != "response.function_call_arguments.done":
        return
    item = _item(ctx, state, event, payload)
    arguments = payload.get("arguments")
    if item is not None and isinstance(arguments, str):
        _same_text(ctx, event, str(payload.get("type")), "/arguments", arguments, item.arguments)


def item_done(ctx: Context, state: ResponsesState, event: int, payload: Mapping[str, Any]) -> None:
    """``output_item.done`` carries the item as its events built it: same id and type, the texts and
    arguments the deltas made, a function call's name and call_id as added."""
    if payload.get("type") != "response.output_item.done":
        return
    item_state, item = _item(ctx, state, event, payload), payload.get("item")
    if item_state is None or not isinstance(item, Mapping):
        return
    if item_state.done is not None:
        ctx.error(
            "responses-item-done-twice",
            f"a second output_item.done for output_index {payload.get('output_index')}",
            event=event,
            pointer="/output_index",
            quirk="spec",
        )
        return
    item_state.done = item
    item_id_prefix(ctx, event, item, "/item")
    mismatch = _item_mismatch(item_state, item)
    if mismatch is not None:
        ctx.error(
            "responses-item-done-mismatch",
            f"output_item.done for output_index {payload.get('output_index')}: {mismatch}",
            event=event,
            pointer="/item",
            quirk="spec",
        )


def _item_mismatch(state: ItemState, item: Mapping[str, Any]) -> str | None:
    """How a done item differs from what its events built, if it does."""
    return _kind_mismatch(state, item) or _call_mismatch(state, item) or _parts_mismatch(state, item)


def _kind_mismatch(state: ItemState, item: Mapping[str, Any]) -> str | None:
    if item.get("type") != state.kind:
        return f"type {clipped(str(item.get('type')), 40)}, added as {state.kind!r}"
    for key in ("call_id", "name"):
        added = state.added.get(key)
        if added and item.get(key) != added:
            return f"{key} {clipped(str(item.get(key)), 60)}, added as {clipped(str(added), 60)}"
    return None


def _call_mismatch(state: ItemState, item: Mapping[str, Any]) -> str | None:
    arguments, joined = item.get("arguments"), state.arguments
    if state.kind != "function_call" or not joined.deltas or not isinstance(arguments, str):
        return None
    if joined.equals(arguments):
        return None
    return f"arguments {_clip(arguments)}, the deltas joined {joined.shown()}"


def _parts_mismatch(state: ItemState, item: Mapping[str, Any]) -> str | None:
    for key, parts in (("content", state.parts), ("summary", state.summaries)):
        listed = item.get(key)
        if not isinstance(listed, list) or not parts:
            continue
        if len(listed) != len(parts):
            return f"{len(listed)} {key} parts, the stream added {len(parts)}"
        for index, part in sorted(parts.items()):
            text = _part_text(listed[index] if index < len(listed) else None)
            if text is not None and part.text.deltas and not part.text.equals(text):
                return f"{key}[{index}] is {_clip(text)}, the deltas joined {part.text.shown()}"
    return None


def _part_text(part: Any) -> str | None:
    """The text a part carries under its kind's key (``text``, ``refusal``), if any."""
    key = _PART_KEY.get(str(part.get("type"))) if isinstance(part, Mapping) else None
    text = part.get(key) if isinstance(part, Mapping) and key else None
    return text if isinstance(text, str) else None


EventRule = Callable[[Context, ResponsesState, int, Mapping[str, Any]], None]
# One named check per concern, each for the events it concerns; in this order, so that the sequence and
# the terminal event are judged before what an event says.
EVENT_RULES: tuple[EventRule, ...] = (
    sequence_number,
    created_first,
    terminal_last,
    response_started,
    terminal_response,
    item_added,
    item_done,
    part_added,
    part_done,
    text_delta,
    text_tokens_delta,
    text_done,
    arguments_delta,
    arguments_done,
)


# ------------------------------------------------------------------------------------------ end rules


def terminal_missing(ctx: Context) -> None:
    """A stream that ends without completed, incomplete, failed or error was cut: the client cannot tell
    a finished answer from a dropped connection."""
    state = judged_state(ctx)
    if state is None or state.terminal_event is not None:
        return
    ctx.error(
        "responses-terminal-missing",
        "the stream ended without response.completed, response.incomplete, response.failed or error",
        event=ctx.last_event,
        quirk="spec",
    )


def items_done(ctx: Context) -> None:
    """Every item added is done (with output_item.done) before the terminal event, and every part of it."""
    state = judged_state(ctx)
    if state is None or state.terminal_type not in _STATUS:
        return
    for index, item in sorted(state.items.items()):
        open_parts = [i for i, part in sorted((item.parts | item.summaries).items()) if not part.done]
        if item.done is None or open_parts:
            what = "output_item.done" if item.done is None else f"content_part.done for part {open_parts[0]}"
            ctx.error(
                "responses-item-not-done",
                f"output_index {index} ({item.kind}) got no {what} before {state.terminal_type}",
                event=item.event,
                quirk="spec",
            )
            return


def done_sentinel(ctx: Context) -> None:
    """OpenAI's Responses streams end at the terminal event, without ``data: [DONE]``; openai-python stops
    reading at one, other clients (Codex CLI parses every data line as an event) may not."""
    if ctx.done_event is not None:
        ctx.warn(
            "responses-done-sentinel",
            "'data: [DONE]' in a Responses stream; OpenAI ends it with the terminal event alone",
            event=ctx.done_event,
            quirk="spec",
        )


def stream_failed(ctx: Context) -> None:
    """A stream meant to succeed (a probe's intent) ended in ``response.failed`` or an ``error`` event."""
    state = judged_state(ctx)
    if ctx.intent not in ("success", "finish-length") or state is None:
        return
    if state.terminal_type in ("response.failed", "error"):
        ctx.error(
            "expected-success",
            f"a valid request's stream ended with {state.terminal_type}",
            event=state.terminal_event,
            quirk="spec",
        )


def limit_reached(ctx: Context) -> None:
    """The ``finish-length`` intent: a prompt meant to run into ``max_output_tokens`` ends ``incomplete``
    with reason ``max_output_tokens``, unless usage shows the model stopped on its own before the limit."""
    judged = judged_state(ctx)
    final = judged.final if judged is not None else None
    if final is None:
        return
    status, details = final.get("status"), final.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, Mapping) else None
    used, limit = ctx.completion_tokens, ctx.request.max_tokens
    stopped_early = status == "completed" and used is not None and limit is not None and used < limit
    if reason == "max_output_tokens" or stopped_early or status == "failed":
        return  # failed: stream_failed or the status rules said it
    if ctx.sink.fired("responses-limit-completed"):
        return  # usage already showed the limit reached under 'completed': one fact, said once
    ctx.error(
        "responses-incomplete-expected",
        f"max_output_tokens {limit} was meant to be reached ({used} output tokens) but the response is "
        f"{clipped(str(status), 40)} with incomplete_details {details!r}, not 'incomplete' for"
        " 'max_output_tokens'",
        quirk="spec",
    )


def judge_body(ctx: Context, body: dict[str, Any]) -> None:
    """A non-streamed Response: the schema, then the rules of a finished response."""
    state(ctx).final = body
    schema_findings(ctx, None, body, "response")
    judge_response(ctx, None, body, "")
    body_tokens(ctx, body)


END_RULES = (terminal_missing, items_done, done_sentinel, stream_failed)
"""The rules on a whole Responses stream, run at its end instead of the chat and completions ones."""


def is_responses_payload(payload: Any) -> bool:
    """A Responses event (``type`` ``response.*`` or ``error`` with a message) or a Response object."""
    if not isinstance(payload, Mapping):
        return False
    kind = payload.get("type")
    if isinstance(kind, str) and (kind.startswith("response.") or (kind == "error" and "message" in payload)):
        return True
    return payload.get("object") == "response"


RULES = ProtocolRules(
    route="/v1/responses",
    owns=is_responses_payload,
    names_events=lambda name: name.startswith("response."),
    event=judge_event,
    body=judge_body,
    end=END_RULES,
    limit_reached=limit_reached,
)
"""How the judge reads the Responses API's answers (conformance/protocols/wire.py)."""
