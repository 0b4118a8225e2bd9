"""Per-choice state and the repairs shared by streamed and whole responses (sections B, G, H, I)."""

from __future__ import annotations

import json
import os
from typing import Any

from conformance import jsoncodec
from conformance.api_errors import APIError
from conformance.tool_formats.base import ParsedCall
from conformance.tool_formats.offered import NO_TOOLS, OfferedTools

from .call_shape import ObjectShape
from .control_characters import ArgumentStrings
from .logprobs import empty_logprobs, logprobs_up_to, merged_logprobs
from .repairs import TOOL_TEXT_UNPARSED, Repairs
from .stop import StopScanner
from .tool_text import ToolTextScanner
from .usage import estimated_tokens

__all__ = [
    "ChoiceState",
    "as_dict",
    "fix_tool_call",
    "generated_text",
    "new_tool_call_id",
    "unnamed_call",
]


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is an object, else an empty one (upstreams send null or other types)."""
    return value if isinstance(value, dict) else {}


def new_tool_call_id() -> str:
    return "call_" + os.urandom(12).hex()


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"))  # some servers send the arguments as an object


MOST_HELD_UNNAMED = 1 << 20
"""Characters of arguments held for calls that wait for a name: a name is meant to come on a call's
first fragment, so past a megabyte of arguments without one the call fails at once (a 502, or the
stream's error event) rather than holding an upstream's endless call in memory."""


def _name(fn: dict[str, Any]) -> str:
    """A fragment's function name as it goes out ("" for none: missing, null or empty)."""
    return str(fn.get("name") or "")


def _joined(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Held tool-call deltas as one per call, in the order the calls came: each call's arguments
    joined once, and a name a later fragment carried put in its first."""
    calls: dict[int, dict[str, Any]] = {}
    arguments: dict[int, list[str]] = {}
    for delta in deltas:
        index = delta["index"]
        function = delta["function"]
        if index not in calls:
            calls[index] = {**delta, "function": dict(function)}
            arguments[index] = []
        elif function.get("name"):
            calls[index]["function"]["name"] = function["name"]
        arguments[index].append(function["arguments"])
    for index, call in calls.items():
        call["function"]["arguments"] = "".join(arguments[index])
    return list(calls.values())


def _shape(arguments: str) -> ObjectShape:
    shape = ObjectShape()
    shape.feed(arguments)
    return shape


def unnamed_call(call: int, choice: int) -> APIError:
    """The 502 for a tool call the upstream sent without a function name (an empty or missing one).

    A client cannot run such a call, and no name can be read from anywhere else: guessing one (the only
    tool offered, say) could run a tool the model never called, and dropping the call would pass an
    answer that lost its output for a whole one. So the answer fails as one the upstream could not
    make valid does (the upstream's fault, hence 502, as for an event that is no JSON)."""
    return APIError.make(
        f"the upstream server sent a tool call without a function name (tool call {call} of choice "
        f"{choice}): a client cannot run it",
        502,
    )


def generated_text(choice: dict[str, Any]) -> str:
    """What a normalized whole choice generated, for counting its tokens when the upstream reports no
    usage: text or content, and reasoning and tool calls, which are completion tokens too."""
    if "text" in choice:
        return str(choice["text"])
    message = choice["message"]
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    parts = [reasoning, message.get("content") or ""]
    for call in message.get("tool_calls") or ():
        parts += [call["function"]["name"], call["function"]["arguments"]]
    return "".join(parts)


def fix_tool_call(
    call: dict[str, Any], repairs: Repairs, strings: ArgumentStrings | None = None
) -> dict[str, Any]:
    """A whole tool call with an id (TGI's "0", Q65), ``type`` and string arguments whose strings hold
    no raw control character (Q82); ``strings`` carries a stream's call on to its next fragments."""
    fn = as_dict(call.get("function"))
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id or call_id == "0":
        repairs.add("Q65" if call_id == "0" else "Q63")
        call_id = new_tool_call_id()
    if call.get("type") != "function":
        repairs.add("Q63")
    arguments = fn.get("arguments")
    if not isinstance(arguments, str):
        repairs.add("Q65")
    return {
        "id": call_id,
        "type": "function",
        "function": {
            "name": str(fn.get("name") or ""),
            "arguments": escaped_arguments(strings or ArgumentStrings(), _arguments(arguments), repairs),
        },
    }


def is_json_object(arguments: Any) -> bool:
    """``arguments`` is the text of one JSON object, as a whole call's arguments are."""
    try:
        return isinstance(arguments, str | bytes) and isinstance(jsoncodec.loads(arguments), dict)
    except ValueError:
        return False


def escaped_arguments(strings: ArgumentStrings, arguments: str, repairs: Repairs) -> str:
    """An arguments fragment with the control characters inside its strings escaped (Q82)."""
    escaped = strings.escape(arguments)
    if escaped is not arguments:
        repairs.add("Q82")
    return escaped


class ChoiceState:
    """What one choice index has shown so far in a stream."""

    __slots__ = (
        "chunk_start",
        "chunk_text",
        "events",
        "finish",
        "had_tools",
        "held_call_chars",
        "held_calls",
        "held_logprobs",
        "held_text",
        "index",
        "last_call",
        "matched",
        "next_tool",
        "parts",
        "raw_chars",
        "reasoning_calls",
        "reasoning_tool_text",
        "role_sent",
        "saw_logprobs",
        "scanner",
        "sent_chars",
        "shown",
        "stopped",
        "strings",
        "text_offset",
        "tokens",
        "tool_ids",
        "tool_text",
        "unnamed",
    )

    def __init__(
        self,
        index: int,
        stops: tuple[str, ...],
        keep_text: bool,
        echoed: str = "",
        tools: OfferedTools = NO_TOOLS,
        text_offset: int = 0,
    ) -> None:
        self.index = index
        self.role_sent = False
        self.finish: str | None = None
        self.shown = False  # the upstream sent output for it (before stop sequences cut any): text_lost
        self.tokens = 0
        self.events = 0  # output events: a token each where an upstream streams token by token
        self.scanner = StopScanner(stops, echoed) if stops else None
        self.stopped = False
        self.matched: str | None = None  # the stop sequence met, where known (RequestInfo.names_stop)
        self.tool_ids: dict[int, str] = {}
        self.strings: dict[int, ArgumentStrings] = {}  # each call's place in its arguments' JSON (Q82)
        self.next_tool = 0
        # The latest call opened: its index, its id and name as the upstream sent them and its arguments
        # so far, which tell where a fragment without index belongs (Q64). Earlier calls' are not kept.
        self.last_call: tuple[int, Any, Any, ObjectShape] = (0, None, None, ObjectShape())
        self.had_tools = False
        # Calls whose first fragment came without a name, which a later fragment may still carry (only
        # a call's first fragment is meant to, but nothing forbids it later); while one waits, every
        # tool-call delta after it is held too, in order, so that the indexes reach the client in the
        # order they began (openai-python's accumulator inserts a new index at its place in a list).
        self.unnamed: set[int] = set()
        self.held_calls: list[dict[str, Any]] | None = None
        self.held_call_chars = 0
        # Where the next legacy logprob's text begins (RequestInfo.prompt_chars).
        self.text_offset = text_offset
        self.parts: list[str] | None = [] if keep_text else None
        self.held_text = 0  # what ``parts`` holds: characters, and a string object's cost for each
        # With stop sequences, a chunk's logprobs wait with the text the scanner holds back: (where the
        # chunk's content starts in the upstream's text, that content, its logprobs). Counted only then.
        self.held_logprobs: list[tuple[int, str, dict[str, Any]]] = []
        self.saw_logprobs = False
        self.chunk_start = 0
        self.chunk_text = ""
        self.raw_chars = 0
        self.sent_chars = 0
        # Calls the upstream sent as text (Q79), looked for only where the request offered tools.
        self.tool_text = ToolTextScanner(tools) if tools else None
        # Calls written in the reasoning (Q79) wait for the stream's end: a choice that calls otherwise
        # (in its content, or the upstream's own calls) wrote drafts there, which stay reasoning.
        self.reasoning_tool_text = ToolTextScanner(tools, keep_taken=True) if tools else None
        self.reasoning_calls: list[ParsedCall] = []

    def plain(self) -> bool:
        """Whether a chunk of content alone may change nothing here but the count of output: the role was
        sent, and no stop-sequence scanner, held call or finish reason reads the text, nor a tool-text
        scanner that holds some (one that passes text asks ``relays`` of each chunk's). The reasoning's
        scanner reads no content."""
        return (
            self.role_sent
            and self.scanner is None
            and (self.tool_text is None or self.tool_text.passes([]))
            and self.finish is None
            and not self.unnamed
            and self.held_calls is None
        )

    def relays(self, texts: list[bytes]) -> bool:
        """Whether chunks of content alone with ``texts`` (UTF-8) change nothing but the count (``plain``
        was true): with tools offered, none of them may begin a call written as text. Without this
        every chunk of an agent's stream went through the normalizer (issue 35: 18 of 19 events)."""
        return self.tool_text is None or self.tool_text.passes(texts)

    def pass_text(self, text: str) -> str:
        """Text after stop-sequence enforcement (Q76); marks the choice stopped on a hit."""
        if self.scanner is not None:
            self.chunk_start = self.raw_chars
            self.chunk_text = text
            self.raw_chars += len(text)
            text = self.scanner.feed(text)
            if self.scanner.hit:
                self.stopped = True
                self.matched = self.scanner.matched
            self.sent_chars += len(text)
        if text:
            self.count_output(text)
        return text

    def count_output(self, text: str, *, call: bool = False) -> None:
        """Generated output the usage is counted from when the upstream reports none: content, and also
        reasoning and tool calls, which are completion tokens as well (a streamed tool call counted 0).
        Without a tokenizer an event is one token, as servers stream text; a tool call's text is
        estimated by its pieces (``call``), since an upstream may send a whole call in one event
        (llama-cpp-python: two calls counted 2, issue 37)."""
        self.tokens += max(estimated_tokens(text), 1) if call else 1
        self.events += 1
        if self.parts is not None:
            self._keep(text)

    def count_plain(self, texts: list[bytes]) -> None:
        """Content events relayed by their bytes (plain_chunks.py), counted as ``count_output`` counts
        each: ``texts`` are their contents' UTF-8."""
        self.tokens += len(texts)
        self.events += len(texts)
        if self.parts is not None:
            for text in texts:
                self._keep(text.decode())

    def _keep(self, text: str) -> None:
        """``text`` kept for counting, and what it holds: its characters and a string object's cost."""
        assert self.parts is not None
        self.parts.append(text)
        self.held_text += len(text) + 64

    def pass_logprobs(self, logprobs: Any, *, chat: bool, had_text: bool, sends_text: bool) -> Any:
        """This chunk's logprobs once its text goes out: with stop sequences, a chunk's wait while the
        scanner holds all its text back, and those wholly past a stop are dropped with the text.

        Logprobs go by chunk: a token's text need not spell the content (byte tokens of one emoji), so a
        chunk's logprobs belong to the span of content it came with; only the chunk a stop falls in is
        cut by token, where its tokens spell its text (``logprobs_up_to``). ``had_text``: the
        chunk had content before the scanner (logprobs of reasoning or tool calls are not held);
        ``sends_text``: content goes out with this chunk (it then gets logprobs, empty if need be).
        """
        if self.scanner is None:
            return logprobs
        if isinstance(logprobs, dict):
            self.saw_logprobs = True
            if not had_text:
                return logprobs
            self.held_logprobs.append((self.chunk_start, self.chunk_text, logprobs))
        return self._release(chat, sends_text)

    def flush_logprobs(self, chat: bool) -> Any:
        """What is still held, for the tail the scanner flushed at the end."""
        self.sent_chars = self.raw_chars
        return self._release(chat, sends_text=True)

    def _release(self, chat: bool, sends_text: bool) -> Any:
        # A chunk goes once any of its text has gone; after a stop, the ones whose text did not never go,
        # and the one the stop fell in loses the tokens past it (where its tokens spell its text).
        sent = self.sent_chars
        ready = [
            logprobs_up_to(logprobs, text, sent - start, chat)
            if self.stopped and start + len(text) > sent
            else logprobs
            for start, text, logprobs in self.held_logprobs
            if start < sent
        ]
        self.held_logprobs = [] if self.stopped else [h for h in self.held_logprobs if h[0] >= sent]
        if ready:
            return merged_logprobs(ready, chat)
        return empty_logprobs(chat) if sends_text and self.saw_logprobs else None

    def stream_tool_calls(self, calls: list[Any], repairs: Repairs) -> list[dict[str, Any]]:
        """Tool-call deltas with ``index`` always, and id/type/name only in a call's first fragment."""
        out: list[dict[str, Any]] = []
        for call in calls:
            if not isinstance(call, dict):
                continue
            raw_index = call.get("index")
            fn = as_dict(call.get("function"))
            if isinstance(raw_index, int) and not isinstance(raw_index, bool) and raw_index >= 0:
                index = raw_index
            else:
                repairs.add("Q64")
                index = self.next_tool if self._starts_call(call, fn) else self.last_call[0]
            if index not in self.tool_ids:
                out.append(self._first_fragment(index, call, fn, repairs))
                continue
            named = index in self.unnamed and _name(fn)
            if named:
                self._named_later(index, named)
            elif call.get("id") or call.get("type") or fn.get("name"):
                repairs.add("Q63")  # repeated id/name: the SDK accumulator would join them
            arguments = _arguments(fn.get("arguments"))
            if arguments:
                strings = self.strings.setdefault(index, ArgumentStrings())
                arguments = escaped_arguments(strings, arguments, repairs)
                if index == self.last_call[0]:
                    self.last_call[3].feed(arguments)
                self.count_output(arguments, call=True)
            if arguments or named:
                function = {"name": named, "arguments": arguments} if named else {"arguments": arguments}
                out.append({"index": index, "function": function})
        if out:
            self.had_tools = True
        return self._released(out)

    def _first_fragment(
        self, index: int, call: dict[str, Any], fn: dict[str, Any], repairs: Repairs
    ) -> dict[str, Any]:
        first = fix_tool_call(call, repairs, self.strings.setdefault(index, ArgumentStrings()))
        self.tool_ids[index] = first["id"]
        self.next_tool = max(self.next_tool, index + 1)
        self.last_call = (index, call.get("id"), fn.get("name"), _shape(first["function"]["arguments"]))
        self.count_output(first["function"]["name"] + first["function"]["arguments"], call=True)
        if not first["function"]["name"]:
            self.unnamed.add(index)
        return {"index": index, **first}

    def _named_later(self, index: int, name: str) -> None:
        """A call that began without a name gets it from a later fragment."""
        self.unnamed.discard(index)
        self.count_output(name, call=True)
        if self.last_call[0] == index:
            self.last_call = (index, self.last_call[1], name, self.last_call[3])

    def _released(self, out: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tool-call deltas to send now: ``out``, unless a call still waits for its name; then held
        from that call on, and sent as one delta per call once every call has its name."""
        if self.held_calls is None:
            if not self.unnamed:
                return out  # (every call with a name: the usual path)
            self.held_calls = []
        self.held_calls += out
        if self.unnamed:
            self.held_call_chars += sum(len(delta["function"].get("arguments") or "") for delta in out)
            if self.held_call_chars > MOST_HELD_UNNAMED:
                raise unnamed_call(min(self.unnamed), self.index)
            return []
        held, self.held_calls, self.held_call_chars = self.held_calls, None, 0
        return _joined(held)

    def first_unnamed(self) -> int | None:
        """The first call still without a name at the stream's end (judged then: until a call ends, a
        later fragment may carry its name); None when every call has one."""
        return min(self.unnamed) if self.unnamed else None

    def call_cut(self) -> bool:
        """The latest call's arguments are begun and not one JSON object: its generation was cut off
        (Q84), or it is broken (``broken_call_finish``). Blank arguments are no cut: several servers
        send ``""`` for a call without parameters (the Messages translation reads it as ``{}``)."""
        shape = self.last_call[3]
        return self.had_tools and not shape.blank and not shape.whole

    def flush_tool_text(self, tail: str, repairs: Repairs) -> tuple[str, str, list[dict[str, Any]]]:
        """At the stream's end, what the tool-text scanners held (Q79): the content's last text (after
        ``tail``, what the stop scanner held), the reasoning's, and the calls they completed."""
        reasoning = ""
        found: list[ParsedCall] = []
        if self.tool_text is not None:
            tail, found = self.tool_text.feed(tail)
            rest, more = self.tool_text.finish()
            tail += rest
            found += more
        if self.reasoning_tool_text is not None:
            reasoning, more = self.reasoning_tool_text.finish()
            drafts = self.reasoning_calls + more
            if drafts and (self.had_tools or found):
                reasoning += "".join(self.reasoning_tool_text.taken or ())  # given back, as written
            else:
                found += drafts
        if any(s is not None and s.unparsed for s in (self.tool_text, self.reasoning_tool_text)):
            repairs.add(TOOL_TEXT_UNPARSED)
        return tail, reasoning, self.text_calls(found, repairs)

    def text_calls(self, calls: list[ParsedCall], repairs: Repairs) -> list[dict[str, Any]]:
        """Tool-call deltas, each whole, for calls taken out of the content (Q79)."""
        out: list[dict[str, Any]] = []
        for call in calls:
            name, arguments = call.name, call.arguments
            repairs.add("Q79")
            index = self.next_tool
            self.next_tool += 1
            call_id = self.tool_ids[index] = new_tool_call_id()
            self.last_call = (index, call_id, name, _shape(arguments))
            function = {"name": name, "arguments": arguments}
            out.append({"index": index, "id": call_id, "type": "function", "function": function})
        if out:
            self.had_tools = True
        return out

    def _starts_call(self, call: dict[str, Any], fn: dict[str, Any]) -> bool:
        """Whether a fragment without ``index`` (Q64) opens a new call rather than going on with the last:
        another id does (compared as the upstream sent it: TGI's "0" stays "0", Q65), and so does a name
        unless it is the last call's repeated (vLLM, Q63) while that call's arguments are not yet whole
        JSON; a fragment with neither goes on with the last call."""
        if not self.tool_ids:
            return True
        _, last_id, last_name, shape = self.last_call
        call_id = call.get("id")
        if call_id and call_id != last_id:
            return True
        name = fn.get("name")
        return bool(name) and (name != last_name or shape.whole)
