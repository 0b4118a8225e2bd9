"""Streamed text -> content deltas and tool-call fragments, for one choice.

Content streams as it comes until a format's opening marker shows up; the tail that could still grow
into a marker is held back, so a call never leaks into ``content`` as text (the failure issue 20 counts
most in public reports). From the marker on, the text is parsed again at each step. A call written name
first (as every grammar here makes it) is streamed as it is generated: its first fragment once its name
and the ``{`` of its arguments are out, then the arguments' text in the pieces the model writes them. A
call that cannot be followed so (arguments first, Mistral's ``[ARGS]``) is handed out once whole. At the
end whatever was held and holds no call is content after all. Formats whose call can only open the
answer (Llama 3.x, the generic JSON) hold the answer's start until it shows whether it is a call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from backend.tool_formats.base import ParsedCall, ToolFormat

__all__ = ["CallFragment", "ToolCallStream"]

# A call's name, then its arguments object opening: the k-th match is the k-th call. A quote inside a
# JSON string is escaped, so a string that mentions "name" never matches.
_OPENING = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)')


@dataclass(frozen=True, slots=True)
class CallFragment:
    index: int
    """The call's place in this answer (OpenAI's ``tool_calls[].index``)."""
    name: str | None
    """Set on a call's first fragment only."""
    arguments: str
    call_id: str | None = None
    """The id the model wrote (Mistral), on the first fragment."""


@dataclass(slots=True)
class _Open:
    """A call being streamed: where its arguments start in the call text and how much went out."""

    index: int
    start: int
    sent: int = 0


class ToolCallStream:
    def __init__(self, fmt: ToolFormat) -> None:
        self.fmt = fmt
        self.text = ""
        self.sent = 0
        """How much of ``text`` went out as content."""
        self.call_start: int | None = 0 if fmt.whole_json else None
        self.calls_done = 0
        """Calls handed out whole (or finished after streaming)."""
        self.open: _Open | None = None
        self.reply_sent = ""
        """What went out of a wrapped reply (the generic ``response``) while it was written."""

    @property
    def has_calls(self) -> bool:
        return self.calls_done > 0 or self.open is not None

    def feed(self, text: str) -> tuple[str, list[CallFragment]]:
        self.text += text
        content = ""
        if self.call_start is None:
            content = self._content()
            if self.call_start is None:
                return content, []
        fragments = self._fragments(final=False)
        return content + self._reply(), fragments

    def _reply(self) -> str:
        assert self.call_start is not None
        if self.has_calls:
            return ""
        so_far = self.fmt.partial_content(self.text[self.call_start :])
        if so_far is None or not so_far.startswith(self.reply_sent):
            return ""
        new = so_far[len(self.reply_sent) :]
        self.reply_sent = so_far
        return new

    def finish(self) -> tuple[str, list[CallFragment]]:
        if self.call_start is None:
            content = self.text[self.sent :]
            self.sent = len(self.text)
            return content, []
        fragments = self._fragments(final=True)
        if self.open is not None:  # cut off inside the arguments (max_tokens): what came is what there is
            fragments += self._advance(self.text[self.call_start :], closing=True)
            self.calls_done += 1
        parsed = self.fmt.read(self.text[self.call_start :], final=True)
        content = parsed.content if parsed.calls or not self.has_calls else ""
        if self.reply_sent and content.startswith(self.reply_sent):
            content = content[len(self.reply_sent) :]
        return content, fragments

    # ---- content -------------------------------------------------------------------------------------

    def _content(self) -> str:
        if self.fmt.leading_only:
            head = self.text.lstrip()
            if any(head.startswith(m) for m in self.fmt.markers):
                self.call_start = self.sent
                return ""
            if not head or any(m.startswith(head) for m in self.fmt.markers):
                return ""  # too early to tell
            self.fmt = _NoCalls()  # the answer opened with prose: no call can follow
            return self._flush(len(self.text))
        hits = [i for i in (self.text.find(m, self.sent) for m in self.fmt.markers) if i >= 0]
        if hits:
            start = min(hits)
            self.call_start = start
            return self._flush(start)
        return self._flush(len(self.text) - self._held())

    def _held(self) -> int:
        best = 0
        for marker in self.fmt.markers:
            for k in range(min(len(marker) - 1, len(self.text) - self.sent), best, -1):
                if self.text.endswith(marker[:k]):
                    best = k
                    break
        return best

    def _flush(self, end: int) -> str:
        content = self.text[self.sent : end]
        self.sent = max(self.sent, end)
        return content

    # ---- calls ---------------------------------------------------------------------------------------

    def _fragments(self, *, final: bool) -> list[CallFragment]:
        assert self.call_start is not None
        body = self.text[self.call_start :]
        parsed = self.fmt.read(body, final=final)
        out: list[CallFragment] = []
        for index in range(self.calls_done, len(parsed.calls)):
            call = parsed.calls[index]
            if self.open is not None and self.open.index == index:
                out += self._advance(body, closing=True)
            else:
                out += _whole(index, call)
            self.calls_done = index + 1
        if self.open is None and not final:
            openings = list(_OPENING.finditer(body))
            if len(openings) > self.calls_done:
                match = openings[self.calls_done]
                self.open = _Open(self.calls_done, match.end())
                out.append(CallFragment(self.calls_done, match.group(1), ""))
        if self.open is not None and not final:
            out += self._advance(body, closing=False)
        return out

    def _advance(self, body: str, *, closing: bool) -> list[CallFragment]:
        """The open call's arguments written since the last fragment; ``closing`` ends the call."""
        assert self.open is not None
        end = _object_end(body, self.open.start)
        stop = end if end is not None else len(body)
        piece = body[self.open.start + self.open.sent : stop]
        self.open.sent += len(piece)
        index = self.open.index
        if closing or end is not None:
            self.open = None if closing else self.open
        return [CallFragment(index, None, piece)] if piece else []


def _whole(index: int, call: ParsedCall) -> list[CallFragment]:
    return [CallFragment(index, call.name, "", call.id), CallFragment(index, None, call.arguments)]


def _object_end(text: str, start: int) -> int | None:
    """The index after the JSON object opening at ``text[start]``, or None while it is still open."""
    depth = 0
    in_string = escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


class _NoCalls(ToolFormat):
    """What a leading-only format becomes once the answer opened with prose."""

    name = "none"
