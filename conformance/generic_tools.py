"""llama.cpp's generic tool format (common/chat.cpp), for chat templates with no tool-call syntax: what the
model is told, and how its JSON answer is read, also while it is still open (a stream, or an answer cut
off by its token limit).

The model answers ``{"tool_call": {"name": ..., "arguments": {...}}}`` (one call), ``{"tool_calls":
[...]}`` (parallel calls) or ``{"response": ...}`` (a reply), held to that shape by a JSON Schema. Two
places write it: the bundled backend, for a model whose template shows no tools
(backend/tool_formats/generic.py), and the proxy, for a llama-server whose template has no tool-call
format (proxy/adapters/tool_emulation.py, Q83). The format's words and its reading of open answers live here,
one copy for both. (The proxy asks for one call per answer. Asked for the ``tool_calls`` array, Gemma 3
270M behind llama-server answered the forced and ``auto`` probes of ``conformant check`` with calls cut
off at the token limit.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = [
    "INSTRUCTION",
    "REQUIRED_INSTRUCTION",
    "cut_call_name",
    "decode_json_at",
    "partial_call",
    "partial_response",
    "whole_calls",
]

T = TypeVar("T")

INSTRUCTION = (
    "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to "
    "the user's request"
)
REQUIRED_INSTRUCTION = "Respond in JSON format with `tool_call` (a request to call tools)"
"""llama.cpp's own words (``tool_call`` also where the answer's schema asks for ``tool_calls``)."""

_DECODER = json.JSONDecoder()
_RESPONSE_OPEN = re.compile(r'\s*\{\s*"response"\s*:\s*"')
_CALLS_OPEN = re.compile(r'\s*\{\s*"tool_calls"\s*:\s*\[')
_CALL_OPEN = re.compile(
    r'\s*\{\s*"tool_calls?"\s*:\s*\[?\s*\{\s*"name"\s*:\s*"([^"\\]+)"\s*,\s*"arguments"\s*:\s*(.*)', re.DOTALL
)
"""A call (or the first of a ``tool_calls`` array) whose arguments have begun."""
_CALL_KEYS = ('{"tool_call":{"name":"', '{"tool_calls":[{"name":"')
_NAME_BEGUN = re.compile(r'\{"tool_calls?":\[?\{"name":"([^"\\]*)(")?')
"""A call's envelope up to its name, and the name as far as it was written, read without whitespace."""
_BEFORE_ARGUMENTS = ',"arguments":'
"""What may follow a whole name in a call cut before its arguments (read without whitespace)."""
_COMMA = re.compile(r"\s*,")
_STRING_BODY = re.compile(r'(?:[^"\\]|\\.)*')  # a JSON string's text up to its closing quote


def decode_json_at(text: str, start: int) -> tuple[Any, int] | None:
    """The JSON value starting at ``text[start:]`` (after whitespace) and the index after it, or None."""
    while start < len(text) and text[start] in " \t\r\n":
        start += 1
    try:
        return _DECODER.raw_decode(text, start)
    except ValueError:
        return None


def whole_calls(text: str, read: Callable[[Any], T | None]) -> list[T]:
    """The calls ``read`` makes of the whole objects at the start of a ``{"tool_calls": [`` that has not
    closed, up to the first object it does not take: a stream hands out each call once it is whole, and
    an answer cut off by its limit keeps them."""
    opened = _CALLS_OPEN.match(text)
    if opened is None:
        return []
    calls: list[T] = []
    pos = opened.end()
    while True:
        found = decode_json_at(text, pos)
        call = read(found[0]) if found is not None else None
        if found is None or call is None:
            return calls
        calls.append(call)
        comma = _COMMA.match(text, found[1])
        if comma is None:
            return calls
        pos = comma.end()


def partial_call(text: str) -> tuple[str, str] | None:
    """The function's name and the arguments' text so far of an answer that opens ``{"tool_call":
    {"name": ..., "arguments": `` (or ``{"tool_calls": [`` so: its first call; cut off by its token
    limit, it is OpenAI's cut call: the arguments as far as they came, finished ``length``); None for
    any other answer."""
    opened = _CALL_OPEN.match(text)
    return None if opened is None else (opened.group(1), opened.group(2).rstrip())


def cut_call_name(text: str, names: Sequence[str], *, required: bool) -> str | None:
    """The one function of ``names`` that an answer cut off before its (first) call's arguments can be
    of: the one matching the part of its name written, where the answer began a call, or could be
    nothing else (``required``: the choice forced one); None where several can, or where it may yet
    have been a reply. Found by black-box testing: a forced call cut at 3 tokens was shown as its
    envelope's text (``{"tool_call": {"``)."""
    compact = "".join(text.split())  # (a function's name holds no whitespace)
    begun = _NAME_BEGUN.match(compact)
    if begun is not None:
        written, closed = begun.group(1), begun.group(2) is not None
        if not _BEFORE_ARGUMENTS.startswith(compact[begun.end() :]):
            return None  # (its arguments began: ``partial_call``'s)
    elif compact and any(key.startswith(compact) for key in _CALL_KEYS) and (required or len(compact) > 2):
        written, closed = "", False  # (``{"t``: a call's key, not a reply's; nothing written: no call)
    else:
        return None
    fits = [name for name in names if (name == written if closed else name.startswith(written))]
    return fits[0] if len(fits) == 1 else None


def partial_response(text: str) -> str | None:
    """The reply so far of an answer that opens ``{"response": "``, decoded up to its last whole
    character (an escape such as ``\\uXXXX`` may be cut); None for any other answer."""
    opened = _RESPONSE_OPEN.match(text)
    if opened is None:
        return None
    body = text[opened.end() :]
    end = _STRING_BODY.match(body)
    body = body[: end.end()] if end is not None else body
    for cut in range(len(body), max(len(body) - 6, -1), -1):
        try:
            return str(json.loads(f'"{body[:cut]}"'))
        except ValueError:
            continue
    return ""
