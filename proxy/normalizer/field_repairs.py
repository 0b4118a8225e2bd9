"""The repairs of one choice, one small named function per field, run in the orders of the tuples below.

Each repair cites the quirk ids (docs/quirks.md) it repairs and counts them in ``Repairs``, as the
suite's rules do (conformance/rules/__init__.py). A streamed choice is repaired chunk by chunk
(``CHAT_DELTA_REPAIRS``, ``TEXT_DELTA_REPAIRS``, on a :class:`Delta`); a whole body's choice at once
(``CHAT_MESSAGE_REPAIRS``, ``TEXT_MESSAGE_REPAIRS``, on a :class:`Message`); and both end with the same
``FINISH_REPAIRS`` on a :class:`Finish`. Where a stream and a body repair the same field the same way,
one function serves both (``tool_call_list``, ``upstream_finish``, ``chat_choice_logprobs``,
``text_choice_logprobs``, ``choice_index`` and the finish repairs).

A delta or message repair returns False when the choice is to be dropped (nothing in it to send, or a
finish reason that is a failure: ``upstream_finish`` then raises the :class:`APIError`).

Why the orders are what they are:

- Chat deltas: the role comes first (the first chunk's ``role``, Q58/Q59); then the output fields,
  content first because the stop-sequence scanner (Q76) decides what of it goes out and whether the
  choice has stopped, and tool calls sent as text (Q79) right after it, as they are read from the
  content the scan let through; ``first_delta`` then needs to know every output field to tell an empty first
  chunk (Q60) and whether the upstream showed output (text_lost, Q14); the finish reason is recorded
  after the output because a reason on a chunk that carries output is a repair of its own (Q23); the
  logprobs after that, since they go out only with the content the scanner let through; and
  ``empty_delta`` last, as only then is it known that nothing at all goes out (Q62).
- Text deltas: the text first (Q76), its logprobs next as their offsets follow the text (Q67), then
  the finish reason and the empty check, for the same reasons as chat.
- Messages: the content first (a stop sequence cut there, Q76, makes the finish ``stop``), then the
  other fields in the order OpenAI writes them (calls sent as text, Q79, only once the upstream's own
  calls are known to be absent), the finish after the tool calls (Q64 turns ``stop``
  into ``tool_calls``), the logprobs last because they are cut to the content a stop sequence left.
- Finish: a stop sequence the proxy enforced wins over what the upstream said; ``max_tokens: 0``
  then wins over that (the one token asked of the upstream is never shown); only a reason still
  missing is a repair (Q16) or a broken stream (Q56); the token limit (Q21) and tool calls (Q64)
  correct a ``stop`` last, the limit first since a cut-off tool call is ``length`` in OpenAI's API
  (and a ``tool_calls`` whose last call the limit cut, Q84).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conformance.api_errors import APIError
from conformance.request_info import RequestInfo

from .choices import ChoiceState, as_dict, fix_tool_call, is_json_object, new_tool_call_id, unnamed_call
from .finish import FAILURE_REASONS, map_finish_reason, named_stop
from .logprobs import chat_logprobs, legacy_logprobs, logprobs_within
from .repairs import TOOL_TEXT_UNPARSED, Repairs
from .stop import truncate_at_stop
from .tool_text import calls_in_text

__all__ = [
    "CHAT_DELTA_REPAIRS",
    "CHAT_MESSAGE_REPAIRS",
    "FINISH_REPAIRS",
    "TEXT_DELTA_REPAIRS",
    "TEXT_MESSAGE_REPAIRS",
    "Delta",
    "Finish",
    "Message",
    "chat_choice_logprobs",
    "choice_index",
    "failure_for_reason",
    "final_reason",
    "text_choice_logprobs",
    "tool_call_list",
    "upstream_finish",
]

INTERRUPTED = (
    "the upstream server interrupted the stream: it sent [DONE] without a final chunk and broke the "
    "connection (llama-cpp-python does so when another request waits for its model)"
)


# -- shared by streams and bodies ----------------------------------------------------------------


def choice_index(raw: dict[str, Any], position: int, repairs: Repairs) -> int:
    """The choice's ``index``; its position among the choices when it has none, or not an integer (Q06)."""
    index = raw.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        repairs.add("Q06")
        return position
    return index


def tool_call_list(calls: Any, repairs: Repairs) -> Any:
    """``tool_calls`` as a list: TGI before v3.2.0 sends one call, not a list (Q65)."""
    if isinstance(calls, dict):
        repairs.add("Q65")
        return [calls]
    return calls


def failure_for_reason(reason: str, quirk: str | None) -> APIError:
    status = 500 if reason == "error" else 503
    return APIError.make(
        f"the upstream server ended the generation with finish_reason '{reason}'", status, quirk=quirk
    )


def upstream_finish(value: Any, request: RequestInfo, repairs: Repairs) -> str | None:
    """The upstream's ``finish_reason`` in OpenAI's enum (Q15, Q18, Q19, Q21); None when it sent none.
    A failure disguised as a finish (Q20 abort, Q21 error, Q24 resource) raises the error instead."""
    reason, quirk = map_finish_reason(value, request.endpoint)
    if quirk is not None:
        repairs.add(quirk)
    if reason in FAILURE_REASONS:
        raise failure_for_reason(str(reason), quirk)
    return reason


def chat_choice_logprobs(value: Any, request: RequestInfo, repairs: Repairs) -> Any:
    """A chat choice's logprobs in OpenAI's shape (Q61: not an object, a key missing, non-finite
    values, alternatives nobody asked for)."""
    logprobs, repaired = chat_logprobs(value, request.alternatives)
    if repaired:
        repairs.add("Q61")
    return logprobs


def text_choice_logprobs(value: Any, offset: int, repairs: Repairs) -> tuple[Any, int]:
    """A completion choice's logprobs in the legacy shape (Q67: chat-shaped ones converted), with the
    text offsets starting at ``offset``, and how much text they cover."""
    logprobs, covered, converted = legacy_logprobs(value, offset)
    if converted:
        repairs.add("Q67")
    return logprobs, covered


# -- the finish reason, at the end of a choice (stream's close, a whole body) --------------------


class Finish:
    """A choice's finish reason being decided, with what decides it."""

    __slots__ = (
        "call_cut",
        "chat",
        "had_tools",
        "interrupted",
        "reason",
        "repairs",
        "request",
        "stopped",
        "tokens",
        "upstream_done",
    )

    def __init__(
        self,
        reason: str | None,
        request: RequestInfo,
        repairs: Repairs,
        *,
        stopped: bool,
        tokens: int | None,
        had_tools: bool,
        upstream_done: bool = True,
        interrupted: bool = False,
        call_cut: bool = False,
    ) -> None:
        self.reason = reason
        self.request = request
        self.repairs = repairs
        self.chat = request.endpoint == "chat"
        self.stopped = stopped  # the proxy's stop-sequence scan cut the choice (Q76)
        self.tokens = tokens  # completion tokens counted for it; None when unknown
        self.had_tools = had_tools
        self.upstream_done = upstream_done  # a whole body, or [DONE] came
        self.interrupted = interrupted
        self.call_cut = call_cut  # its last call's arguments are not a whole JSON object


def stop_sequence_finish(f: Finish) -> None:
    """A stop sequence the proxy cut the text at (Q76) ends it ``stop``, whatever the upstream said."""
    if f.stopped:
        f.reason = "stop"


def zero_limit_finish(f: Finish) -> None:
    """``max_tokens: 0``: the one token asked of the upstream was cut (or EOS), so ``length``."""
    if not f.request.generates:
        f.reason = "length"


def missing_finish(f: Finish) -> None:
    """No finish reason ever came: after [DONE] a repair (Q16), before it a broken stream (Q56)."""
    if f.reason is not None:
        return
    if f.interrupted:
        raise APIError.make(INTERRUPTED, 502)
    if not f.upstream_done:
        raise APIError.make("the upstream server closed the stream before its final chunk", 502, quirk="Q56")
    f.repairs.add("Q16")
    f.reason = "stop"


def limit_finish(f: Finish) -> None:
    """The token limit ended it, whatever the upstream said (Q21), and a call it cut is no call (Q84)."""
    limit = f.request.max_tokens
    tokens = f.tokens
    if f.stopped or limit is None:
        return
    if tokens is None:
        # No count (a body without usage, one of several choices, or a stream's fragments under the
        # limit, stream.py): a call ended inside its JSON under a limit is taken for cut, the likelier
        # end of a call whose grammar allows no other (issue 37); a client reruns it with a larger
        # limit, and runs no broken call either way. Said "stop" too (Q64's servers): that answer was a
        # 502 where the same one said "tool_calls" was length.
        if f.reason in ("tool_calls", "stop") and f.call_cut:
            f.repairs.add("Q84")
            f.reason = "length"
        return
    if tokens < limit:
        return
    if f.reason == "stop":
        f.repairs.add("Q21")
        f.reason = "length"
    elif f.reason == "tool_calls" and f.call_cut:
        f.repairs.add("Q84")
        f.reason = "length"


def tool_calls_finish(f: Finish) -> None:
    """A chat choice that called tools and stopped finished ``tool_calls`` (Q64)."""
    if f.chat and f.reason == "stop" and f.had_tools:
        f.repairs.add("Q64")
        f.reason = "tool_calls"


def broken_call_finish(f: Finish) -> None:
    """A call whose arguments are not one JSON object, said finished (``tool_calls``) before the token
    limit: no cut (that is ``length``, ``limit_finish``), so no call a client can run. As for a call
    without a name, the answer fails as one the upstream could not make valid (``broken_call``)."""
    if f.call_cut and f.reason == "tool_calls":
        raise broken_call()


def broken_call() -> APIError:
    """The 502 for a call ``broken_call_finish`` finds: sent on, its arguments would be run as a whole
    call's (``tool_calls``, a Response ``completed``, a Message's ``tool_use``), or fail in the client's
    parse; none of them can be made whole from anything the upstream sent."""
    return APIError.make(
        "the upstream server finished a tool call whose arguments are not one JSON object, before the "
        "token limit: a client cannot run it",
        502,
    )


FINISH_REPAIRS: tuple[Callable[[Finish], None], ...] = (
    stop_sequence_finish,
    zero_limit_finish,
    missing_finish,
    limit_finish,
    tool_calls_finish,
    broken_call_finish,
)


def final_reason(f: Finish) -> str:
    """The finish reason sent: ``FINISH_REPAIRS`` run in order; raises :class:`APIError` for a
    stream that broke before its finish reason."""
    for repair in FINISH_REPAIRS:
        repair(f)
    return str(f.reason)


# -- a streamed choice, chunk by chunk -----------------------------------------------------------


class Delta:
    """One chunk's choice under repair: what the upstream sent (``raw``, its ``delta``) and what goes
    out (``out``, ``logprobs``), with the choice's state across chunks (``state``). One serves a whole
    stream, started afresh for each choice of each chunk (``start``): the per-chunk path allocates
    nothing more than the output it sends."""

    __slots__ = (
        "content",
        "delta",
        "first",
        "had_text",
        "has_output",
        "logprobs",
        "out",
        "raw",
        "repairs",
        "request",
        "state",
        "text",
    )

    def __init__(self, request: RequestInfo, repairs: Repairs) -> None:
        self.request = request
        self.repairs = repairs
        self.delta: dict[str, Any] = {}
        self.content: Any = None

    def start(self, raw: dict[str, Any], state: ChoiceState) -> Delta:
        """Ready for one upstream choice (``delta`` and ``content`` are set by the repairs that read them)."""
        self.raw = raw
        self.state = state
        self.first = not state.role_sent
        self.out: dict[str, Any] = {}
        self.had_text = False  # the upstream sent text, before the stop-sequence scan
        self.has_output = False  # output goes out: content, refusal, reasoning or tool calls
        self.logprobs: Any = None
        self.text = ""
        return self


def delta_role(d: Delta) -> bool:
    """``role: "assistant"`` in the first chunk only (Q59 missing or another, Q58 repeated later)."""
    delta = d.raw.get("delta")
    if not isinstance(delta, dict):  # a whole message in a chunk
        delta = as_dict(d.raw.get("message"))
    d.delta = delta
    role = delta.get("role")
    if d.first:
        d.out["role"] = "assistant"
        if role != "assistant":
            d.repairs.add("Q59")
    elif role is not None:
        d.repairs.add("Q58")
    return True


def delta_content(d: Delta) -> bool:
    """Content as the stop-sequence scan lets it through (Q76)."""
    content = d.content = d.delta.get("content")
    if isinstance(content, str) and content:
        d.had_text = True
        content = d.state.pass_text(content)
        if content:
            d.out["content"] = content
            d.has_output = True
    return True


def delta_tool_text(d: Delta) -> bool:
    """Tool calls sent as text in the content (Q79, ``tool_text``): the content the scanner lets
    through, and the calls it completed."""
    scanner = d.state.tool_text
    content = d.out.get("content")
    if scanner is None or content is None:  # most requests: no tools
        return True
    sent, calls = scanner.feed(content)
    if sent is content and not calls:  # most pieces: no marker, nor the beginning of one
        return True
    if sent:
        d.out["content"] = sent
    else:
        del d.out["content"]
    if calls:
        d.out["tool_calls"] = d.state.text_calls(calls, d.repairs)
    d.has_output = "content" in d.out or "tool_calls" in d.out
    return True


def delta_refusal(d: Delta) -> bool:
    refusal = d.delta.get("refusal")
    if isinstance(refusal, str) and refusal:
        d.out["refusal"] = refusal
        d.has_output = True
    return True


REASONING_KEYS = ("reasoning_content", "reasoning")
"""The names upstreams send reasoning under: llama.cpp, DeepSeek, SGLang, TabbyAPI and vLLM before Nov 2025
the first; Ollama and vLLM since PR #27752 the second (Q39)."""


def delta_reasoning(d: Delta) -> bool:
    """The reasoning, under whichever name the upstream sent it, in the one field the proxy sends
    (``RequestInfo.reasoning_field``); counted as output. vLLM's ``reasoning`` is counted as Q39."""
    for key in REASONING_KEYS:
        value = d.delta.get(key)
        if isinstance(value, str) and value:
            d.state.count_output(value)
            if key == "reasoning":
                d.repairs.add("Q39")
            scanner = d.state.reasoning_tool_text  # calls written in the reasoning (Q79): held to the end
            if scanner is not None:
                value, calls = scanner.feed(value)
                d.state.reasoning_calls += calls
            if value:
                d.out[d.request.reasoning_field] = value
                d.has_output = True
            break  # one name read: text under both would otherwise go out (and count) twice
    return True


def delta_tool_calls(d: Delta) -> bool:
    """Tool-call fragments (Q63, Q64, Q65 in ``stream_tool_calls``); an empty or null list dropped (Q17)."""
    calls = d.delta.get("tool_calls")
    if calls is None:  # most chunks
        return True
    calls = tool_call_list(calls, d.repairs)
    if isinstance(calls, list) and calls:
        fixed = d.state.stream_tool_calls(calls, d.repairs)
        if fixed:
            d.out["tool_calls"] = d.out.get("tool_calls", []) + fixed
            d.has_output = True
    else:
        d.repairs.add("Q17")  # "tool_calls": [] or null on a content delta
    return True


def first_delta(d: Delta) -> bool:
    """Whether output was shown (text_lost, Q14); the first chunk's ``content`` is ``""`` (null beside
    tool calls), and one the upstream left out is a repair (Q60)."""
    out = d.out
    state = d.state
    state.shown = state.shown or d.had_text or d.has_output
    if d.first:
        if "content" not in out:
            out["content"] = None if "tool_calls" in out else ""
            if d.content is None and "tool_calls" not in out:
                d.repairs.add("Q60")
        state.role_sent = True
    return True


def delta_finish(d: Delta) -> bool:
    """The finish reason, held until the stream ends (Q17 missing key; Q14/Q22 one before the final
    chunk; Q23 one on a chunk with output); a failure raises (``upstream_finish``)."""
    raw = d.raw
    value = raw.get("finish_reason")
    if value is None:  # most chunks
        if "finish_reason" not in raw:
            d.repairs.add("Q17")
        return True
    reason = upstream_finish(value, d.request, d.repairs)
    if reason is None:
        return True
    state = d.state
    if state.finish is not None:
        d.repairs.add("Q22" if d.request.endpoint == "chat" else "Q14")
    elif d.has_output:
        d.repairs.add("Q23")
    state.finish = reason
    if d.request.names_stop and state.matched is None:
        state.matched = named_stop(raw, d.request.stop)
    return True


def delta_logprobs(d: Delta) -> bool:
    """The chat logprobs (Q61), held with the text the stop-sequence scan holds."""
    value = d.raw.get("logprobs")
    logprobs = None if value is None else chat_choice_logprobs(value, d.request, d.repairs)
    d.logprobs = d.state.pass_logprobs(
        logprobs, chat=True, had_text=d.had_text, sends_text="content" in d.out
    )
    return True


def empty_delta(d: Delta) -> bool:
    """A chunk with nothing in it is dropped (Q62), except the first (it carries the role)."""
    if d.first or d.out:
        return True
    logprobs = d.logprobs
    if logprobs and logprobs.get("content"):
        return True
    if d.raw.get("finish_reason") is None:
        d.repairs.add("Q62")
    return False


def delta_text(d: Delta) -> bool:
    """A completion's text as the stop-sequence scan lets it through (Q76)."""
    text = d.raw.get("text")
    if isinstance(text, str) and text:
        d.had_text = True
        d.state.shown = True
        text = d.state.pass_text(text)
        d.text = text
        d.has_output = bool(text)
    return True


def delta_text_logprobs(d: Delta) -> bool:
    """The legacy logprobs (Q67), their offsets running on over the stream, held with the text."""
    state = d.state
    value = d.raw.get("logprobs")
    logprobs = None
    if value is not None:  # most chunks have none
        logprobs, covered = text_choice_logprobs(value, state.text_offset, d.repairs)
        state.text_offset += covered
    d.logprobs = state.pass_logprobs(logprobs, chat=False, had_text=d.had_text, sends_text=bool(d.text))
    return True


def empty_text(d: Delta) -> bool:
    """A chunk with no text and no logprobs is dropped (Q62)."""
    if d.text or d.logprobs is not None:
        return True
    if d.raw.get("finish_reason") is None:
        d.repairs.add("Q62")
    return False


DeltaRepair = Callable[[Delta], bool]

CHAT_DELTA_REPAIRS: tuple[DeltaRepair, ...] = (
    delta_role,
    delta_content,
    delta_tool_text,
    delta_refusal,
    delta_reasoning,
    delta_tool_calls,
    first_delta,
    delta_finish,
    delta_logprobs,
    empty_delta,
)
TEXT_DELTA_REPAIRS: tuple[DeltaRepair, ...] = (
    delta_text,
    delta_text_logprobs,
    delta_finish,
    empty_text,
)


# -- a whole body's choice -----------------------------------------------------------------------


class Message:
    """One whole choice under repair: what the upstream sent (``raw``, its ``message``) and what goes
    out (``out``: the message, or the text choice's fields)."""

    __slots__ = (
        "content",
        "index",
        "logprobs",
        "matched",
        "message",
        "out",
        "raw",
        "reason",
        "repairs",
        "request",
        "stopped",
        "text",
        "tokens",
    )

    def __init__(
        self, raw: dict[str, Any], request: RequestInfo, repairs: Repairs, tokens: int | None, index: int = 0
    ) -> None:
        self.raw = raw
        self.index = index  # the choice's, as it goes out
        self.request = request
        self.repairs = repairs
        self.tokens = tokens  # the upstream's count of completion tokens, when it is the only choice
        self.message = as_dict(raw.get("message"))
        self.out: dict[str, Any] = {}
        self.content: Any = None
        self.text = ""
        self.stopped = False
        self.matched: str | None = None  # the stop sequence met, where known (RequestInfo.names_stop)
        self.reason = "stop"
        self.logprobs: Any = None


def _enforce_stop(text: str, m: Message) -> str:
    """The text cut at the first stop sequence (Q76: the upstream did not), marking the choice stopped."""
    request = m.request
    if not request.stop:
        return text
    text, m.matched = truncate_at_stop(text, request.stop, request.echoed)
    m.stopped = m.matched is not None
    if m.stopped and request.generates:
        m.repairs.add("Q76")
    return text


def message_content(m: Message) -> bool:
    """``role`` and ``content`` (a string or null), cut at a stop sequence (Q76)."""
    content = m.message.get("content")
    if isinstance(content, str):
        content = _enforce_stop(content, m)
    elif content is not None:
        content = None
    m.content = content
    m.out["role"] = "assistant"
    m.out["content"] = content
    return True


def message_refusal(m: Message) -> bool:
    """``refusal`` always present, null when there is none (Q61)."""
    m.out["refusal"] = m.message.get("refusal")
    if "refusal" not in m.message:
        m.repairs.add("Q61")
    return True


def message_tool_calls(m: Message) -> bool:
    """Whole tool calls with ids, ``type`` and string arguments (Q63, Q65); one without a function
    name fails the answer (``unnamed_call``). Text cut at a stop sequence (Q76) has none: the answer
    ended there (the stream's choice is dropped from that chunk on, ``StreamNormalizer._choice``)."""
    if m.stopped:
        return True
    calls = tool_call_list(m.message.get("tool_calls"), m.repairs)
    if isinstance(calls, list) and calls:
        fixed = m.out["tool_calls"] = [fix_tool_call(c, m.repairs) for c in calls if isinstance(c, dict)]
        for position, call in enumerate(fixed):
            if not call["function"]["name"]:
                raise unnamed_call(position, m.index)
    return True


def message_tool_text(m: Message) -> bool:
    """Tool calls sent as text in the content, where the request offered tools and the upstream sent
    no calls of its own (Q79, ``tool_text``): the calls, and the text around them as the content."""
    content = m.content
    if not m.request.tools or not isinstance(content, str) or m.out.get("tool_calls"):
        return True
    left = _take_text_calls(m, content)
    if left is not None:
        m.content = m.out["content"] = left or None
    return True


def _take_text_calls(m: Message, text: str) -> str | None:
    """The calls written in ``text`` as the message's ``tool_calls`` (Q79), and the text left (None where
    ``text`` held none)."""
    left, calls, unparsed = calls_in_text(text, m.request.tools)
    if unparsed:
        m.repairs.add(TOOL_TEXT_UNPARSED)
    if not calls:
        return None
    m.out["tool_calls"] = []
    for call in calls:
        m.repairs.add("Q79")
        function = {"name": call.name, "arguments": call.arguments}
        m.out["tool_calls"].append({"id": new_tool_call_id(), "type": "function", "function": function})
    return left or ""


def message_reasoning(m: Message) -> bool:
    """The reasoning in the one field the proxy sends, under whichever name the upstream sent it (Q39,
    as ``delta_reasoning``); a call written in it, where the message has none (a thinking model whose
    server never saw its reasoning end), taken out as in the content (Q79)."""
    for key in REASONING_KEYS:
        reasoning = m.message.get(key)
        if isinstance(reasoning, str) and reasoning:
            if m.request.tools and not m.out.get("tool_calls"):
                left = _take_text_calls(m, reasoning)
                reasoning = reasoning if left is None else left
            if reasoning:
                m.out[m.request.reasoning_field] = reasoning
            if key == "reasoning":
                m.repairs.add("Q39")
            break
    return True


def message_finish(m: Message) -> bool:
    """The finish reason: the upstream's mapped (``upstream_finish``), then ``FINISH_REPAIRS``."""
    reason = upstream_finish(m.raw.get("finish_reason"), m.request, m.repairs)
    finish = Finish(
        reason,
        m.request,
        m.repairs,
        stopped=m.stopped,
        tokens=m.tokens,
        had_tools=bool(m.out.get("tool_calls")),
        call_cut=_last_call_cut(m.out.get("tool_calls")),
    )
    m.reason = final_reason(finish)
    if m.matched is None and m.reason == "stop" and m.request.names_stop:
        m.matched = named_stop(m.raw, m.request.stop)
    return True


def _last_call_cut(calls: Any) -> bool:
    """The last call's arguments are begun and not one JSON object (Q84; blank ones are a call without
    parameters, as ``ChoiceState.call_cut``)."""
    if not isinstance(calls, list) or not calls or not isinstance(calls[-1], dict):
        return False
    arguments = as_dict(calls[-1].get("function")).get("arguments")
    blank = arguments is None or (isinstance(arguments, str) and not arguments.strip())
    return not blank and not is_json_object(arguments)


def message_logprobs(m: Message) -> bool:
    """The chat logprobs, always present (Q61), cut to the content a stop sequence left."""
    if "logprobs" not in m.raw:
        m.repairs.add("Q61")
    m.logprobs = chat_choice_logprobs(m.raw.get("logprobs"), m.request, m.repairs)
    if m.stopped or m.content:  # (no text at all, as with tool calls: nothing to measure them against)
        # The tokens past a stop sequence go with the text it cut (here or at the upstream).
        m.logprobs = logprobs_within(m.logprobs, m.content or "", chat=True)
    return True


def _echoed_tokens(text: str, logprobs: Any, count: int) -> tuple[str, Any]:
    """A ``max_tokens: 0`` answer to a prompt of ``count`` token ids, echoed: its first ``count``
    tokens (and their text), without the one the upstream was let generate. Without token logprobs
    there is no telling where the prompt ends, and the text is kept as it is."""
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    if not isinstance(tokens, list) or len(tokens) < count or not all(isinstance(t, str) for t in tokens):
        return text, logprobs
    prompt = "".join(tokens[:count])
    if not text.startswith(prompt):
        return text, logprobs
    return prompt, {k: v[:count] if isinstance(v, list) else v for k, v in logprobs.items()}


def message_text(m: Message) -> bool:
    """A completion's text and legacy logprobs (Q67): the echoed prompt alone for ``max_tokens: 0``,
    else cut at a stop sequence (Q76), the logprobs with it."""
    text = m.raw.get("text")
    if not isinstance(text, str):
        text = ""
    logprobs, _ = text_choice_logprobs(m.raw.get("logprobs"), m.request.prompt_chars, m.repairs)
    request = m.request
    if not request.generates and request.echoed_tokens:
        text, logprobs = _echoed_tokens(text, logprobs, request.echoed_tokens)
        m.stopped = True
    else:
        text = _enforce_stop(text, m)
    if m.stopped or text:
        logprobs = logprobs_within(logprobs, text, chat=False)
    m.text = text
    m.logprobs = logprobs
    return True


MessageRepair = Callable[[Message], bool]

CHAT_MESSAGE_REPAIRS: tuple[MessageRepair, ...] = (
    message_content,
    message_refusal,
    message_tool_calls,
    message_tool_text,
    message_reasoning,
    message_finish,
    message_logprobs,
)
TEXT_MESSAGE_REPAIRS: tuple[MessageRepair, ...] = (
    message_text,
    message_finish,
)
