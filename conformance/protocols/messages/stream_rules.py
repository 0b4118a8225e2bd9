"""Messages API streams: the event sequence, block indexes, and the message the events build.

Facts (Anthropic's "Streaming Messages" guide; anthropic-python ``_streaming.py`` and
``lib/streaming/_messages.py``):

- every event names itself on an ``event:`` line equal to its data's ``type``; the Python SDK skips an
  event without one (``if sse.event is None: continue``), so its data is lost, and raises on ``event:
  error``;
- ``message_start`` comes first, its message with empty ``content`` and ``stop_reason: null``; ``ping``
  events may come anywhere; ``message_stop`` (or an ``error`` event) comes last, once;
- ``content_block_start`` opens block ``index`` 0, 1, ... in order: the SDK appends each block and looks
  deltas up by index, so a block out of order is a wrong block or an ``IndexError``; each delta's type
  fits its block (``text_delta`` a text block, ``input_json_delta`` a tool use, ``thinking_delta`` and
  ``signature_delta`` a thinking block): the SDK drops one that does not; ``content_block_stop`` closes it
  before the message ends;
- one ``message_delta`` carries ``stop_reason`` (and ``usage.output_tokens``) before ``message_stop``;
  without it the client cannot tell a finished answer from a cut one; the prompt's count is
  ``message_start``'s (``usage.input_tokens``, Anthropic's and llama-server's): a stream that counts it
  only in ``message_delta`` is a warning (Q88: Claude Code's context meter reads 0 for the turn);
- a tool use's ``partial_json`` joined is its ``input``: one JSON object (judged with the message);
- the message the events build (as the SDK's ``MessageStream`` builds it) is judged as a body is
  (message_rules.py).

A text block's text is kept whole only where a rule reads it (the request offered tools or asked for
JSON), as the core keeps chat content.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance.rules.context import Context, ProtocolRules, clipped
from conformance.rules.schema_checks import schema_findings
from conformance.rules.template_tokens import TokenScan, text_tokens
from conformance.rules.tool_use import wants_content
from conformance.sse import SSEBlock

from .message_rules import error_payload, judge_message

__all__ = [
    "END_RULES",
    "EVENT_NAMES",
    "EVENT_RULES",
    "RULES",
    "BlockState",
    "MessagesState",
    "block_delta",
    "block_start",
    "block_stop",
    "blocks_stopped",
    "body_tokens",
    "count_answer",
    "delta_missing",
    "done_sentinel",
    "event_line",
    "is_messages_payload",
    "judge_body",
    "judge_event",
    "limit_reached",
    "message_delta",
    "message_start",
    "started_first",
    "stream_failed",
    "terminal_last",
    "terminal_missing",
]

EVENT_NAMES = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
    }
)
_TERMINAL = frozenset({"message_stop", "error"})
# The block type each delta type adds to.
_DELTA_BLOCK = {
    "text_delta": "text",
    "citations_delta": "text",
    "input_json_delta": "tool_use",
    "thinking_delta": "thinking",
    "signature_delta": "thinking",
}


@dataclass(slots=True)
class BlockState:
    """One content block of a stream, as the events built it."""

    kind: str
    event: int
    block: dict[str, Any]
    """The block as the message holds it: a text block's text (where kept), a call's ``partial_json``."""
    pieces: list[str] = field(default_factory=list)
    stopped: bool = False
    tokens: TokenScan = field(default_factory=TokenScan)
    """A text block's scan for a chat template's control tokens across its deltas (a bounded tail)."""


@dataclass(slots=True)
class MessagesState:
    """What a Messages stream showed so far."""

    first_type: str | None = None
    message: dict[str, Any] | None = None
    """The message of ``message_start``, its stop reason and usage updated by ``message_delta``."""
    blocks: list[BlockState] = field(default_factory=list)
    start_event: int | None = None
    """The ``message_start`` event: where the message's id and model are."""
    delta_event: int | None = None
    terminal_event: int | None = None
    terminal_type: str | None = None
    late_reported: bool = False
    unnamed_reported: bool = False
    final: Mapping[str, Any] | None = None
    """The finished message: a body, or the one the stream built."""


def _state(ctx: Context) -> MessagesState:
    if not isinstance(ctx.protocol_state, MessagesState):
        ctx.protocol_state = MessagesState()
    return ctx.protocol_state


def _judged(ctx: Context) -> MessagesState | None:
    return ctx.protocol_state if isinstance(ctx.protocol_state, MessagesState) else None


def judge_event(ctx: Context, event: int, payload: dict[str, Any], block: SSEBlock | None = None) -> None:
    """Every rule on one event of a Messages stream."""
    stream = _state(ctx)
    kind = payload.get("type")
    if kind == "error":
        error_payload(ctx, event, payload)
    else:
        name = kind if kind in EVENT_NAMES else "other"
        schema_findings(ctx, event, payload, f"message_stream_event#/$defs/{name}")
    if block is not None:
        event_line(ctx, stream, event, block, kind)
    for rule in EVENT_RULES:
        rule(ctx, stream, event, payload)
    if stream.first_type is None and isinstance(kind, str):
        stream.first_type = kind
    if kind in _TERMINAL and stream.terminal_event is None:
        stream.terminal_event, stream.terminal_type = event, kind
        if kind == "message_stop" and stream.message is not None:
            _finished(ctx, stream, event)


def _finished(ctx: Context, stream: MessagesState, event: int) -> None:
    message = stream.message
    assert message is not None
    message["content"] = [state.block for state in stream.blocks]
    for state in stream.blocks:
        if state.kind == "text" and state.pieces:
            state.block["text"] = "".join(state.pieces)
        elif state.kind == "tool_use":
            state.block["partial_json"] = "".join(state.pieces)
    stream.final = message
    judge_message(ctx, event, message, "/message", started=stream.start_event)


def event_line(ctx: Context, stream: MessagesState, event: int, block: SSEBlock, kind: Any) -> None:
    """The ``event:`` line names the data's type: the SDKs dispatch on it and skip an event without one."""
    if block.event is None:
        if not stream.unnamed_reported:
            stream.unnamed_reported = True
            ctx.error(
                "messages-event-line-missing",
                f"a {clipped(str(kind), 40)} event without its 'event:' line: the Anthropic SDKs skip it,"
                " and its data is lost",
                event=event,
                quirk="spec",
            )
    elif isinstance(kind, str) and block.event != kind:
        ctx.error(
            "messages-event-line",
            f"'event: {block.event[:40]}' on an event whose type is {clipped(kind, 40)}: the SDKs read"
            " the name",
            event=event,
            quirk="spec",
        )


def started_first(ctx: Context, stream: MessagesState, event: int, payload: Mapping[str, Any]) -> None:
    """``message_start`` is the first event (an error may stand in for it)."""
    kind = payload.get("type")
    if stream.first_type is None and kind not in ("message_start", "error"):
        ctx.error(
            "messages-start-first",
            f"the stream opens with {clipped(str(kind), 40)}, not message_start: the SDKs build the"
            " message on it",
            event=event,
            quirk="spec",
        )


def terminal_last(ctx: Context, stream: MessagesState, event: int, payload: Mapping[str, Any]) -> None:
    """Nothing but a ping follows ``message_stop`` or an error (reported once)."""
    if stream.terminal_event is None or stream.late_reported or payload.get("type") == "ping":
        return
    stream.late_reported = True
    ctx.error(
        "messages-event-after-end",
        f"a {clipped(str(payload.get('type')), 40)} event after {stream.terminal_type}",
        event=event,
        quirk="spec",
    )


def message_start(ctx: Context, stream: MessagesState, event: int, payload: Mapping[str, Any]) -> None:
    """``message_start``, once, opens a message with no content yet."""
    if payload.get("type") != "message_start":
        return
    given = payload.get("message")
    if stream.message is not None or not isinstance(given, Mapping):
        if stream.message is not None:
            ctx.error("messages-start-twice", "a second message_start", event=event, quirk="spec")
        return
    stream.message = dict(given)
    stream.start_event = event
    if given.get("content"):
        ctx.error(
            "messages-start-content",
            "message_start's message already holds content: the SDKs add the blocks to it, so every index"
            " after it points at the wrong block",
            event=event,
            pointer="/message/content",
            quirk="spec",
        )


def block_start(ctx: Context, stream: MessagesState, event: int, payload: Mapping[str, Any]) -> None:
    """``content_block_start`` opens the next index, after the previous block stopped."""
    if payload.get("type") != "content_block_start":
        return
    index, given = payload.get("index"), payload.get("content_block")
    block = dict(given) if isinstance(given, Mapping) else {}
    kind = block.get("type")
    if index != len(stream.blocks):
        ctx.error(
            "messages-block-index",
            f"content_block_start with index {str(index)[:20]}, where the next block is "
            f"{len(stream.blocks)}: the SDKs add blocks in order and look deltas up by index",
            event=event,
            pointer="/index",
            quirk="spec",
        )
    open_blocks = [i for i, state in enumerate(stream.blocks) if not state.stopped]
    if open_blocks:
        ctx.warn(
            "messages-block-overlap",
            f"block {len(stream.blocks)} starts while block {open_blocks[0]} is still open",
            event=event,
            quirk="spec",
        )
    stream.blocks.append(BlockState(str(kind), event, block))
    if kind == "thinking":
        ctx.reasoning_keys.add("thinking")  # the reasoning intent: the model's thinking was shown


def _block_at(
    ctx: Context, stream: MessagesState, event: int, payload: Mapping[str, Any]
) -> BlockState | None:
    """The open block an event's ``index`` names; reported where there is none."""
    index = payload.get("index")
    found = stream.blocks[index] if isinstance(index, int) and 0 <= index < len(stream.blocks) else None
    if found is None or found.stopped:
        state = "a stopped block" if found is not None else "no block started"
        ctx.error(
            "messages-block-unknown",
            f"{payload.get('type')} for index {str(index)[:20]}: {state}",
            event=event,
            pointer="/index",
            quirk="spec",
        )
        return None
    return found


def block_delta(ctx: Context, stream: MessagesState, event: int, payload: Mapping[str, Any]) -> None:
    """A delta adds to its open block, and its type fits the block's (the SDKs drop one that does not)."""
    if payload.get("type") != "content_block_delta":
        return
    state = _block_at(ctx, stream, event, payload)
    delta = payload.get("delta")
    if state is None or not isinstance(delta, Mapping):
        return
    kind = delta.get("type")
    fits = _DELTA_BLOCK.get(kind) if isinstance(kind, str) else None
    if fits is not None and fits != state.kind:
        ctx.error(
            "messages-delta-type",
            f"a {kind} on block {payload.get('index')}, a {state.kind[:40]} block: the SDKs drop it",
            event=event,
            pointer="/delta/type",
            quirk="spec",
        )
        return
    if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
        state.pieces.append(delta["partial_json"])
    elif kind == "text_delta":
        text_tokens(ctx, state.tokens, delta.get("text"), event, "/delta/text")
        if isinstance(delta.get("text"), str) and wants_content(ctx.request):
            state.pieces.append(delta["text"])


def block_stop(ctx: Context, stream: MessagesState, event: int, payload: Mapping[str, Any]) -> None:
    """``content_block_stop`` closes an open block."""
    if payload.get("type") != "content_block_stop":
        return
    state = _block_at(ctx, stream, event, payload)
    if state is not None:
        state.stopped = True


def message_delta(ctx: Context, stream: MessagesState, event: int, payload: Mapping[str, Any]) -> None:
    """``message_delta`` gives the stop reason and the usage so far (cumulative, as Anthropic's)."""
    if payload.get("type") != "message_delta":
        return
    stream.delta_event = event
    delta, usage = payload.get("delta"), payload.get("usage")
    message = stream.message if stream.message is not None else {}
    if isinstance(delta, Mapping):
        message.update({k: delta.get(k) for k in ("stop_reason", "stop_sequence") if k in delta})
    if isinstance(usage, Mapping):
        given = message.get("usage")
        started = given if isinstance(given, Mapping) else {}
        prompt = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        if not any(_positive(started.get(key)) for key in prompt) and _positive(usage.get("input_tokens")):
            ctx.warn(
                "messages-start-input-tokens",
                f"message_start said input_tokens {clipped(str(started.get('input_tokens')), 20)}, and"
                f" only message_delta counts the prompt ({clipped(str(usage.get('input_tokens')), 20)}):"
                " a client that reads the prompt's size where Anthropic sends it (Claude Code's context"
                " meter) shows 0 for the whole turn",
                event=event,
                pointer="/usage/input_tokens",
                quirk="Q88",
            )
        message["usage"] = {**started, **usage}


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


EVENT_RULES = (
    started_first,
    terminal_last,
    message_start,
    block_start,
    block_delta,
    block_stop,
    message_delta,
)
"""The rules on each event of a Messages stream, in order."""


# ------------------------------------------------------------------------------------------ end rules


def terminal_missing(ctx: Context) -> None:
    """A stream that ends without ``message_stop`` or an error was cut: the SDKs raise or hang on it."""
    stream = _judged(ctx)
    if stream is None or stream.terminal_event is not None:
        return
    ctx.error(
        "messages-stop-missing",
        "the stream ended without message_stop or an error event",
        event=ctx.last_event,
        quirk="spec",
    )


def delta_missing(ctx: Context) -> None:
    """``message_stop`` without a ``message_delta`` first: the message has no stop reason."""
    stream = _judged(ctx)
    if stream is None or stream.terminal_type != "message_stop" or stream.delta_event is not None:
        return
    ctx.error(
        "messages-delta-missing",
        "message_stop without a message_delta before it: the message has no stop_reason and no usage",
        event=stream.terminal_event,
        quirk="spec",
    )


def blocks_stopped(ctx: Context) -> None:
    """Every block started is stopped before ``message_stop``."""
    stream = _judged(ctx)
    if stream is None or stream.terminal_type != "message_stop":
        return
    open_blocks = [i for i, state in enumerate(stream.blocks) if not state.stopped]
    if open_blocks:
        ctx.error(
            "messages-block-not-stopped",
            f"block {open_blocks[0]} got no content_block_stop before message_stop",
            event=stream.blocks[open_blocks[0]].event,
            quirk="spec",
        )


def done_sentinel(ctx: Context) -> None:
    """Anthropic's streams end at ``message_stop``; a ``data: [DONE]`` line is chat's, and an unnamed
    event the SDKs skip."""
    if ctx.done_event is not None:
        ctx.warn(
            "messages-done-sentinel",
            "'data: [DONE]' in a Messages stream; Anthropic ends it with message_stop alone",
            event=ctx.done_event,
            quirk="spec",
        )


def stream_failed(ctx: Context) -> None:
    """A stream meant to succeed (a probe's intent) ended in an error event."""
    stream = _judged(ctx)
    if ctx.intent in ("success", "finish-length") and stream is not None and stream.terminal_type == "error":
        ctx.error(
            "expected-success",
            "a valid request's stream ended with an error event",
            event=stream.terminal_event,
            quirk="spec",
        )


END_RULES = (terminal_missing, delta_missing, blocks_stopped, done_sentinel, stream_failed)
"""The rules on a whole Messages stream, run at its end instead of the chat and completions ones."""


def limit_reached(ctx: Context) -> None:
    """The ``finish-length`` intent: a prompt meant to run into ``max_tokens`` stops ``max_tokens``,
    unless usage shows the model stopped on its own before the limit."""
    stream = _judged(ctx)
    final = stream.final if stream is not None else None
    if final is None:
        return
    reason = final.get("stop_reason")
    used, limit = ctx.completion_tokens, ctx.request.max_tokens
    stopped_early = reason == "end_turn" and used is not None and limit is not None and used < limit
    if reason == "max_tokens" or stopped_early:
        return
    ctx.error(
        "messages-max-tokens-expected",
        f"max_tokens {limit} was meant to be reached ({used} output tokens) but stop_reason is "
        f"{clipped(str(reason), 40)}, not 'max_tokens'",
        quirk="spec",
    )


def judge_body(ctx: Context, body: dict[str, Any]) -> None:
    """A non-streamed Message: the schema, then the rules of a finished message; or a count_tokens
    answer."""
    if "type" not in body and "input_tokens" in body:
        count_answer(ctx, body)
        return
    _state(ctx).final = body
    schema_findings(ctx, None, body, "message")
    judge_message(ctx, None, body)
    body_tokens(ctx, body)


def body_tokens(ctx: Context, body: Mapping[str, Any]) -> None:
    """A body's text blocks hold no chat template's control token. Not judge_message's: a stream's
    message is judged there too, and its text was judged delta by delta, where the client saw it."""
    content = body.get("content")
    for index, block in enumerate(content if isinstance(content, list) else ()):
        if isinstance(block, Mapping) and block.get("type") == "text":
            text_tokens(ctx, TokenScan(), block.get("text"), None, f"/content/{index}/text")


def count_answer(ctx: Context, body: Mapping[str, Any]) -> None:
    """``count_tokens``' answer: ``input_tokens``, a positive integer (a prompt holds at least one
    token: the template's, the text's)."""
    count = body.get("input_tokens")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        ctx.error(
            "messages-count-tokens",
            f"count_tokens answered input_tokens {clipped(str(count), 40)}, not a positive integer",
            pointer="/input_tokens",
            quirk="spec",
        )


def judge_error(ctx: Context, body: Any) -> None:
    """An error body (HTTP 4xx or 5xx, or an error sent with 200)."""
    error_payload(ctx, None, body)


def is_messages_payload(payload: Any) -> bool:
    """A Messages event (its ``type`` one of the guide's), a Message, or Anthropic's error body."""
    if not isinstance(payload, Mapping):
        return False
    kind = payload.get("type")
    if kind == "error":
        return isinstance(payload.get("error"), Mapping)
    if kind == "message":
        return payload.get("role") == "assistant"
    return kind in EVENT_NAMES


RULES = ProtocolRules(
    route="/v1/messages",
    owns=is_messages_payload,
    names_events=lambda name: name in EVENT_NAMES and name != "error",  # the Responses API's too
    event=judge_event,
    body=judge_body,
    end=END_RULES,
    limit_reached=limit_reached,
    error=judge_error,
)
"""How the judge reads the Messages API's answers (conformance/protocols/wire.py)."""
