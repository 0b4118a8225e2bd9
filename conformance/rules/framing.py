"""SSE framing and termination: what WHATWG allows but openai-python trips over, and how a stream must end.

openai-python (spec notes §4): an ``event:`` line reroutes or wraps the payload in older releases;
blocks with no data but an ``event:``/``retry:`` line, an empty ``data:``, or any blank-terminated
block once an ``id:`` was seen, are dispatched with empty data and crash ``json.loads``; a leading
BOM loses the first event; non-JSON data raises. OpenAI itself sends only ``data:`` lines.
"""

from __future__ import annotations

from conformance.rules.context import Context, clipped
from conformance.sse import SSEBlock

__all__ = [
    "bom",
    "comment_lines",
    "cut_off_block",
    "data_after_done",
    "done_missing",
    "empty_event",
    "event_field",
    "id_field",
    "nonstandard_field",
    "not_utf8",
    "retry_field",
    "stream_empty",
]


def bom(ctx: Context, had_bom: bool) -> None:
    """A leading UTF-8 BOM: WHATWG strips it, openai-python loses the first event (spec §4)."""
    if had_bom:
        ctx.error(
            "sse-bom",
            "stream starts with a UTF-8 BOM; openai-python drops the first event",
            event=0,
            quirk="spec",
        )


def not_utf8(ctx: Context, first: int | None) -> None:
    """Bytes that are not UTF-8 (a character split across events): SSE is UTF-8, and openai-python
    raises ``UnicodeDecodeError`` on the stream (a non-streamed body so made is no JSON)."""
    if first is not None:
        ctx.error(
            "sse-not-utf8",
            "the stream holds bytes that are not UTF-8 (a character cut across events?); openai-python "
            "raises UnicodeDecodeError",
            event=first,
            quirk="spec",
        )


def event_field(ctx: Context, block: SSEBlock) -> None:
    """``event:`` lines: OpenAI's chat and completions streams send none; openai-python <= 1.97.1 wraps such
    payloads (spec §4). Its Responses streams send one per event, named as the data's type."""
    if block.event is not None and not _named_events(ctx):
        ctx.error(
            "sse-event-field",
            f"'event: {block.event[:40]}' line; OpenAI streams carry only data lines",
            event=block.index,
            quirk="spec",
        )


def _named_events(ctx: Context) -> bool:
    """A stream of a protocol whose streams name each event on an ``event:`` line, as OpenAI's Responses
    streams do (its rules judge that the name is the data's type; the judge knows the protocol before
    these rules run, from the request's path or the first event's name)."""
    return ctx.protocol is not None


def id_field(ctx: Context, block: SSEBlock) -> None:
    """``id:`` lines: harmless alone, but afterwards every comment block reaches json.loads (spec §4)."""
    if block.id is not None:
        ctx.sticky_id = True
        ctx.warn(
            "sse-id-field",
            "'id:' line; OpenAI streams carry only data lines",
            event=block.index,
            quirk="spec",
        )


def retry_field(ctx: Context, block: SSEBlock) -> None:
    if block.retry is not None or block.invalid_retry:
        ctx.warn(
            "sse-retry-field",
            "'retry:' line; OpenAI streams carry only data lines",
            event=block.index,
            quirk="spec",
        )


def nonstandard_field(ctx: Context, block: SSEBlock) -> None:
    """Field lines outside WHATWG's four are dropped by every client: ``error:`` (Q42) hides the error."""
    for name, value in block.other_fields:
        if name == "error":
            ctx.in_band_errors += 1
            ctx.error(
                "sse-error-field",
                f"error sent as an 'error:' field line, which SSE clients ignore: {value[:120]}",
                event=block.index,
                quirk="Q42",
            )
        else:
            ctx.error(
                "sse-unknown-field",
                f"line with unknown SSE field {clipped(name, 40)}; clients drop it (a raw JSON line, Q50?)",
                event=block.index,
                quirk="Q50" if name.startswith("{") else "N2",
            )


def comment_lines(ctx: Context, block: SSEBlock) -> None:
    """Comments are legal keep-alives but naive line parsers break on them (Q57)."""
    if block.comments:
        ctx.warn(
            "sse-comment",
            f"SSE comment {clipped(block.comments[0], 40)}; legal, but OpenAI sends none and naive"
            " parsers break",
            event=block.index,
            quirk="Q57",
        )


def empty_event(ctx: Context, block: SSEBlock) -> None:
    """Blocks openai-python dispatches with empty data, which then fail json.loads (spec §4)."""
    if not block.complete:
        return
    if block.data == "":
        ctx.error(
            "sse-empty-data",
            "'data:' block with empty data; openai-python fails to parse it",
            event=block.index,
            quirk="spec",
        )
    elif block.data is None and (
        block.event is not None or block.retry is not None or (ctx.sticky_id and block.id is None)
    ):
        ctx.error(
            "sse-empty-event",
            "block without data that openai-python still dispatches (event/retry/id set); json.loads fails",
            event=block.index,
            quirk="spec",
        )


def cut_off_block(ctx: Context, block: SSEBlock) -> None:
    """The stream ended in the middle of a block: WHATWG discards it, so its data is lost."""
    if block.complete or (block.data is None and not block.other_fields):
        return
    if block.is_done:
        # Clients stop at EOF either way; nothing is lost, but [DONE] never reaches them.
        ctx.warn(
            "done-unterminated",
            "'data: [DONE]' has no terminating blank line; WHATWG clients never dispatch it",
            event=block.index,
            quirk="spec",
        )
    else:
        ctx.error(
            "sse-cut-off",
            "the last block has no terminating blank line; clients discard it",
            event=block.index,
            quirk="spec",
        )


def data_after_done(ctx: Context, event: int) -> None:
    ctx.error(
        "data-after-done",
        "data event after 'data: [DONE]'; clients stop reading at [DONE]",
        event=event,
        quirk="spec",
    )


def done_missing(ctx: Context) -> None:
    """A successful stream ends with ``data: [DONE]``; an error ends it without (Q55, Q56)."""
    if ctx.done_event is None and ctx.in_band_errors == 0:
        ctx.error(
            "done-missing",
            "stream ended without 'data: [DONE]' (cut off, or the server never terminates it)",
            event=ctx.last_event,
            quirk="Q55",
        )


def stream_empty(ctx: Context) -> None:
    """An HTTP 200 stream without a single data event but ``[DONE]``: the request failed after the
    status was sent, and the client is shown an empty success. llama-cpp-python returns its event
    stream before calling the model, so an error raised then can only end the connection (Q52; LM
    Studio's zero-delta overflow stream, Q48, looks the same). Its own cause, with or without
    ``[DONE]``: the judge then runs none of the end rules, whose findings would all follow from it."""
    if ctx.status not in (None, 200):
        return
    ended = "then [DONE]" if ctx.done_event is not None else "and no [DONE]"
    # An error on an ``error:`` line (llama.cpp #14566, Q42) is dropped by every SSE client: what the
    # client sees is still an empty successful completion (sse-error-field says where the error went).
    dropped = ", its error on an 'error:' line the client drops" if ctx.in_band_errors else ""
    ctx.error(
        "stream-empty",
        f"an HTTP 200 stream without a single chunk {ended}{dropped}: the client sees an empty successful"
        " completion of a request that failed after the status was sent",
        event=ctx.done_event,
        quirk="Q42" if dropped else "Q52",  # llama.cpp #14566's empty success is Q42's own row
    )
