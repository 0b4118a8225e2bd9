"""Per-choice state and the repairs shared by streamed and whole responses (sections B, G, H, I)."""

from __future__ import annotations

import json
import os
from typing import Any

from ..emulation.stop import StopScanner
from .logprobs import LogprobEntry, from_entries, logprob_entries
from .repairs import Repairs

__all__ = ["ChoiceState", "as_dict", "fix_tool_call", "new_tool_call_id"]


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


def fix_tool_call(call: dict[str, Any], repairs: Repairs) -> dict[str, Any]:
    """A whole tool call with an id (TGI's "0", Q65), ``type`` and string arguments."""
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
        "function": {"name": str(fn.get("name") or ""), "arguments": _arguments(arguments)},
    }


class ChoiceState:
    """What one choice index has shown so far in a stream."""

    __slots__ = (
        "finish",
        "had_tools",
        "held_logprobs",
        "index",
        "logprob_chars",
        "next_tool",
        "parts",
        "role_sent",
        "scanner",
        "sent_chars",
        "stopped",
        "text_offset",
        "tokens",
        "tool_ids",
    )

    def __init__(self, index: int, stops: tuple[str, ...], keep_text: bool) -> None:
        self.index = index
        self.role_sent = False
        self.finish: str | None = None
        self.tokens = 0
        self.scanner = StopScanner(stops) if stops else None
        self.stopped = False
        self.tool_ids: dict[int, str] = {}
        self.next_tool = 0
        self.had_tools = False
        self.text_offset = 0
        self.parts: list[str] | None = [] if keep_text else None
        # With stop sequences, logprob entries wait with the text the scanner holds back: (start and
        # end of the token in the upstream's text, entry). Counted only then.
        self.held_logprobs: list[tuple[int, int, LogprobEntry]] = []
        self.logprob_chars = 0
        self.sent_chars = 0

    def pass_text(self, text: str) -> str:
        """Text after stop-sequence enforcement (Q76); marks the choice stopped on a hit."""
        if self.scanner is not None:
            text = self.scanner.feed(text)
            if self.scanner.hit:
                self.stopped = True
            self.sent_chars += len(text)
        if text:
            self.tokens += 1
            if self.parts is not None:
                self.parts.append(text)
        return text

    def pass_logprobs(self, logprobs: Any) -> Any:
        """The logprobs of the text sent so far: with stop sequences, a token's wait while the scanner
        holds its text back, and those past a stop are dropped with the text."""
        if self.scanner is None or not isinstance(logprobs, dict):
            return logprobs
        for token, entry in logprob_entries(logprobs):
            start = self.logprob_chars
            self.logprob_chars += len(token)
            self.held_logprobs.append((start, self.logprob_chars, (token, entry)))
        return from_entries(logprobs, self._release())

    def flush_logprobs(self, empty: dict[str, Any]) -> dict[str, Any] | None:
        """What is still held, at the end (its text was flushed), in the shape of ``empty``."""
        if not self.held_logprobs:
            return None
        self.sent_chars = self.logprob_chars
        return from_entries(empty, self._release())

    def _release(self) -> list[LogprobEntry]:
        # After a stop the text ends at sent_chars: tokens that start before it go, the rest never do.
        sent = self.sent_chars
        ready = [e for start, end, e in self.held_logprobs if (start < sent if self.stopped else end <= sent)]
        if self.stopped:
            self.held_logprobs = []
        else:
            self.held_logprobs = [h for h in self.held_logprobs if h[1] > sent]
        return ready

    def stream_tool_calls(self, calls: list[Any], repairs: Repairs) -> list[dict[str, Any]]:
        """Tool-call deltas with ``index`` always, and id/type/name only in a call's first fragment."""
        out: list[dict[str, Any]] = []
        for call in calls:
            if not isinstance(call, dict):
                continue
            index = call.get("index")
            fn = as_dict(call.get("function"))
            if not isinstance(index, int) or isinstance(index, bool):
                repairs.add("Q64")
                starts_call = bool(call.get("id") or fn.get("name")) or not self.tool_ids
                index = self.next_tool if starts_call else self.next_tool - 1
            if index not in self.tool_ids:
                first = fix_tool_call(call, repairs)
                self.tool_ids[index] = first["id"]
                self.next_tool = max(self.next_tool, index + 1)
                out.append({"index": index, **first})
                continue
            if call.get("id") or call.get("type") or fn.get("name"):
                repairs.add("Q63")  # repeated id/name: the SDK accumulator would join them
            arguments = _arguments(fn.get("arguments"))
            if arguments:
                out.append({"index": index, "function": {"arguments": arguments}})
        if out:
            self.had_tools = True
        return out
