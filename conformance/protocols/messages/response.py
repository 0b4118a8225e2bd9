"""A chat completion (already normalized) as Anthropic's ``Message``, and the pieces of one.

Shapes from Anthropic's API reference and anthropic-python ``types/message.py``: ``id`` ``msg_...``,
``type: "message"``, ``role: "assistant"``, ``content`` blocks in the order a model produces them
(``thinking``, then ``text``, then a ``tool_use`` per call, ``id`` ``toolu_...`` and ``input`` an
object), ``stop_reason`` and ``stop_sequence``, ``usage`` with ``input_tokens`` (the prompt's tokens not
read from a cache), ``output_tokens`` and both cache counts. A ``thinking`` block's ``signature`` is this
server's digest of its text: a client sends it back with the block, and the translation leaves such
blocks out anyway.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

__all__ = [
    "STOP_REASONS",
    "PrefillEcho",
    "Signature",
    "call_input",
    "continuation",
    "message_from_chat",
    "message_object",
    "message_usage",
    "new_id",
    "signature",
    "stop_reason",
]

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}
"""Chat's ``finish_reason`` -> the Messages API's ``stop_reason``."""


def new_id(prefix: str) -> str:
    """An id as Anthropic's look: ``msg_01`` or ``toolu_01`` and 22 letters and digits, from 132 random
    bits (base64 with ``A`` and ``b`` for its two signs: one call, where drawing each of the 22 letters
    alone cost 40 us of every stream's first event)."""
    return f"{prefix}_01" + base64.b64encode(os.urandom(17), altchars=b"Ab")[:22].decode()


class Signature:
    """A thinking block's signature, this server's digest of its text, fed a piece at a time: a stream
    signs its thinking without holding it (the stream held every piece until the block closed, which an
    endless reasoning upstream made a memory without bound, issue 32)."""

    __slots__ = ("_digest",)

    def __init__(self) -> None:
        self._digest = hashlib.sha256()

    def add(self, text: str) -> None:
        self._digest.update(text.encode("utf-8", "surrogatepass"))

    def value(self) -> str:
        return base64.b64encode(self._digest.digest()).decode()


def signature(thinking: str) -> str:
    """The signature of a whole thinking text."""
    signed = Signature()
    signed.add(thinking)
    return signed.value()


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def message_usage(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    """Chat usage as the Messages API's: the prompt's cached tokens apart from the rest."""
    usage = usage if isinstance(usage, Mapping) else {}
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    prompt = _count(usage.get("prompt_tokens"))
    return {
        "input_tokens": max(prompt - cached, 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": _count(usage.get("completion_tokens")),
    }


def stop_reason(finish: Any, matched: Any, stops: tuple[str, ...], called: bool) -> tuple[str, str | None]:
    """``stop_reason`` and ``stop_sequence`` for a chat choice: its ``finish_reason``, the stop string
    an upstream names (vLLM's ``stop_reason``), and whether it made calls."""
    if called and finish in ("stop", "tool_calls"):
        return "tool_use", None
    if finish == "stop" and isinstance(matched, str) and matched in stops:
        return "stop_sequence", matched
    return STOP_REASONS.get(str(finish), "end_turn"), None


def call_input(arguments: Any) -> dict[str, Any] | None:
    """A call's ``input`` from its chat arguments (a JSON string): the object, or None where they are no
    JSON object (a call cut off by the token limit)."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else {}
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def message_object(
    message_id: str,
    model: str,
    content: list[dict[str, Any]],
    reason: str | None,
    sequence: str | None,
    usage: dict[str, Any],
) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage,
    }


def continuation(text: str, prefill: str) -> str:
    """An answer's text without the ``prefill`` it began with, where it did: Anthropic answers a final
    assistant turn with what follows it, and llama-server (with ``--jinja``) writes the turn's text
    again before its continuation (``"1, 2, 3, 4, 5"`` for ``"1, 2, 3, 4,"``; found by black-box
    testing), which a client joining the two got twice."""
    return text[len(prefill) :] if prefill and text.startswith(prefill) else text


class PrefillEcho:
    """A streamed answer's text without the prefill it may begin with (``continuation``), as it comes:
    none while the answer so far may be the prefill written again, what follows it once it was, and all
    that was held once it is not."""

    def __init__(self, prefill: str) -> None:
        self.prefill = prefill
        """The request's final assistant text while the answer may still begin with it; "" once not."""
        self._held = ""  # the answer's text so far while it is the start of ``prefill``

    @property
    def holding(self) -> bool:
        """Whether some of the answer's text is held (it may be the prefill written again)."""
        return bool(self._held)

    def text(self, text: str) -> str:
        """The part of the answer's next ``text`` to send now."""
        held, prefill = self._held + text, self.prefill
        if len(held) < len(prefill) and prefill.startswith(held):
            self._held = held
            return ""
        self.prefill = self._held = ""
        return continuation(held, prefill)

    def release(self) -> str:
        """The text held as a possible prefill, to send as it is: something else came after it."""
        held, self.prefill, self._held = self._held, "", ""
        return held


def _blocks(message: Mapping[str, Any], cut: bool) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    thinking = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(thinking, str) and thinking:
        blocks.append({"type": "thinking", "thinking": thinking, "signature": signature(thinking)})
    text = message.get("content")
    if isinstance(text, str) and text:
        blocks.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        arguments = function.get("arguments")
        given = call_input(arguments)
        if given is None and cut and isinstance(arguments, str):
            given = _whole_members(arguments)
        name = str(function.get("name") or "")
        blocks.append({"type": "tool_use", "id": new_id("toolu"), "name": name, "input": given or {}})
    return blocks


_CUTS_TRIED = 32  # (from the end back: a member is whole at one of the last few cuts)


def _whole_members(arguments: str) -> dict[str, Any]:
    """The members of a call's arguments cut off by the token limit that came whole (their values
    closed: a list cut inside is left out, not shown shorter than it was), as an object; {} where none
    did. Anthropic answers such a call as a ``tool_use`` block beside ``stop_reason:
    "max_tokens"`` (its docs: retry with a higher ``max_tokens`` "if the last content block is an
    incomplete tool_use"); streamed, its ``input_json_delta`` carries the text as far as it came. The
    non-streamed answer left the block out, so the two modes differed (found by black-box testing)."""
    depth = 0  # of the objects and lists open (1: inside the arguments' own object)
    cuts: list[int] = []  # where the object may end: before a comma between its members, after a value
    quoted = escaped = False
    for at, char in enumerate(arguments):
        if quoted:
            escaped, quoted = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            quoted = True
        elif char in "{[":
            depth += 1
        elif char in "}]" and depth:
            depth -= 1
            if depth == 1:  # (a member's object or list closed)
                cuts.append(at + 1)
        elif char == "," and depth == 1:
            cuts.append(at)
    for cut in reversed(cuts[-_CUTS_TRIED:]):
        try:
            value = json.loads(arguments[:cut] + "}")
        except ValueError:
            continue
        return value if isinstance(value, dict) else {}
    return {}


def message_from_chat(
    chat: Mapping[str, Any], model: str | None, stops: tuple[str, ...] = (), prefill: str = ""
) -> dict[str, Any]:
    """The ``Message`` for a whole chat completion (its first choice); ``prefill``: the request's final
    assistant text, which the answer continues (``continuation``)."""
    choices = chat.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else {}
    message = choice.get("message") if isinstance(choice.get("message"), Mapping) else {}
    assert isinstance(message, Mapping)
    finish = choice.get("finish_reason")
    text = message.get("content")
    if prefill and isinstance(text, str):
        message = {**message, "content": continuation(text, prefill)}
    content = _blocks(message, cut=finish == "length")
    called = any(block["type"] == "tool_use" for block in content)
    reason, sequence = stop_reason(finish, choice.get("stop_reason"), stops, called)
    name = model or (chat.get("model") if isinstance(chat.get("model"), str) else None) or ""
    return message_object(new_id("msg"), name, content, reason, sequence, message_usage(chat.get("usage")))
