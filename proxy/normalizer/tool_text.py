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
"""

from __future__ import annotations

import json
from typing import Any

from conformance import jsoncodec

__all__ = ["HERMES_CLOSE", "HERMES_OPEN", "MISTRAL_MARKER", "ToolTextScanner", "calls_in_text"]

HERMES_OPEN = "<tool_call>"
HERMES_CLOSE = "</tool_call>"
MISTRAL_MARKER = "[TOOL_CALLS]"
_MISTRAL_ARGS = "[ARGS]"

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
    parse, as the content it was (and from then on the rest passes as it comes).
    """

    __slots__ = ("_at_start", "_held", "_mistral", "_off", "_tools")

    def __init__(self, tools: tuple[str, ...]) -> None:
        self._tools = tools
        self._held = ""
        self._at_start = True  # nothing but white space so far: a Mistral marker may come
        self._mistral = False
        self._off = False

    def feed(self, text: str) -> tuple[str, list[Call]]:
        """The content that can go out now, and the calls completed by ``text``."""
        if self._off:
            return text, []
        held = self._held + text
        if self._mistral:
            self._held = held
            return "", []
        if self._at_start:
            stripped = held.lstrip()
            if stripped.startswith(MISTRAL_MARKER):
                self._mistral = True
                self._held = held
                return "", []
            if MISTRAL_MARKER.startswith(stripped):
                self._held = held  # the marker may still be coming
                return "", []
            self._at_start = False
        out: list[str] = []
        calls: list[Call] = []
        while True:
            start = held.find(HERMES_OPEN)
            if start < 0:
                cut = _marker_prefix(held, HERMES_OPEN)
                out.append(held[:cut])
                self._held = held[cut:]
                return "".join(out), calls
            end = held.find(HERMES_CLOSE, start)
            if end < 0:
                out.append(held[:start])
                self._held = held[start:]
                return "".join(out), calls
            block = held[start : end + len(HERMES_CLOSE)]
            found = _hermes(block, self._tools)
            if found is None:
                self._off = True  # not a call after all: the rest is left as the model wrote it
                self._held = ""
                return "".join(out) + held, calls
            if held[:start].strip():  # (white space between blocks is template layout, not content)
                out.append(held[:start])
            calls.extend(found[1])
            held = held[end + len(HERMES_CLOSE) :].lstrip()

    def finish(self) -> tuple[str, list[Call]]:
        """At the stream's end: a Mistral answer's calls, or what was held, as content."""
        held, self._held = self._held, ""
        if self._mistral and not self._off:
            calls = _mistral(held.lstrip()[len(MISTRAL_MARKER) :], self._tools)
            if calls is not None:
                return "", calls
        return held, []
