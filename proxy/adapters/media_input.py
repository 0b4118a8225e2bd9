"""Images, audio, video and files a llama.cpp server's model cannot read: OpenAI's 400, before sending.

llama-server b11434 throws a ``std::runtime_error`` ("image input is not supported - hint: ... provide the
mmproj") for an ``image_url`` part to a model started without a projector, which it answers as a 500; a
``file`` part is an ``invalid_argument`` ("unsupported content[].type"). A client that sent a valid
request then sees a server fault and retries it (issue 38: the Open Responses suite's image test, relayed
as a 500). Its ``/props`` says what the model reads (``modalities``: ``vision``, ``audio``, ``video``): a
part the model cannot read is refused as OpenAI refuses an image to a text-only model, naming the part;
where ``/props`` does not say (an older build), the request goes as it is, and the server's own refusal
of the part, where it words one (``UNREAD_PART``), is answered as that 400.
"""

from __future__ import annotations

import re
from typing import Any

from conformance.api_errors import APIError

__all__ = ["TEXT_ONLY", "UNREAD_PART", "carries_media", "media_refusal", "modalities"]

_PART_MODALITY = {
    "image_url": "vision",
    "input_audio": "audio",
    "input_video": "video",
    "video_url": "video",
    "file": None,  # no llama.cpp server reads a file part
}


def carries_media(body: dict[str, Any]) -> bool:
    """Whether a chat request has any part other than text (the only ones ``/props`` is read for)."""
    messages = body.get("messages")
    return any(
        isinstance(part, dict) and part.get("type") in _PART_MODALITY
        for message in (messages if isinstance(messages, list) else ())
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for part in message["content"]
    )


def modalities(props: Any) -> dict[str, bool] | None:
    """``/props``' ``modalities`` (what the model reads beyond text), None where it has none."""
    found = props.get("modalities") if isinstance(props, dict) else None
    if not isinstance(found, dict):
        return None
    return {name: value for name, value in found.items() if isinstance(value, bool)}


TEXT_ONLY = {"vision": False, "audio": False, "video": False}
"""The modalities of a model that reads text alone."""
UNREAD_PART = re.compile(r"Unsupported content part type")
"""How a llama.cpp server without a multimodal projector refuses an image part (ik_llama.cpp at
540a26514, tests/data/batteries/ik_llama.cpp-540a265: a 500 ``Failed to parse messages: Unsupported
content part type: "image_url"``)."""


def media_refusal(body: dict[str, Any], reads: dict[str, bool] | None) -> APIError | None:
    """The 400 for the first part of a chat request ``body`` that the model cannot read (``reads``: its
    ``modalities``; None: unknown, no refusal but for a file part)."""
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else ()):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in _PART_MODALITY:
                continue
            modality = _PART_MODALITY[kind]
            if modality is not None and (reads is None or reads.get(modality) is not False):
                continue
            return APIError.make(
                f"Invalid content type. {kind} is only supported by certain models; the upstream's model "
                f"reads no {_WORDS[str(kind)]}.",
                400,
                param=f"messages[{i}].content[{j}]",
                code="unsupported_content",
            )
    return None


_WORDS = {
    "image_url": "images (a llama.cpp server reads them with --mmproj)",
    "input_audio": "audio (a llama.cpp server reads it with --mmproj)",
    "input_video": "video",
    "video_url": "video",
    "file": "files",
}
