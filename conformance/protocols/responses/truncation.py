"""``truncation: "auto"``: a conversation past the model's context loses its oldest turns, not the answer.

Open Responses: ``auto`` "Let the service decide how to truncate", ``disabled`` (the default) "Context
over the model's context limit will result in a 400 error"; OpenAI's service drops input items from the
beginning of the conversation. The value was echoed and not applied: the Response said ``auto`` and the
client got the 400.

Where the translated chat request is refused as a context overflow (``context_length_exceeded``: the
proxy's own count against the context, or the upstream's refusal), it is shortened and sent again: its
leading system and developer messages stay (``instructions``), and so does the last user message. What
goes, oldest first, are rounds and exchanges: a round is an assistant message with what follows it up to
the next (its calls' outputs), an exchange a user message with all that answered it. An exchange's rounds
go first, all but its last, then the exchange; then the rounds of the turn being answered, all but the
newest. So what is left alternates as templates require (Gemma's refuses roles that do not), no call is
left without its output nor an output without its call, and an agent's task (one user message, then tens
of rounds: Codex CLI) keeps its message and its newest rounds, where whole exchanges alone would have
left the task out or the overflow standing.

How much goes: the overflow's own counts where it gives them (N prompt tokens of a context of M, K asked
for the completion): what is kept is the share (M - K) / N of the conversation's characters, less a
twentieth (tokens are not spread evenly over characters); without counts, half of what may go. At most
:data:`MAX_SHORTENINGS` times; with nothing left that may go, or a completion that alone does not fit, the
overflow is the answer. (A tenth more than the overflow's share was dropped before: 40 rounds of 337
tokens each, against a room of 2,032 tokens, kept 2 where 5 fit.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conformance import jsoncodec
from conformance.context_overflow import overflow_counts

__all__ = ["MAX_SHORTENINGS", "shortened_messages"]

MAX_SHORTENINGS = 3
"""Tries with a shorter conversation after the first overflow; each asks the upstream (or counts) again."""

_KEEP = 0.95
"""Of the share of the characters the room holds, what is kept."""
_KEPT_ROLES = frozenset({"system", "developer"})


def _runs(indices: Sequence[int], messages: Sequence[Any], role: str) -> list[list[int]]:
    """``indices`` of ``messages`` in runs, each beginning at a message of ``role`` (the first run at any
    message): exchanges (``user``) or rounds (``assistant``)."""
    runs: list[list[int]] = []
    for i in indices:
        if _role(messages[i]) == role or not runs:
            runs.append([i])
        else:
            runs[-1].append(i)
    return runs


def _units(messages: Sequence[Any], head: int, last_user: int) -> list[list[int]]:
    """The indices of ``messages`` that may go, in the units that go together, oldest first (see the
    module's docstring)."""
    units: list[list[int]] = []
    for exchange in _runs(range(head, last_user), messages, "user"):
        rounds = _runs(exchange[1:], messages, "assistant")
        units += rounds[:-1]
        units.append([exchange[0], *(rounds[-1] if rounds else ())])
    return units + _runs(range(last_user + 1, len(messages)), messages, "assistant")[:-1]


_PART_CHARS = 1024
"""What a content part other than text (an image, a file, audio) counts for: its data is not its tokens
(a 200 KB base64 image is a few hundred tokens to a vision model), and counted by its bytes one image in
the turn being answered made every exchange go."""


def _chars(messages: Sequence[Any]) -> int:
    """The text ``messages`` hold, as their tokens are spread: each message's JSON but for its content,
    and of its content the text parts' characters and :data:`_PART_CHARS` for any other part."""
    return sum(_size(m) for m in messages if isinstance(m, dict))


def _size(message: dict[str, Any]) -> int:
    content = message.get("content")
    size = len(jsoncodec.dumps({key: value for key, value in message.items() if key != "content"}))
    if isinstance(content, str):
        return size + len(content)
    for part in content if isinstance(content, list) else ():
        text = part.get("text") if isinstance(part, dict) else None
        size += len(text) if isinstance(text, str) else _PART_CHARS
    return size


def _target(overflow: str, whole: int, droppable: int) -> float | None:
    """The characters to drop (see the module's docstring), of a conversation of ``whole``, of which
    ``droppable`` may go; None where it cannot fit (the completion alone fills the context)."""
    counts = overflow_counts(overflow)
    if counts is None or counts.prompt <= 0:
        return droppable / 2
    room = counts.limit - counts.completion
    if room <= 0:
        return None
    return whole * max(0.0, 1 - min(1.0, room / counts.prompt) * _KEEP)


def shortened_messages(messages: Sequence[Any], overflow: str) -> list[Any] | None:
    """``messages`` (a chat request's) without their oldest rounds and exchanges, as the ``overflow``
    message's counts say (see the module's docstring), at least one unit; None where nothing may go or it
    would not help."""
    head = 0
    while head < len(messages) and _role(messages[head]) in _KEPT_ROLES:
        head += 1
    last_user = max((i for i, m in enumerate(messages) if _role(m) == "user"), default=-1)
    units = _units(messages, head, last_user) if last_user >= head else []
    sizes = [_chars([messages[i] for i in unit]) for unit in units]
    target = _target(overflow, _chars(messages), sum(sizes))
    if not units or target is None:
        return None
    gone = {i for unit in units[: _how_many(sizes, target)] for i in unit}
    return [message for i, message in enumerate(messages) if i not in gone]


def _how_many(sizes: Sequence[int], target: float) -> int:
    """How many of the oldest units go: at least one, and as many as make up ``target`` characters."""
    gone, dropped = 0, 0
    while gone < len(sizes) and (gone == 0 or dropped < target):
        dropped += sizes[gone]
        gone += 1
    return gone


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None
