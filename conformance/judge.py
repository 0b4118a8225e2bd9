"""The judge: runs every rule over one response (a stream in one pass, or a JSON body) and returns a Verdict.

Streams are judged as they are read: one pass over the SSE blocks with per-stream state, never holding
all events, so a 1 GB transcript costs the memory of one block plus the (capped) findings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance.findings import ERROR, WARNING, Finding
from conformance.protocols import PROTOCOLS, protocol_for_path, recorded_request
from conformance.rules import (
    BLOCK_RULES,
    CHUNK_RULES,
    END_RULES,
    ChoiceState,
    Context,
    acceptance,
    bodies,
    chat_deltas,
    choice_rules,
    errors,
    framing,
    intents,
)
from conformance.rules import usage as usage_rules
from conformance.rules.context import OPENAI_PROFILE
from conformance.rules.schema_checks import schema_findings
from conformance.sse import SSEBlock, SSELineTooLong, SSEParser
from conformance.transcript import Transcript

__all__ = [
    "EXCERPT_QUIET_RULES",
    "MAX_LINE_BYTES",
    "Verdict",
    "infer_endpoint",
    "judge_response",
    "judge_transcript",
]

MAX_LINE_BYTES = 64 << 20
"""A single SSE line longer than this is reported instead of buffered."""
_CHUNK_SCHEMA = {"chat": "chat_completion_chunk", "completions": "text_completion_chunk"}
EXCERPT_QUIET_RULES = frozenset(
    {
        "sse-cut-off",
        "done-missing",
        "done-unterminated",
        "responses-terminal-missing",
        "responses-item-not-done",
    }
)
"""Rules that fire only because a stream's text stops early: a transcript pasted from a bug report
(an excerpt, issue 17) is often cut after the chunks that show the bug, so for an excerpt they say
nothing about the server. Every other end rule waits for ``[DONE]`` and so already stays quiet."""


@dataclass
class Verdict:
    """The judgement of one response: where it came from, what it was, and what is wrong with it."""

    source: str
    endpoint: str | None
    """The protocol the response answers (``chat``, ``completions``, ``responses``...)."""
    stream: bool
    findings: list[Finding] = field(default_factory=list)
    server: str | None = None
    """Which server the response came from: the sidecar's label, or what the command names it by."""
    excerpt: bool = False
    """The transcript is a cut-short excerpt: :data:`EXCERPT_QUIET_RULES` were not applied."""
    answer: bool = True
    """False for an exchange the client ended on purpose (the disconnect probe's first, hung up on): its
    findings count, but it is no answer the server's harm is averaged over (conformance/report.py)."""

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def ok(self) -> bool:
        return not any(f.severity == ERROR for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        """One entry of the JSON report's ``results``."""
        return {
            "source": self.source,
            "endpoint": self.endpoint,
            "stream": self.stream,
            "errors": [f.to_json() for f in self.errors],
            "warnings": [f.to_json() for f in self.warnings],
            "server": self.server,
            "excerpt": self.excerpt,
        }


def infer_endpoint(payload: Any) -> str | None:
    """The protocol of a payload: one that owns it (the Responses API: an event's ``type``
    ``response.*``, a Response's ``object: "response"``), else chat or completions from its
    ``object``, else from the shape of its first choice."""
    if not isinstance(payload, dict):
        return None
    for protocol in PROTOCOLS:
        if protocol.rules is not None and protocol.rules.owns(payload):
            return protocol.name
    obj = payload.get("object")
    if isinstance(obj, str):
        if obj.startswith("chat.completion"):
            return "chat"
        # TGI's chat chunks say "text_completion" and mini-sglang's "text_completion.chunk" (Q12): a
        # chat delta or message decides, and the object is then reported as wrong.
        if obj == "text_completion" and _endpoint_by_shape(payload) != "chat":
            return "completions"
    return _endpoint_by_shape(payload)


def _endpoint_by_shape(payload: dict[str, Any]) -> str | None:
    choices = payload.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        if "delta" in choices[0] or "message" in choices[0]:
            return "chat"
        if "text" in choices[0]:
            return "completions"
    return None


def judge_transcript(t: Transcript, *, profile: str | None = None) -> Verdict:
    """Judge a recorded (or live-captured) response. Raises TranscriptError for unreadable bodies.
    ``profile``: the specification a protocol that two define is judged by (rules/context.py); None:
    the one the transcript's sidecar names, else OpenAI's."""
    ctx = _context_for(t, profile)
    if (missing := _replay_miss(t)) is not None:
        # Not a server's answer but the replay server's: it holds no recording of this request (one
        # sent with other settings than the recording's). Judged, its 404 read as the replayed server's
        # deviations (found by black-box testing).
        ctx.error("no-response", f"no complete response: {missing}", quirk="spec")
        return _verdict(ctx, t)
    errors.http_status(ctx)
    acceptance.request_acceptance(ctx)
    if t.failure is not None:
        # The client gave up (a timeout, a reset): what came is judged as cut by the client, and an
        # exchange that brought nothing has nothing else to judge.
        ctx.error("no-response", f"no complete response: {t.failure}", quirk="spec")
    answered = t.failure is None or t.status is not None
    cut = t.excerpt or t.failure is not None
    if answered:
        _judge_answer(ctx, t, cut=cut)
        intents.intent_findings(ctx)
    return _verdict(ctx, t, cut=cut)


def _verdict(ctx: Context, t: Transcript, *, cut: bool = False) -> Verdict:
    source = str(t.body_path) if t.body_path is not None else t.name
    findings = ctx.sink.close()
    if cut:
        findings = [f for f in findings if f.rule not in EXCERPT_QUIET_RULES]
    answer = t.intent != intents.HANG_UP
    return Verdict(
        source, ctx.endpoint, ctx.stream, findings, server=t.server, excerpt=t.excerpt, answer=answer
    )


def _replay_miss(t: Transcript) -> str | None:
    """Why a replay server answered with no recording, where that is the answer: its 404 with the code
    ``transcript_not_found``, which no server it replays sends (conformance/replay/app.py)."""
    if t.status != 404 or t.failure is not None:
        return None
    try:
        error = json.loads(t.read_body()[:65536]).get("error")
    except (ValueError, AttributeError):
        return None
    if not isinstance(error, dict) or error.get("code") != "transcript_not_found":
        return None
    return (
        "the replay server holds no recording of this request (recorded with other settings? the bundled "
        "corpus was recorded with --overflow-words 3000)"
    )


def _context_for(t: Transcript, profile: str | None) -> Context:
    """The judging state of ``t``: its request, status and intent, its protocol's rules where it has one."""
    protocol = protocol_for_path((t.request or {}).get("path"))
    request = recorded_request(t.request)
    profile = profile or t.profile or OPENAI_PROFILE
    ctx = Context(None, t.stream, request, t.status, t.headers, intent=t.intent, profile=profile)
    path = (t.request or {}).get("path")
    ctx.path = path if isinstance(path, str) else None
    if protocol is not None:
        _take_protocol(ctx, protocol.name)
    ctx.choice_rules = choice_rules(request)
    return ctx


def _judge_answer(ctx: Context, t: Transcript, *, cut: bool) -> None:
    """The body or the stream that came, as what it is (a stream that is a JSON document is a body)."""
    failed = t.status is not None and t.status >= 400
    if ctx.stream and not failed and _looks_like_json(t.head()):
        ctx.error(
            "stream-not-sse",
            "a stream was requested but the body is a JSON document; openai-python yields no events",
            quirk="spec",
        )
        ctx.stream = False
    if acceptance.route_missing(ctx):
        # No Responses API: the body is the server's "no such route", not an answer; only its size is
        # kept, so that a message quoting the status and the body's bytes tells the truth.
        ctx.body_bytes = sum(len(data) for data in t.iter_body())
        return
    if ctx.stream and not failed:
        _judge_stream(ctx, t.iter_body(), excerpt=cut)
    else:
        _judge_body(ctx, t.read_body())


def judge_response(
    body: bytes,
    *,
    request: dict[str, Any] | None,
    status: int | None,
    headers: Mapping[str, str] | None,
    source: str = "<live>",
    intent: str | None = None,
    profile: str | None = None,
    failure: str | None = None,
) -> Verdict:
    """Judge a response held in memory (a live probe, the proxy's own output); ``intent`` is what the
    exchange was meant to show (:mod:`conformance.rules.intents`), ``failure`` why it did not complete."""
    transcript = Transcript(
        name=source,
        body_path=None,
        request=request,
        status=status,
        headers={k.lower(): v for k, v in (headers or {}).items()},
        body=body,
        intent=intent,
        failure=failure,
    )
    return judge_transcript(transcript, profile=profile)


def _looks_like_json(head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")


def _judge_stream(ctx: Context, chunks: Iterable[bytes], *, excerpt: bool = False) -> None:
    parser = SSEParser(max_line_bytes=MAX_LINE_BYTES)
    tail: SSEBlock | None = None
    try:
        for data in chunks:
            ctx.body_bytes += len(data)
            for block in parser.feed(data):
                _block(ctx, block)
        tail = parser.close()
    except SSELineTooLong as exc:
        ctx.error("sse-line-too-long", str(exc), event=ctx.last_event, quirk="spec")
    framing.bom(ctx, parser.bom)
    framing.not_utf8(ctx, parser.not_utf8)
    if ctx.intent == intents.HANG_UP:
        # The client closed the stream on purpose: its end is not the server's, but usage sent
        # unasked on the events that came is (issue 33: ik_llama.cpp's usage on every chunk).
        if ctx.protocol is None:
            usage_rules.usage_requested(ctx)
        return
    if tail is not None and not (excerpt and _cut_mid_json(tail)):
        _block(ctx, tail)
    if ctx.data_events == 0:  # an `error:` line (Q42) is dropped by clients: still an empty stream
        framing.stream_empty(ctx)
        return
    for rule in ctx.protocol.end if ctx.protocol is not None else END_RULES:
        rule(ctx)


def _cut_mid_json(tail: SSEBlock) -> bool:
    """An excerpt's last block that stops inside its JSON: the paste's cut, not the server's data.
    A whole last event (ik_llama.cpp #767's usage chunk) is still judged."""
    if not tail.data or tail.is_done:
        return False
    try:
        json.loads(tail.data)
    except (ValueError, RecursionError):
        return True
    return False


def _take_protocol(ctx: Context, name: str | None) -> None:
    """Judge the answer as one of protocol ``name``'s (found from the request's path, an event's name
    or the first payload), by its own rules where it has them."""
    ctx.endpoint = name
    ctx.protocol = next((p.rules for p in PROTOCOLS if p.name == name), None)


def _block(ctx: Context, block: SSEBlock) -> None:
    if ctx.endpoint is None and block.event is not None:
        named = next(
            (p for p in PROTOCOLS if p.rules is not None and p.rules.names_events(block.event)), None
        )
        if named is not None:
            _take_protocol(ctx, named.name)
    for block_rule in BLOCK_RULES:
        block_rule(ctx, block)
    data = block.data
    if not data:
        return
    event = block.index
    ctx.last_event = event
    if ctx.done_event is not None:
        framing.data_after_done(ctx, event)
        return
    if block.is_done:
        ctx.done_event = event
        return
    ctx.data_events += 1
    try:
        payload = json.loads(data)
    except ValueError:
        ctx.error("data-not-json", f"data is not JSON: {data[:80]!r}", event=event, quirk="spec")
        return
    except RecursionError:
        _too_deep(ctx, event)
        return
    if errors.is_error_payload(payload) and not (ctx.protocol is not None and ctx.protocol.owns(payload)):
        errors.error_event(ctx, event, payload)
        return
    if not isinstance(payload, dict):
        ctx.error("chunk-not-object", "data is JSON but not an object", event=event, quirk="spec")
        return
    try:
        _chunk(ctx, event, payload, block)
    except RecursionError:
        _too_deep(ctx, event)


def _too_deep(ctx: Context, event: int | None) -> None:
    # Hundreds of nested arrays or objects: past what the parser and the schema walk recurse through.
    # No real response is built so; it is reported, and the other events and files are still judged.
    ctx.error("json-too-deep", "JSON nested too deeply to check", event=event, quirk="spec")


def _chunk(ctx: Context, event: int, chunk: dict[str, Any], block: SSEBlock) -> None:
    if ctx.first_chunk_event is None:
        ctx.first_chunk_event = event
        if ctx.endpoint is None:
            _take_protocol(ctx, infer_endpoint(chunk))
    ctx.chunks += 1
    if ctx.protocol is not None:
        ctx.protocol.event(ctx, event, chunk, block)
        return
    if ctx.endpoint in _CHUNK_SCHEMA:
        schema_findings(ctx, event, chunk, _CHUNK_SCHEMA[ctx.endpoint])
    for chunk_rule in CHUNK_RULES:
        chunk_rule(ctx, event, chunk)
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return
    for pos, choice in enumerate(choices):
        if not isinstance(choice, dict):
            continue
        index = chat_deltas.choice_index(ctx, event, pos, choice)
        state = ctx.choices.get(index)
        if state is None:
            state = ctx.choices[index] = ChoiceState(first_event=event, index=index)
        for choice_rule in ctx.choice_rules:
            choice_rule(ctx, event, pos, choice, state)


def _judge_body(ctx: Context, raw: bytes) -> None:
    failed = ctx.status is not None and ctx.status >= 400
    ctx.body_bytes = len(raw)
    if not raw.strip():
        if not failed:
            ctx.error("body-empty", "empty response body", quirk="spec")
        else:
            ctx.error("error-body-shape", "error response without a body", quirk="spec")
        return
    try:
        body = json.loads(raw)
    except ValueError:
        rule = "error-body-shape" if failed else "body-not-json"
        ctx.error(rule, f"body is not JSON: {raw[:80]!r}", quirk="spec")
        if failed:
            errors.error_text(ctx, raw)
        return
    except RecursionError:
        _too_deep(ctx, None)
        return
    errors.json_content_type(ctx)
    if failed or errors.is_error_payload(body) or (isinstance(body, dict) and body.get("object") == "error"):
        own = ctx.protocol.error if ctx.protocol is not None else None
        (own or errors.error_body)(ctx, body)
        return
    if isinstance(body, list):
        ctx.error("body-not-object", "body is a JSON array (one object per prompt?)", quirk="Q73")
        return
    if not isinstance(body, dict):
        ctx.error("body-not-object", "body is JSON but not an object", quirk="spec")
        return
    if raw[:1] in (b"\n", b"\r"):
        ctx.warn(
            "body-blank-lines",
            "blank lines before the JSON body (keep-alives while the answer was made); clients that read"
            " the body as one JSON line fail",
            quirk="Q57",
        )
    if ctx.endpoint is None:
        _take_protocol(ctx, infer_endpoint(body))
    try:
        if ctx.protocol is not None:
            ctx.protocol.body(ctx, body)
        else:
            bodies.judge_body_object(ctx, body)
    except RecursionError:
        _too_deep(ctx, None)
