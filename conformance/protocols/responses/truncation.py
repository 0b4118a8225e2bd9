"""``truncation: "auto"``: a conversation past the model's context loses its oldest turns, not the answer.

Open Responses: ``auto`` "Let the service decide how to truncate", ``disabled`` (the default) "Context
over the model's context limit will result in a 400 error"; OpenAI's service drops input items from the
beginning of the conversation. The value was echoed and not applied: the Response said ``auto`` and the
client got the 400.

Where the translated chat request is refused as a context overflow (``context_length_exceeded``: the
proxy's own count against the context, or the upstream's refusal), it is shortened and sent again: its
leading system and developer messages stay (``instructions``), and so does the last user message; the
exchanges between go, oldest first, each a user message with all that answered it, so that what is left
alternates as templates require and no call is left without its output nor an output without its call.
Then, where that is not enough, the oldest rounds of the turn being answered go (an assistant message
with its calls' outputs: an agent's one task is one turn of many rounds), all but the newest. How much
goes: the overflow's own counts where it gives them (N prompt tokens of a context of M, K asked for the
completion), the share N - (M - K) of N of the conversation's characters, and a tenth more (tokens are
not spread evenly over characters); without counts, half of what may go. At most :data:`MAX_SHORTENINGS`
times; with nothing left that may go, or a completion that alone does not fit, the overflow is the
answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conformance import jsoncodec
from conformance.context_overflow import overflow_counts

__all__ = ["MAX_SHORTENINGS", "shortened_messages"]

MAX_SHORTENINGS = 3
"""Tries with a shorter conversation after the first overflow; each asks the upstream (or counts) again."""

_MARGIN = 1.1
_KEPT_ROLES = frozenset({"system", "developer"})


def _exchanges(messages: Sequence[Any]) -> list[list[Any]]:
    """``messages`` in the units that may go: a user message and all that follows it up to the next
    (the answer, its calls and their outputs), so that what is left still begins with a user message
    after the instructions (Gemma's template, among others, refuses roles that do not alternate) and no
    call is left without its output nor an output without its call."""
    exchanges: list[list[Any]] = []
    for message in messages:
        if _role(message) == "user" or not exchanges:
            exchanges.append([message])
        else:
            exchanges[-1].append(message)
    return exchanges


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
    return whole * min(1.0, max(0.0, (counts.prompt - room) / counts.prompt) * _MARGIN)


def shortened_messages(messages: Sequence[Any], overflow: str) -> list[Any] | None:
    """``messages`` (a chat request's) without their oldest exchanges, then the oldest rounds of the turn
    being answered, as the ``overflow`` message's counts say (see the module's docstring), at least one;
    None where nothing may go or it would not help."""
    head = 0
    while head < len(messages) and _role(messages[head]) in _KEPT_ROLES:
        head += 1
    last_user = max((i for i, m in enumerate(messages) if _role(m) == "user"), default=-1)
    if last_user < head:
        return None
    exchanges = _exchanges(messages[head:last_user])
    rounds = _rounds(messages[last_user + 1 :])
    units = [*exchanges, *rounds[:-1]]
    sizes = [_chars(unit) for unit in units]
    target = _target(overflow, _chars(messages), sum(sizes))
    if not units or target is None:
        return None
    gone = _how_many(sizes, target)
    before = [m for exchange in exchanges[gone:] for m in exchange]
    after = [m for answer in rounds[max(0, gone - len(exchanges)) :] for m in answer]
    return [*messages[:head], *before, messages[last_user], *after]


def _how_many(sizes: Sequence[int], target: float) -> int:
    """How many of the oldest units go: at least one, and as many as make up ``target`` characters."""
    gone, dropped = 0, 0
    while gone < len(sizes) and (gone == 0 or dropped < target):
        dropped += sizes[gone]
        gone += 1
    return gone


def _rounds(answer: Sequence[Any]) -> list[list[Any]]:
    """The answer so far to the last user message in the units that may go: an assistant message with
    what follows it up to the next (its calls' outputs). An agent works one task as one long turn of
    calls and outputs (Codex CLI: a user message, then tens of rounds), which otherwise could not be cut
    at all; the newest round stays, so that the model sees what its last call gave."""
    rounds: list[list[Any]] = []
    for message in answer:
        if _role(message) == "assistant" or not rounds:
            rounds.append([message])
        else:
            rounds[-1].append(message)
    return rounds


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None
