"""gpt-oss harmony, as a server without a harmony parser leaves it in ``content``: calls are the messages
addressed ``to=functions.NAME``.

Facts, from llama.cpp (ggml-org/llama.cpp): common/chat.cpp ``common_chat_parse_gpt_oss`` and the
GPT-OSS cases of tests/test-chat.cpp (template models/templates/openai-gpt-oss-120b.jinja), and
OpenAI's harmony format guide (github.com/openai/harmony):

- a message is ``<|start|>ROLE HEADER<|message|>BODY`` ended by ``<|end|>``, ``<|call|>`` (a call) or
  ``<|return|>`` (the answer's end); the first one the model writes lacks ``<|start|>assistant``, which
  the prompt ends with, so it opens at ``<|channel|>``;
- a call's header puts the recipient after the channel,
  ``<|channel|>commentary to=functions.NAME <|constrain|>json``, or before it,
  ``<|start|>assistant to=functions.NAME<|channel|>commentary json``; the channel is ``commentary`` or
  ``analysis``; the constraint (``json``, with or without ``<|constrain|>``) is optional; NAME is
  llama.cpp's ``[^<\\s]+``; the body is the arguments' JSON;
- ``final`` channel text is the answer; ``commentary`` without a recipient is a preamble the user sees
  (llama.cpp passes both on as content); ``analysis`` is reasoning.

The rule for content, as simple as is honest: a text holding no call is returned verbatim, markup and
all (this module reads calls; a harmony reader for reasoning is another matter). Once a call is found,
content is the text outside harmony markup plus the bodies of ``final`` and preamble messages;
``analysis`` messages are dropped (their text is reasoning, not content), and a message that reads as
none of these, or a call whose body is not one JSON object ended by ``<|call|>``, stays verbatim. At the
answer's end (``final``) a call's ``<|call|>`` may be missing, since servers drop that stop token.

Streams: content depends on whether a call comes at all, so nothing from the first harmony marker on is
returned until a call is whole; after that, content grows message by message, up to the start of an
unfinished call or header.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from conformance.tool_formats._scanning import SPACE
from conformance.tool_formats.base import (
    CallSyntax,
    ParsedCall,
    ParsedOutput,
    Schemas,
    arguments_text,
    decode_json_at,
)

__all__ = ["Harmony"]

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
CALL = "<|call|>"
_TOKENS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>")
_TOKEN = re.compile(r"<\|(start|channel|message|end|call|return|constrain)\|>")
_STOPS = frozenset({"end", "call", "return"})

_ASSISTANT = r"(?:<\|start\|>assistant)?"
# llama.cpp: " <|constrain|>json" or " json"; the space before <|constrain|> is taken as optional.
_CONSTRAINT = r"(?:\s*<\|constrain\|>[\w-]+|\s+[\w-]+)?"
_RECIPIENT = r"\s+to=functions\.([^<\s]+)"
_CALL_BEFORE = re.compile(
    r"<\|start\|>assistant" + _RECIPIENT + r"\s*<\|channel\|>(?:analysis|commentary)" + _CONSTRAINT
)
_CALL_AFTER = re.compile(_ASSISTANT + r"<\|channel\|>(?:analysis|commentary)" + _RECIPIENT + _CONSTRAINT)
_SHOWN = re.compile(_ASSISTANT + r"<\|channel\|>(?:final|commentary)" + _CONSTRAINT)
_ANALYSIS = re.compile(_ASSISTANT + r"<\|channel\|>analysis" + _CONSTRAINT)


@dataclass(frozen=True, slots=True)
class _Message:
    start: int
    """Where its opener (``<|start|>`` or ``<|channel|>``) is."""
    body: int
    """Where its body starts; -1 while its header is unfinished."""
    body_end: int
    end: int
    """After its stop token (or where the next message or the text starts or ends)."""
    stop: str | None
    """``end``, ``call`` or ``return``; None when the next ``<|start|>`` or the text's end cut it."""


class Harmony(CallSyntax):
    """gpt-oss harmony messages left in content; calls are those addressed ``to=functions.NAME``."""

    name = "harmony"
    # Either opens a message that may be a call (the first message lacks <|start|>); a stream holds
    # from there, as content from the first marker on depends on whether a call comes.
    markers = (CHANNEL, START)
    ends = (CALL,)
    opens_call = False
    leading_only = False

    def parse(self, text: str, *, final: bool, schemas: Schemas | None = None) -> ParsedOutput:
        if not final:
            text = _without_partial_token(text)
        segments = _segments(text)
        pieces: list[str] = []
        calls: list[ParsedCall] = []
        for segment in segments:
            if isinstance(segment, str):
                pieces.append(segment)
                continue
            read = _read_message(text, segment, final)
            if read is None:  # unfinished, may still become a call: the stream stops here
                break
            if isinstance(read, ParsedCall):
                calls.append(read)
            else:
                pieces.append(read)
        if calls:
            return ParsedOutput("".join(pieces).strip(), calls)
        if final:
            return ParsedOutput(text, [])
        first = next((s.start for s in segments if isinstance(s, _Message)), len(text))
        return ParsedOutput(text[:first].rstrip(), [])


def _without_partial_token(text: str) -> str:
    """``text`` less a tail that may be the start of a harmony token still arriving."""
    cut = text.rfind("<|", max(0, len(text) - 16))
    if cut >= 0 and any(token.startswith(text[cut:]) and token != text[cut:] for token in _TOKENS):
        return text[:cut]
    if text.endswith("<"):
        return text[:-1]
    return text


def _segments(text: str) -> list[str | _Message]:
    """The text cut into plain text (outside any message) and messages, in order, in one pass."""
    tokens = [(match.group(1), match.start(), match.end()) for match in _TOKEN.finditer(text)]
    segments: list[str | _Message] = []
    pos = 0
    index = 0
    while index < len(tokens):
        kind, start, _ = tokens[index]
        if kind not in ("start", "channel"):
            index += 1  # a stray token outside a message is plain text
            continue
        if start > pos:
            segments.append(text[pos:start])
        message, index = _message(text, tokens, index)
        segments.append(message)
        pos = message.end
    if pos < len(text):
        segments.append(text[pos:])
    return segments


def _message(text: str, tokens: list[tuple[str, int, int]], index: int) -> tuple[_Message, int]:
    """The message opened by ``tokens[index]`` and the index of the token after it."""
    start = tokens[index][1]
    index += 1
    while index < len(tokens) and tokens[index][0] in ("channel", "constrain"):
        index += 1
    if index == len(tokens) or tokens[index][0] != "message":
        # No <|message|>: an unfinished header at the text's end, or a broken one cut by another token.
        end = tokens[index][1] if index < len(tokens) and tokens[index][0] == "start" else len(text)
        if index < len(tokens) and tokens[index][0] in _STOPS:
            end = tokens[index][2]
            index += 1
        return _Message(start, -1, end, end, None), index
    body = tokens[index][2]
    index += 1
    while index < len(tokens) and tokens[index][0] not in _STOPS and tokens[index][0] != "start":
        index += 1
    if index == len(tokens):
        return _Message(start, body, len(text), len(text), None), index
    kind, token_start, token_end = tokens[index]
    if kind == "start":
        return _Message(start, body, token_start, token_start, None), index
    return _Message(start, body, token_start, token_end, kind), index + 1


def _read_message(text: str, message: _Message, final: bool) -> ParsedCall | str | None:
    """What a message gives: a call, text for content (verbatim markup where it reads as nothing
    known), or None where it is unfinished and may still become a call."""
    verbatim = text[message.start : message.end]
    unfinished = message.stop is None and message.end == len(text)
    if message.body < 0:
        return None if unfinished and not final else verbatim
    header = text[message.start : message.body - len(MESSAGE)]
    recipient = _CALL_AFTER.fullmatch(header) or _CALL_BEFORE.fullmatch(header)
    if recipient is not None:
        if unfinished and not final:
            return None
        ended = message.stop == "call" or (final and unfinished)
        call = _call(recipient.group(1), text[message.body : message.body_end]) if ended else None
        return verbatim if call is None else call
    if _SHOWN.fullmatch(header):
        return text[message.body : message.body_end]
    if _ANALYSIS.fullmatch(header):
        return ""
    return verbatim


def _call(name: str, body: str) -> ParsedCall | None:
    """A call's body must be one JSON object and nothing else."""
    found = decode_json_at(body, 0)
    if found is None or not isinstance(found[0], dict) or body[found[1] :].strip(SPACE):
        return None
    arguments = arguments_text(found[0])
    return None if arguments is None else ParsedCall(name, arguments)
