"""A chat answer's token logprobs as a Response's: asked with ``include: ["message.output_text.logprobs"]``
and ``top_logprobs``, given on the ``output_text`` part and on its ``response.output_text.delta`` and
``.done`` events; not asked, a Response carries none, whatever the upstream sent.

The two APIs carry the same entry (``token``, ``logprob``, ``bytes``, ``top_logprobs`` of ``token``,
``logprob``, ``bytes``); a chat server may leave ``bytes`` null (the chat schema allows it), and a
Response's entry is then given the token's UTF-8 bytes, which is what they are. Entries a server sends
malformed (no string token, no number) are left out rather than passed on to fail a strict client.

Only the text's tokens belong to the text: a chat choice's ``logprobs.content`` may also hold the
tokens of its reasoning (the bundled backend's do: they are one generation) and of its tool calls. In a
stream each chunk's entries go with that chunk's text (entries on a chunk without any text, the tokens
of a character cut in two, go with the next text); in a whole answer they are the run of entries whose
tokens spell the text, found after the reasoning's length. A refusal's tokens are chat's
``logprobs.refusal``.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import accumulate
from typing import Any

from .request import top_logprobs

__all__ = ["chat_logprobs", "response_logprobs", "text_logprobs"]


def response_logprobs(choice_logprobs: Any, key: str = "content") -> list[dict[str, Any]]:
    """The Response entries of a chat choice's ``logprobs[key]`` (``content`` or ``refusal``)."""
    if type(choice_logprobs) is not dict:
        return []
    entries = choice_logprobs.get(key)
    if type(entries) is not list:
        return []
    out = []
    for entry in entries:
        token = _token(entry)
        if token is not None:
            tops = entry.get("top_logprobs")
            token["top_logprobs"] = (
                [t for t in map(_token, tops) if t is not None] if type(tops) is list else []
            )
            out.append(token)
    return out


def text_logprobs(
    choice_logprobs: Any, text: str, *, refusal: bool, after: int, alone: bool
) -> list[dict[str, Any]]:
    """The entries of a whole answer's ``text`` (its refusal's, with ``refusal``): all of them when the
    text is the answer's only output (``alone``), else the run spelling it at or after character
    ``after`` of the tokens joined; none found, none given."""
    entries = response_logprobs(choice_logprobs, "refusal" if refusal else "content")
    if alone or not entries or not text:
        return entries
    ends = [0, *accumulate(len(e["token"]) for e in entries)]
    joined = "".join(e["token"] for e in entries)
    starts = {end: index for index, end in enumerate(ends)}
    at = joined.find(text, after)
    while at >= 0:
        first, last = starts.get(at), starts.get(at + len(text))
        if first is not None and last is not None:
            return entries[first:last]
        at = joined.find(text, at + 1)
    return []


def _token(entry: Any) -> dict[str, Any] | None:
    if type(entry) is not dict:
        return None
    token, logprob, given = entry.get("token"), entry.get("logprob"), entry.get("bytes")
    if type(token) is not str or not (type(logprob) is float or type(logprob) is int):
        return None
    raw = given if type(given) is list and all(type(b) is int for b in given) else list(token.encode())
    return {"token": token, "logprob": float(logprob), "bytes": raw}


def chat_logprobs(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat parameters that ask for what a Responses request's ``include`` and ``top_logprobs``
    ask: ``logprobs`` and ``top_logprobs`` when ``include`` names the text's logprobs, else nothing."""
    top = top_logprobs(body)
    return {} if top is None else {"logprobs": True, "top_logprobs": top}
