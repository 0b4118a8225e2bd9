"""The ``compaction`` item (Open Responses 2026-04-24, issue 38): what ``POST /v1/responses/compact``
answers (compact.py) and a client sends back as input to ``/v1/responses``, over HTTP or a WebSocket.

At OpenAI the item's ``encrypted_content`` is the provider's own encrypted state of the conversation,
opaque to the client. A chat-completions model has no such state to hand out: what it can carry on from
is text. So the compaction here is a summary the model wrote of the conversation, and
``encrypted_content`` holds that text, encoded (``conformant.compaction.v1:`` then base64url of its
UTF-8), not encrypted: opaque as the spec asks, and readable by whoever holds it, as the conversation
it summarizes was. The prefix tells this server's items from another provider's, whose content a chat
model could not read: such an item is refused (400, naming it) rather than passed on as noise.

As input, the item becomes one ``user`` message holding the summary, introduced as such: a user turn,
because the translation joins it to the user messages next to it (compaction keeps the user's own
messages, as OpenAI's does), and chat templates that want roles to alternate, or a conversation to
begin with the user, take it as they take any user text; a system message in the middle of a
conversation is what many of them refuse.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from .refusals import TranslationError
from .response import new_item_id

__all__ = ["compaction_item", "compaction_message"]

_PREFIX = "conformant.compaction.v1:"
_INTRODUCTION = (
    "(A summary of the earlier conversation, which the assistant wrote when it was compacted; the "
    "messages it replaces are no longer shown.)"
)
_NO_SUMMARY = "(The model wrote no summary of it.)"


def compaction_item(summary: str) -> dict[str, Any]:
    """The compaction item holding ``summary`` (the spec's ``CompactionBody``)."""
    encoded = base64.urlsafe_b64encode(summary.encode("utf-8", "replace")).decode("ascii")
    return {"id": new_item_id("cmp"), "type": "compaction", "encrypted_content": _PREFIX + encoded}


def compaction_message(item: Mapping[str, Any], param: str) -> dict[str, Any]:
    """A ``compaction`` input item as the chat message that carries its summary; a 400 naming
    ``param.encrypted_content`` for content this server did not write."""
    content = item.get("encrypted_content")
    summary = _summary(content) if isinstance(content, str) else None
    if summary is None:
        raise TranslationError(
            f"Invalid '{param}.encrypted_content': this server reads only the compaction items its own "
            "POST /v1/responses/compact wrote; send the conversation itself instead.",
            f"{param}.encrypted_content",
            "invalid_encrypted_content",
        )
    return {"role": "user", "content": f"{_INTRODUCTION}\n\n{summary or _NO_SUMMARY}"}


def _summary(content: str) -> str | None:
    if not content.startswith(_PREFIX):
        return None
    try:
        # validate: urlsafe_b64decode drops characters outside the alphabet, and "!!!***" read as the
        # empty summary where it is content this server never wrote (found by black-box testing).
        encoded = content[len(_PREFIX) :].encode("ascii")
        return base64.b64decode(encoded, altchars=b"-_", validate=True).decode("utf-8")
    except (ValueError, binascii.Error):  # not base64 (UnicodeEncodeError is a ValueError), not UTF-8
        return None
