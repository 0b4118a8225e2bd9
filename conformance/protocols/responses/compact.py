"""``POST /v1/responses/compact`` (Open Responses 2026-04-24, issue 38): a conversation made short enough
to go on with, answered as the spec's ``CompactResource`` (``object: "response.compaction"``, ``output``,
``usage``).

What compaction means over a chat-completions model: the model writes a summary of the conversation
(the request's ``input``, after what ``previous_response_id`` names), asked in one more user message
at its end, and the compacted window is the conversation's user messages as they were (as OpenAI's
compaction keeps them) then one ``compaction`` item holding the summary (compaction.py: readable text,
not encrypted). The client starts its next chain with that window as ``input`` (on a WebSocket too,
without ``previous_response_id``), where the translation gives the model the summary in place of the
assistant turns, tool calls and outputs it replaced.

The request is the Responses front-end's own (serving.py): the same reading, checks and store, so that
``previous_response_id``, ``instructions``, ``--max-body`` and the item limit are what they are on
``/v1/responses``; the core answers it whole (never streamed) through the same generating route, and
this front-end writes the answer. ``model`` is required, as the spec has it (``/v1/responses`` lets a
one-model server's client leave it out); ``prompt_cache_key`` is checked and has nothing to do: a
local server's prompt cache follows the prompt's prefix. Other fields of a create request that clients
send along (Codex CLI sends ``tools``, ``reasoning``, ``text``) are read as that request reads them,
except that no tool is offered: the summary is text.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from conformance import jsoncodec
from conformance.api_errors import InvalidRequest
from conformance.request_validation import parse_json_object

from ..front_end import FrontEnd, Output, Translation, is_large, off_the_loop
from .compaction import compaction_item
from .protocol import RESPONSES
from .response import new_item_id, new_response_id, response_usage
from .serving import ResponsesFrontEnd, ResponsesTranslation
from .translation import responses_error

__all__ = ["COMPACT_PATH", "CompactFrontEnd"]

COMPACT_PATH = "/v1/responses/compact"
PROMPT_CACHE_KEY_LENGTH = 64
"""The spec's bound on ``prompt_cache_key``."""
SUMMARY_REQUEST = (
    "Write a summary of this conversation so far, for continuing it later without the messages above: "
    "the goal and the user's requests, what was done and found (files, commands, results, decisions, "
    "errors), what is still to do, and every fact needed to go on. Write only the summary."
)
"""The user message that asks for the summary, at the conversation's end."""
_LEFT_OUT = frozenset(
    {
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "include",
        "top_logprobs",
        "prompt_cache_key",
        "stream",
        "stream_options",
        "store",
        "background",
    }
)
"""Fields of a create request that the summary's request does not take: it is plain text, answered
whole, kept nowhere."""
_UNSERVED = {"stream": "a compaction is answered whole", "background": "none runs in the background"}
"""What a compaction request may not ask (true), and why."""


class CompactFrontEnd(FrontEnd):
    """``POST /v1/responses/compact`` over the core, read by ``responses`` (the ``/v1/responses``
    front-end, whose store it continues from and whose errors' words it uses)."""

    def __init__(self, responses: ResponsesFrontEnd) -> None:
        super().__init__(RESPONSES)
        self.name = "responses_compact"
        self.paths = (COMPACT_PATH,)
        self.native_path = None  # an upstream's own /v1/responses has no compaction to ask
        self._responses = responses

    async def translate(self, raw: bytes, *, keep_refusal: bool = False) -> Translation:
        asked = await off_the_loop(lambda: parse_json_object(raw), heavy=is_large(raw))
        _check(asked)
        request = {key: value for key, value in asked.items() if key not in _LEFT_OUT}
        request["input"] = [*_input(asked.get("input")), _summary_request()]
        request.update(stream=False, store=False)
        encoded = await off_the_loop(lambda: jsoncodec.dumps(request), heavy=is_large(raw))
        translation = await self._responses.translate(encoded)
        assert isinstance(translation, ResponsesTranslation)
        assert translation.body is not None  # (a refusal is kept only where asked to)
        return CompactTranslation(translation.body, translation.items[:-1])

    def error(self, body: dict[str, Any], status: int) -> dict[str, Any]:
        return responses_error(body)


class CompactTranslation(Translation):
    """A compaction as the core serves it: the summary's chat request, and the conversation's items."""

    def __init__(self, chat: dict[str, Any], items: list[Any]) -> None:
        super().__init__(chat)
        self._items = items

    def output(self, model: str | None, sampling: Mapping[str, float] | None = None) -> Output:
        return CompactOutput(self._items)


class CompactOutput(Output):
    """The compacted window made of the model's summary (``body``); never a stream."""

    def __init__(self, items: list[Any]) -> None:
        self._items = items

    async def body(self, body: dict[str, Any]) -> dict[str, Any]:
        kept = [_user_message(item) for item in self._items if _is_user_message(item)]
        return {
            "id": new_response_id(),
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": [*kept, compaction_item(_summary(body))],
            "usage": response_usage(body.get("usage") if isinstance(body.get("usage"), Mapping) else {}),
        }


def _check(asked: Mapping[str, Any]) -> None:
    """The spec's refusals of a compaction request: ``model`` missing or empty (a 400, as the spec
    requires it), no conversation to compact, a ``prompt_cache_key`` past its bound, and what it cannot
    do: a stream, a background run."""
    for name, why in _UNSERVED.items():
        if asked.get(name) is True:  # (answered whole, it went unnoticed: the black-box test's finding)
            raise InvalidRequest.make(f"Invalid '{name}': {why}.", 400, param=name, code="unsupported_value")
    _check_model(asked.get("model"))
    given = asked.get("input")
    if given is not None and not isinstance(given, str | list):
        raise InvalidRequest.make(
            "Invalid type for 'input': expected a string or an array of input items.",
            400,
            param="input",
            code="invalid_type",
        )
    if not given and asked.get("previous_response_id") is None:
        raise InvalidRequest.make(
            "Missing required parameter: 'input' (or 'previous_response_id'): there is nothing to compact.",
            400,
            param="input",
            code="missing_required_parameter",
        )
    key = asked.get("prompt_cache_key")
    if key is not None and (not isinstance(key, str) or len(key) > PROMPT_CACHE_KEY_LENGTH):
        raise InvalidRequest.make(
            f"Invalid 'prompt_cache_key': expected a string of at most {PROMPT_CACHE_KEY_LENGTH} characters.",
            400,
            param="prompt_cache_key",
            code="invalid_value",
        )


def _check_model(model: Any) -> None:
    if model is None or model == "":
        raise InvalidRequest.make(
            "Missing required parameter: 'model'.", 400, param="model", code="missing_required_parameter"
        )
    if not isinstance(model, str):
        raise InvalidRequest.make(
            "Invalid type for 'model': expected a string.", 400, param="model", code="invalid_type"
        )


def _input(given: Any) -> list[Any]:
    """The request's ``input`` (checked) as items: a string is one user message."""
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


def _summary_request() -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": SUMMARY_REQUEST}


def _is_user_message(item: Any) -> bool:
    if not isinstance(item, Mapping):
        return False
    return item.get("type", "message") == "message" and item.get("role") == "user"


def _user_message(item: Mapping[str, Any]) -> dict[str, Any]:
    """A user message as the window's item (the spec's ``ItemField`` message): its id (a new one where
    the client gave none), its content as parts."""
    content = item.get("content")
    parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
    given = item.get("id")
    item_id = given if isinstance(given, str) and given else new_item_id("msg")
    return {"id": item_id, "type": "message", "status": "completed", "role": "user", "content": parts}


def _summary(body: Mapping[str, Any]) -> str:
    """The text of the chat answer: the summary (its reasoning, if any, is no part of it)."""
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else {}
    message = choice.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    return content.strip() if isinstance(content, str) else ""
