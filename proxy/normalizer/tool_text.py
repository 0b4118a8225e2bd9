"""Tool calls an upstream sent as text in ``content`` (Q79), turned into ``tool_calls`` where unambiguous.

An upstream whose chat template renders tools but whose server does not parse the model's answer sends
the call as text: llama-server without ``--jinja`` or with a template it has no parser for, vLLM
without ``--enable-auto-tool-choice`` or with another model's parser, LocalAI in a streaming regression
(mudler/LocalAI#10052), Ollama for models whose template it does not know (ollama/ollama#17274). The
client then shows the markup and its agent loop stops: no call to run.

Two formats are repaired, both written by the model after a marker no prose contains:

- Hermes 2 Pro, Qwen 2.5 and Qwen 3: each call is ``<tool_call>{"name": ..., "arguments": {...}}
  </tool_call>`` (Qwen's function-calling guide, qwen.readthedocs.io ``framework/function_call``; the
  Hermes-Function-Calling README; llama.cpp ``docs/function-calling.md``, "Hermes 2/3, Qwen 2.5");
  text around the blocks stays content.
- Mistral: ``[TOOL_CALLS]`` then a JSON array of ``{"name", "arguments"}`` (v3 tokenizer, the
  Mistral-7B-Instruct-v0.3 and Mistral Nemo model cards), or, from the v11 tokenizer on (Mistral Small
  3.2, Magistral), ``[TOOL_CALLS]name[ARGS]{...}`` once per call; the marker opens the answer.

Only where the request offered ``tools`` (and did not say ``tool_choice: "none"``), the upstream sent
no ``tool_calls`` of its own, and every call parses: a JSON object of arguments for a function the
request named. Anything else is left as the text it was: a wrong guess would run a tool nobody called.

Cost: a stream is scanned piece by piece, each piece read once. The scanner used to join all it held
to each new piece and search the whole again: a ``<tool_call>`` that never closed, streamed as 200,000
one-character deltas, took 35.4 s of the proxy's CPU against 6.6 s for plain text (issue 32 measured
9.65 s against 2.49 s on a faster machine), and 200,000 deltas of white space before the answer 10.3 s
in the scanner alone. Now the unclosed block takes 5.5 s against 5.7 s for plain text (the scanner's
share: 29.6 s, now 0.25 s; the white space 0.19 s).
"""

from __future__ import annotations

import json
import re
from typing import Any

from conformance import jsoncodec

__all__ = ["HERMES_CLOSE", "HERMES_OPEN", "MISTRAL_MARKER", "ToolTextScanner", "calls_in_text"]

HERMES_OPEN = "<tool_call>"
HERMES_CLOSE = "</tool_call>"
MISTRAL_MARKER = "[TOOL_CALLS]"
_MISTRAL_ARGS = "[ARGS]"
_SPACE = re.compile(r"\s*")  # what str.strip takes (Unicode white space)

Call = tuple[str, str]
"""A repaired call: its function's name and its arguments as a JSON object's text."""


def _call(value: Any, tools: tuple[str, ...]) -> Call | None:
    """``{"name", "arguments"}`` as a call to one of ``tools`` with an object of arguments, else None."""
    if not isinstance(value, dict) or set(value) - {"name", "arguments"}:
        return None
    name = value.get("name")
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):  # some templates write the arguments as a JSON string
        arguments = _json(arguments)
    if not isinstance(name, str) or name not in tools or not isinstance(arguments, dict):
        return None
    return name, json.dumps(arguments, ensure_ascii=False)


def _json(text: str) -> Any:
    # jsoncodec: arguments nested 1,000 deep made json.loads raise RecursionError, a 500 (issue 32).
    try:
        return jsoncodec.loads(text)
    except ValueError:
        return None


def _hermes(text: str, tools: tuple[str, ...]) -> tuple[str, list[Call]] | None:
    """Hermes blocks in ``text``: the text around them and the calls; None unless all of them parse."""
    calls: list[Call] = []
    rest: list[str] = []
    position = 0
    while (start := text.find(HERMES_OPEN, position)) >= 0:
        end = text.find(HERMES_CLOSE, start)
        if end < 0:
            return None
        call = _call(_json(text[start + len(HERMES_OPEN) : end]), tools)
        if call is None:
            return None
        rest.append(text[position:start])
        calls.append(call)
        position = end + len(HERMES_CLOSE)
    rest.append(text[position:])
    return "".join(rest).strip(), calls


def _mistral(text: str, tools: tuple[str, ...]) -> list[Call] | None:
    """What follows ``[TOOL_CALLS]`` as calls (a JSON array, or ``name[ARGS]{...}`` per call), else None."""
    body = text.strip()
    if body.startswith("["):
        items = _json(body)
        if not isinstance(items, list) or not items:
            return None
        found = [_call(item, tools) for item in items]
        calls = [c for c in found if c is not None]
        return calls if len(calls) == len(found) else None
    calls = []
    for part in body.split(MISTRAL_MARKER):
        name, marker, arguments = part.partition(_MISTRAL_ARGS)
        call = _call({"name": name.strip(), "arguments": _json(arguments)}, tools) if marker else None
        if call is None:
            return None
        calls.append(call)
    return calls


def calls_in_text(text: str, tools: tuple[str, ...]) -> tuple[str | None, list[Call]] | None:
    """The content left and the calls, when ``text`` holds calls in one of the two formats; else None."""
    if not tools:
        return None
    stripped = text.lstrip()
    if stripped.startswith(MISTRAL_MARKER):
        calls = _mistral(stripped[len(MISTRAL_MARKER) :], tools)
        return None if calls is None else (None, calls)
    if HERMES_OPEN not in text:
        return None
    found = _hermes(text, tools)
    if found is None or not found[1]:
        return None
    rest, calls = found
    return rest or None, calls


def _skip_space(text: str, position: int) -> int:
    """Where the white space from ``position`` on ends (as ``str.lstrip`` would strip it, not copied)."""
    match = _SPACE.match(text, position)
    return match.end() if match else position


def _marker_prefix(text: str, marker: str) -> int:
    """Where the longest end of ``text`` that could begin ``marker`` starts (len(text) if none)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return len(text) - size
    return len(text)


class ToolTextScanner:
    """One streamed choice's content, with Hermes blocks and a Mistral answer taken out as calls.

    Text that could begin a marker is held back (a marker split over tokens); a Hermes block is held
    until it closes, a Mistral answer until the stream ends, then sent as calls, or, when it does not
    parse, as the content it was (and from then on the rest passes as it comes). Nothing bounds what
    is held: a block is a call's arguments, which may be a whole file, and a bound would send a long
    call as text.

    Each piece is read once (the module's note on cost): held text is kept as the pieces it came in,
    joined once when it is decided, and a block's close is looked for in the new piece and the last
    ``len(HERMES_CLOSE) - 1`` characters before it (a close split over pieces), not in the whole block.
    """

    __slots__ = ("_at_start", "_held", "_in_block", "_lead", "_mistral", "_off", "_tail", "_tools")

    def __init__(self, tools: tuple[str, ...]) -> None:
        self._tools = tools
        self._held: list[str] = []  # the text held back, in the pieces it came in
        self._at_start = True  # nothing but white space so far: a Mistral marker may come
        self._lead = ""  # (at the start) the first characters after the white space, up to a marker's length
        self._mistral = False
        self._in_block = False  # what is held opens a Hermes block whose close has not come
        self._tail = ""  # (in a block) the held text's last characters, where a close may have begun
        self._off = False

    def feed(self, text: str) -> tuple[str, list[Call]]:
        """The content that can go out now, and the calls completed by ``text``."""
        if self._off:
            return text, []
        if self._mistral:
            self._held.append(text)
            return "", []
        if self._at_start:
            return self._start(text)
        if self._in_block:
            return self._block(text)
        # What is held here is shorter than a marker: most often nothing.
        held = self._take() + text if self._held else text
        if "<" not in held:  # most pieces: no marker, nor the beginning of one
            return held, []
        return self._scan(held)

    def _take(self) -> str:
        held = "".join(self._held)
        self._held = []
        return held

    def _start(self, text: str) -> tuple[str, list[Call]]:
        """Text while only white space has come: a Mistral answer, a marker that may still be coming,
        or neither, and from then on scanned for Hermes blocks."""
        self._held.append(text)
        lead = self._lead + text if self._lead else text.lstrip()
        self._lead = lead = lead[: len(MISTRAL_MARKER)]
        if lead == MISTRAL_MARKER:
            self._mistral = True
            return "", []
        if MISTRAL_MARKER.startswith(lead):
            return "", []  # the marker may still be coming
        self._at_start = False
        return self._scan(self._take())

    def _block(self, text: str) -> tuple[str, list[Call]]:
        """A piece of an open block: held, until the close comes."""
        self._held.append(text)
        window = self._tail + text
        if window.find(HERMES_CLOSE) < 0:
            self._tail = window[-(len(HERMES_CLOSE) - 1) :]
            return "", []
        self._in_block = False
        return self._scan(self._take())

    def _scan(self, held: str) -> tuple[str, list[Call]]:
        """``held`` with its whole blocks taken out as calls; a block not yet closed, and an end that
        could begin one, held back."""
        out: list[str] = []
        calls: list[Call] = []
        position = 0
        while True:
            start = held.find(HERMES_OPEN, position)
            if start < 0:
                last = max(position, len(held) - len(HERMES_OPEN) + 1)  # (no longer end could begin one)
                cut = last + _marker_prefix(held[last:], HERMES_OPEN)
                self._hold(held[cut:])
                if not out:  # (most pieces: no block in them)
                    return held[position:cut], calls
                out.append(held[position:cut])
                return "".join(out), calls
            end = held.find(HERMES_CLOSE, start)
            if end < 0:
                out.append(held[position:start])
                self._hold(held[start:])
                self._in_block = True
                self._tail = held[max(start, len(held) - len(HERMES_CLOSE) + 1) :]
                return "".join(out), calls
            found = _hermes(held[start : end + len(HERMES_CLOSE)], self._tools)
            if found is None:
                self._off = True  # not a call after all: the rest is left as the model wrote it
                out.append(held[position:])
                return "".join(out), calls
            if held[position:start].strip():  # (white space between blocks is template layout, not content)
                out.append(held[position:start])
            calls.extend(found[1])
            position = _skip_space(held, end + len(HERMES_CLOSE))

    def _hold(self, text: str) -> None:
        self._held = [text] if text else []

    def finish(self) -> tuple[str, list[Call]]:
        """At the stream's end: a Mistral answer's calls, or what was held, as content."""
        held = self._take()
        if self._mistral and not self._off:
            calls = _mistral(held.lstrip()[len(MISTRAL_MARKER) :], self._tools)
            if calls is not None:
                return "", calls
        return held, []
