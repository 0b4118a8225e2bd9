"""A chat answer's token logprobs as a Response's: asked with ``include: ["message.output_text.logprobs"]``
and ``top_logprobs``, given on the ``output_text`` part and on its ``response.output_text.delta`` and
``.done`` events.

The two APIs carry the same entry (``token``, ``logprob``, ``bytes``, ``top_logprobs`` of ``token``,
``logprob``, ``bytes``); a chat server may leave ``bytes`` null (the chat schema allows it), and a
Response's entry is then given the token's UTF-8 bytes, which is what they are. Entries a server sends
malformed (no string token, no number) are left out rather than passed on to fail a strict client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.request import INCLUDE_LOGPROBS, integer

__all__ = ["chat_logprobs", "response_logprobs"]


def response_logprobs(choice_logprobs: Any) -> list[dict[str, Any]]:
    """The Response entries of a chat choice's ``logprobs`` (``{"content": [...]}``; none: ``[]``)."""
    if type(choice_logprobs) is not dict:
        return []
    content = choice_logprobs.get("content")
    if type(content) is not list:
        return []
    out = []
    for entry in content:
        token = _token(entry)
        if token is not None:
            tops = entry.get("top_logprobs")
            token["top_logprobs"] = (
                [t for t in map(_token, tops) if t is not None] if type(tops) is list else []
            )
            out.append(token)
    return out


def _token(entry: Any) -> dict[str, Any] | None:
    if not isinstance(entry, Mapping):
        return None
    token, logprob, given = entry.get("token"), entry.get("logprob"), entry.get("bytes")
    if not isinstance(token, str) or not isinstance(logprob, int | float) or isinstance(logprob, bool):
        return None
    if isinstance(given, list) and all(type(b) is int for b in given):
        raw = list(given)
    else:
        raw = list(token.encode())
    return {"token": token, "logprob": float(logprob), "bytes": raw}


def chat_logprobs(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat parameters that ask for what a Responses request's ``include`` and ``top_logprobs``
    ask: ``logprobs`` and ``top_logprobs`` when ``include`` names the text's logprobs, else nothing."""
    include = body.get("include")
    if not isinstance(include, list) or INCLUDE_LOGPROBS not in include:
        return {}
    top = integer(body.get("top_logprobs"))
    return {"logprobs": True, "top_logprobs": top if top is not None else 0}
