"""The error of a Responses request the translation refuses: one class for every module of the translation
(translation.py, input_files.py, compaction.py), so that a caller catches one thing."""

from __future__ import annotations

from conformance.api_errors import InvalidRequest
from conformance.openai_errors import error_body

__all__ = ["TranslationError"]


class TranslationError(InvalidRequest):
    """A request this translation refuses: OpenAI's 400 ``invalid_request_error`` with ``param``."""

    __slots__ = ()

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_value") -> None:
        super().__init__(400, error_body(message, 400, param=param, code=code))

    @classmethod
    def missing(cls, param: str) -> TranslationError:
        """OpenAI's 400 for a required parameter the request left out, naming it."""
        return cls(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")
