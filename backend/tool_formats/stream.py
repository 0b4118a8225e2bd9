"""Streamed text -> content deltas and whole calls, for one choice.

Content streams as it comes until a format's opening marker shows up; the tail that could still grow
into a marker is held back, so a call never leaks into ``content`` as text (the failure issue 20 counts
most in public reports). From the marker on, the text is parsed again at each step and every call is
handed out once it is whole; at the end whatever was held and holds no call is content after all.
Formats whose call can only open the answer (Llama 3.x, the generic JSON) hold the answer's start until
it shows whether it is a call.
"""

from __future__ import annotations

from backend.tool_formats.base import ParsedCall, ToolFormat

__all__ = ["ToolCallStream"]


class ToolCallStream:
    def __init__(self, fmt: ToolFormat) -> None:
        self.fmt = fmt
        self.text = ""
        self.sent = 0
        """How much of ``text`` went out as content."""
        self.call_start: int | None = 0 if fmt.whole_json else None
        self.calls_sent = 0

    def feed(self, text: str) -> tuple[str, list[ParsedCall]]:
        self.text += text
        if self.call_start is None:
            content = self._content()
            if self.call_start is None:
                return content, []
            return content, self._new_calls(final=False)
        return "", self._new_calls(final=False)

    def finish(self) -> tuple[str, list[ParsedCall]]:
        if self.call_start is None:
            content = self.text[self.sent :]
            self.sent = len(self.text)
            return content, []
        parsed = self.fmt.parse(self.text[self.call_start :], final=True)
        calls = parsed.calls[self.calls_sent :]
        self.calls_sent = len(parsed.calls)
        self.sent = len(self.text)
        return parsed.content, calls

    @property
    def has_calls(self) -> bool:
        return self.calls_sent > 0

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

    def _new_calls(self, *, final: bool) -> list[ParsedCall]:
        assert self.call_start is not None
        parsed = self.fmt.parse(self.text[self.call_start :], final=final)
        calls = parsed.calls[self.calls_sent :]
        self.calls_sent = len(parsed.calls)
        return calls


class _NoCalls(ToolFormat):
    """What a leading-only format becomes once the answer opened with prose."""

    name = "none"
