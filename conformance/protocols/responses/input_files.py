"""An ``input_file`` content part as the chat part that carries it (issue 38, point 3).

The Open Responses compliance suite sends a small PDF as ``file_data`` (a ``data:`` URL); agents attach
source files, logs and JSON the same way. What a chat-completions upstream can take:

- a text file (a ``text/*`` media type, JSON, XML, YAML, or a file name whose extension says text, and
  bytes that decode as UTF-8): its text, as a text part headed by its name, which every model reads;
- any other file given by ``file_data``: OpenAI's chat ``file`` part (``{"type": "file", "file":
  {"filename", "file_data"}}``), passed on for an upstream that reads files; a text-only server refuses
  it with a 400 that names the part (the bundled backend does: backend/requests.py);
- a file by ``file_url`` or ``file_id``: refused with a 400. The proxy fetches no URL a client names (it
  would reach whatever the proxy's network reaches) and has no Files API to resolve an id against.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote

from .refusals import TranslationError

__all__ = ["file_part"]

_TEXT_TYPES = re.compile(
    r"^(text/[\w.+-]+|application/(json|x-ndjson|xml|yaml|x-yaml|toml|javascript|x-sh|x-python|sql)"
    r"|[\w.+-]+/[\w.-]+\+(json|xml))$"
)
_TEXT_SUFFIX_WORDS = (  # file name extensions of text files
    ".txt .md .markdown .rst .csv .tsv .json .jsonl .xml .yaml .yml .toml .ini .cfg .log .py .js .ts "
    ".tsx .jsx .java .c .h .cc .cpp .hpp .rs .go .rb .php .sh .bash .zsh .sql .html .htm .css .scss "
    ".diff .patch .tex .kt .swift .scala .lua .r .m .pl .proto .graphql .dockerfile .env"
)
_TEXT_SUFFIXES = frozenset(_TEXT_SUFFIX_WORDS.split())
_DATA_URL = re.compile(r"^data:(?P<type>[^;,]*)(?P<params>(;[^;,]*)*?)(?P<base64>;base64)?,", re.IGNORECASE)


def _refused(message: str, param: str) -> TranslationError:
    return TranslationError(message, param, "unsupported_value")


def file_part(part: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The chat part of ``input_file`` ``part`` at ``where`` (see the module's docstring)."""
    for key in ("file_url", "file_id"):
        if part.get(key) is not None and part.get("file_data") is None:
            raise _refused(
                f"Invalid '{where}.{key}': this server takes a file only as 'file_data' (it fetches no URL "
                "and keeps no uploaded files).",
                f"{where}.{key}",
            )
    data = part.get("file_data")
    if not isinstance(data, str) or not data:
        raise TranslationError.missing(f"{where}.file_data")
    name = part.get("filename") if isinstance(part.get("filename"), str) else None
    media, raw = _payload(data, f"{where}.file_data")
    text = _text(media, raw, name)
    if text is not None:
        return {"type": "text", "text": f"[file: {name or 'attached file'}]\n{text}"}
    file: dict[str, Any] = {"file_data": data}
    if name:
        file["filename"] = name
    return {"type": "file", "file": file}


def _payload(data: str, param: str) -> tuple[str, bytes]:
    """The media type (lower case, "" where none is given) and the bytes of ``file_data``: a ``data:``
    URL, or base64 alone; a 400 naming ``param`` where the base64 is not (it was answered as a file the
    model cannot read, which misled)."""
    match = _DATA_URL.match(data)
    media = match.group("type").strip().lower() if match else ""
    payload = data[match.end() :] if match else data
    if match is not None and not match.group("base64"):  # a data: URL's text, percent-encoded
        return media, unquote(payload).encode()
    try:
        return media, base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise TranslationError(
            f"Invalid '{param}': expected base64 data (a data: URL with ';base64', or base64 alone).", param
        ) from None


def _text(media: str, raw: bytes, name: str | None) -> str | None:
    """The file's text when it is a text file (by media type or name) whose bytes are UTF-8; else None."""
    by_name = name is not None and PurePosixPath(name.lower()).suffix in _TEXT_SUFFIXES
    if not (_TEXT_TYPES.match(media) or (by_name and media in ("", "application/octet-stream"))):
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
