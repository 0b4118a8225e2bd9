"""Tool calls an upstream sent as text (Q79), turned into ``tool_calls`` where unambiguous.

An upstream whose chat template renders tools but whose server does not parse the model's answer sends
the call as text: llama-server without ``--jinja`` or with a template it has no parser for, vLLM
without ``--enable-auto-tool-choice`` or with another model's parser, LocalAI in a streaming regression
(mudler/LocalAI#10052), Ollama for models whose template it does not know (ollama/ollama#17274). The
client then shows the markup and its agent loop stops: no call to run.

Every syntax in conformance/tool_formats/catalog.py is read (Hermes/Qwen 2.5 JSON, Qwen3-Coder XML, GLM,
Mistral, Llama 3.x, Granite, DeepSeek, Kimi K2, gpt-oss harmony, FunctionGemma), each from the marker
that opens its calls: markers no prose contains. Only where the request offered ``tools`` (and did not
say ``tool_choice: "none"``), the upstream sent no ``tool_calls`` of its own, and every call parses as a
call of an offered function with a JSON object of arguments (valid against the tool's schema where it is
``strict``: conformance/tool_formats/offered.py). Anything else is left as the text it was: a wrong guess
would run a tool nobody called. A marker whose calls did not parse is said (``unparsed``: the access
log's ``tool_text_unparsed`` and ``conformant_tool_text_unparsed_total``), so that a user sees a call
the proxy could not take out.

Cost: a stream is scanned piece by piece, each piece read once, and only the text from a marker on is
held. Pieces with neither ``<`` nor ``[`` (where every marker begins) pass after two scans in C. The
scanner once joined all it held to each new piece and searched the whole again: a ``<tool_call>`` that
never closed, streamed as 200,000 one-character deltas, took 35.4 s of the proxy's CPU against 6.6 s for
plain text; read once, 5.5 s against 5.7 s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from conformance.tool_formats.base import CallSyntax, ParsedCall
from conformance.tool_formats.catalog import SYNTAXES
from conformance.tool_formats.offered import OfferedTools

__all__ = ["MOST_HELD", "ToolTextScanner", "calls_in_text"]

MOST_HELD = 8 << 20
"""Characters held for one call that has not ended: a call's arguments may be a whole file, but an
upstream's markup that never closes may not grow the proxy's memory without bound (as the unnamed calls'
bound in choices.py): past this, what was held goes out as text, counted as unparsed."""

_LEAD_ROOM = 64
"""The most of an answer's start read to tell whether a leading-only call opens it: a call's opening
(``{"name"``, the python tag) comes in its first few characters, past white space."""


@dataclass(frozen=True, slots=True)
class _Markers:
    """What the scanner looks for, built once per set of syntaxes."""

    opens: re.Pattern[str]
    by_marker: dict[str, tuple[CallSyntax, ...]]
    longest: int
    leading: tuple[CallSyntax, ...]
    prefixes: frozenset[str]
    """Every beginning of a marker short of the whole: what a piece may end with while a marker comes."""


@cache
def _markers(syntaxes: tuple[CallSyntax, ...]) -> _Markers:
    by_marker: dict[str, list[CallSyntax]] = {}
    for syntax in syntaxes:
        if not syntax.leading_only:
            for marker in syntax.markers:
                by_marker.setdefault(marker, []).append(syntax)
    ordered = sorted(by_marker, key=len, reverse=True)  # the longest marker where two begin alike
    return _Markers(
        re.compile("|".join(map(re.escape, ordered))),
        {marker: tuple(found) for marker, found in by_marker.items()},
        max(map(len, ordered), default=1),
        tuple(s for s in syntaxes if s.leading_only),
        frozenset(marker[:size] for marker in ordered for size in range(1, len(marker))),
    )


def _could_begin_marker(text: str, markers: _Markers) -> int:
    """Where the end of ``text`` that could still grow into a marker starts (len(text) if none): looked
    for only from a ``<`` or ``[`` (every marker's first character), in C, then by one set lookup."""
    start = max(0, len(text) - markers.longest + 1)
    best = len(text)
    for first in "<[":
        position = text.find(first, start)
        while 0 <= position < best:
            if text[position:] in markers.prefixes:
                best = position
                break
            position = text.find(first, position + 1)
    return best


class ToolTextScanner:
    """One streamed choice's text, with the calls written in it taken out.

    States: ``start`` (only white space so far: a leading-only call may open the answer), ``leading``
    (it did: the answer is held to its end), ``text`` (content passes; the end that could begin a marker
    is held), ``region`` (a marker opened calls: held until one of its syntaxes' ends, or the stream's
    end), ``between`` (calls, then only white space: held, as layout unless text follows), ``off``
    (markup that did not parse: the rest passes as the model wrote it).
    """

    __slots__ = (
        "_candidates",
        "_ends",
        "_held",
        "_held_size",
        "_lead",
        "_markers",
        "_offered",
        "_state",
        "_tail",
        "taken",
        "unparsed",
    )

    def __init__(
        self, offered: OfferedTools, syntaxes: tuple[CallSyntax, ...] = SYNTAXES, *, keep_taken: bool = False
    ) -> None:
        self._offered = offered
        self._markers = _markers(syntaxes)
        self._state = "start" if self._markers.leading else "text"
        self._held: list[str] = []  # the text held back, in the pieces it came in
        self._held_size = 0  # (region, leading) its characters
        self._candidates: tuple[CallSyntax, ...] = ()  # (region) the syntaxes its marker opens
        self._ends: tuple[str, ...] = ()  # (region) the text that may end it
        self._tail = ""  # (region) the held text's last characters, where an end may have begun
        self._lead = ""  # (start) the answer's first characters after its white space
        self.unparsed = False
        """Whether a marker opened calls that did not parse (they went out as text)."""
        self.taken: list[str] | None = [] if keep_taken else None
        """(With ``keep_taken``) the text of each stretch taken out as calls, as the model wrote it."""

    def feed(self, text: str) -> tuple[str, list[ParsedCall]]:
        """The text that can go out now, and the calls completed by ``text``."""
        state = self._state
        if state == "off":
            return text, []
        if state == "text" and not self._held and "<" not in text and "[" not in text:
            return text, []  # most pieces: no marker, nor the beginning of one
        if state == "leading":
            return self._hold(text)
        if state == "region":
            return self._region(text)
        if state == "start":
            return self._start(text)
        if state == "between":
            self._held.append(text)
            self._held_size += len(text)
            if (not text or text.isspace()) and self._held_size <= MOST_HELD:
                return "", []  # (white space after a call: layout, unless text follows)
            self._state = "text"
            text = self._take()
        elif self._held:
            self._held.append(text)
            text = self._take()
        return self._scan(text)

    def passes(self, texts: list[bytes]) -> bool:
        """Whether ``texts`` (content as UTF-8, in turn) would all go out as they are, leaving the scanner
        as it was: ``feed``'s first two returns. A stream's content relayed by its bytes
        (plain_chunks.py) is asked this instead of being fed."""
        state = self._state
        if state == "off":
            return True
        return state == "text" and not self._held and not any(b"<" in t or b"[" in t for t in texts)

    def finish(self) -> tuple[str, list[ParsedCall]]:
        """At the stream's end: the calls of what was held, or it as text."""
        held = self._take()
        if self._state == "between":
            self._keep(held)  # (white space after the last call: layout)
            return "", []
        if self._state == "leading" or (self._state == "start" and held.strip()):
            found = self._decide(held, self._markers.leading)
            if found is not None:
                self._keep(held)
                return found
        elif self._state == "region":
            found = self._decide(held, self._candidates)
            if found is not None:
                self._keep(held)
                return found
            self.unparsed = any(syntax.opens_call for syntax in self._candidates)
        return held, []

    def _keep(self, taken: str) -> None:
        if self.taken is not None:
            self.taken.append(taken)

    def _take(self) -> str:
        held = "".join(self._held)
        self._held = []
        self._held_size = 0
        return held

    def _start(self, text: str) -> tuple[str, list[ParsedCall]]:
        """The answer's start: a leading-only syntax's call, or too early to tell, or content. Held as
        the pieces it came in and judged by its first characters only, so that white space streamed
        before an answer costs no more than the answer (issue 32: 200,000 deltas of it took 10.3 s)."""
        self._held.append(text)
        self._held_size += len(text)
        if self._held_size > MOST_HELD:  # (white space without end: no answer a call opens)
            self._state = "text"
            return self._scan(self._take())
        if not self._lead and (not text or text.isspace()):
            return "", []
        self._lead = self._lead + text if self._lead else text.lstrip()
        opens = {syntax.opens_answer(self._lead) for syntax in self._markers.leading}
        if True in opens:
            self._state = "leading"
            return "", []
        if None in opens and len(self._lead) < _LEAD_ROOM:
            return "", []
        self._state = "text"
        return self._scan(self._take())

    def _scan(self, text: str) -> tuple[str, list[ParsedCall]]:
        """``text`` with its whole regions taken out as calls; a region not yet ended, and an end that
        could begin a marker, held back."""
        out: list[str] = []
        calls: list[ParsedCall] = []
        while True:
            found = self._markers.opens.search(text)
            if found is None:
                if calls and not text.strip():  # calls, then layout or nothing yet
                    self._state = "between"
                    self._held = [text] if text else []
                    return "".join(out), calls
                cut = _could_begin_marker(text, self._markers)
                if cut < len(text):
                    cut = 0 if text[:cut].isspace() else cut  # (layout before what may be a call)
                    self._held = [text[cut:]]
                    text = text[:cut]
                return ("".join(out) + text if out else text), calls
            # White space before a call is template layout: it goes with the call (given back with it
            # where the call does not parse), not out as content.
            start = 0 if not text[: found.start()].strip() else found.start()
            out.append(text[:start])
            self._open(found.group())
            region = text[start:]
            end = self._end(region)
            if end is None:
                self._held, self._held_size = [region], len(region)
                self._tail = region[-self._end_room() :]
                return "".join(out), calls
            decided = self._decide(region[:end], self._candidates)
            if decided is None:
                self._state = "off"
                self.unparsed = True
                out.append(region)
                return "".join(out), calls
            self._state = "text"
            out.append(decided[0])
            calls += decided[1]
            text = region[end:]  # (white space after it goes with the text that follows, if any)
            self._keep(region[:end])

    def _hold(self, text: str) -> tuple[str, list[ParsedCall]]:
        """``text`` held with what may be a call, up to ``MOST_HELD`` characters: past them, all of it
        goes out as the text it is, and the rest of the answer passes as it comes."""
        self._held.append(text)
        self._held_size += len(text)
        if self._held_size <= MOST_HELD:
            return "", []
        self._state = "off"
        self.unparsed = True
        return self._take(), []

    def _region(self, text: str) -> tuple[str, list[ParsedCall]]:
        """A piece of an open region: held, until one of its ends comes."""
        held = self._hold(text)
        if self._state == "off":
            return held
        window = self._tail + text
        if self._end(window) is None:
            self._tail = window[-self._end_room() :]
            return "", []
        # Found in the window: read the region once, from its marker.
        return self._scan(self._take())

    def _open(self, marker: str) -> None:
        self._state = "region"
        self._candidates = self._markers.by_marker[marker]
        self._ends = tuple({end for syntax in self._candidates for end in syntax.ends_of(marker)})

    def _end_room(self) -> int:
        """How much of the held text's end to keep: all but the last character of the longest end."""
        return max(map(len, self._ends), default=2) - 1

    def _end(self, region: str) -> int | None:
        """Where the first of the region's ends closes in ``region`` (the index after it)."""
        ends = [found + len(end) for end in self._ends if (found := region.find(end)) >= 0]
        return min(ends) if ends else None

    def _decide(self, region: str, syntaxes: tuple[CallSyntax, ...]) -> tuple[str, list[ParsedCall]] | None:
        """The text left and the calls, for the first syntax that reads ``region`` as calls of offered
        functions, all of them, with none of its markers left over; else None."""
        for syntax in syntaxes:
            parsed = syntax.parse(region, final=True, schemas=self._offered.schemas)
            if not parsed.calls or any(
                marker in parsed.content for marker in syntax.markers if marker != "{"
            ):
                continue
            accepted = [self._offered.accept(call) for call in parsed.calls]
            if all(call is not None for call in accepted):
                return parsed.content, [call for call in accepted if call is not None]
        return None


def calls_in_text(text: str, offered: OfferedTools) -> tuple[str | None, list[ParsedCall], bool]:
    """The content left (None if nothing is), the calls of ``offered`` functions written in ``text``
    (none: the content is ``text`` as it was), and whether markup that opened calls did not parse."""
    if not offered:
        return text, [], False
    scanner = ToolTextScanner(offered)
    content, calls = scanner.feed(text)
    rest, more = scanner.finish()
    calls += more
    if not calls:
        return text, [], scanner.unparsed
    return (content + rest).strip() or None, calls, scanner.unparsed
