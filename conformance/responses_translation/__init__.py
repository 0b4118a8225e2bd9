"""The Responses API (``/v1/responses``) as a translation of chat completions, both ways, pure.

Shared by the proxy (``conformant serve``) and the bundled backend, which both serve chat completions
already: ``translate_request`` turns a Responses request into a chat request, ``response_from_chat`` a
chat completion into a ``Response`` object, and ``ResponseEvents`` a stream of normalized chat chunks
into the Responses stream events. What is translated and what is refused: docs/responses.md.
"""

from .body import new_response_id, response_from_chat, response_object, response_usage
from .events import ResponseEvents
from .request import ChatTranslation, TranslationError, responses_error, translate_request

__all__ = [
    "ChatTranslation",
    "ResponseEvents",
    "TranslationError",
    "new_response_id",
    "response_from_chat",
    "response_object",
    "response_usage",
    "responses_error",
    "translate_request",
]
