"""Per-response state the rules share: what the request asked for, what the stream showed so far, findings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance.findings import ERROR, WARNING, Finding, FindingSink, Severity
from conformance.transcript import Endpoint

__all__ = [
    "ChoiceState",
    "Context",
    "Expectations",
    "FindingSink",
    "LegacyLogprobsExtent",
    "ToolCallState",
    "choice_text",
]


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class Expectations:
    """What the request body (when known) says the response must contain."""

    known: bool = False
    """False when the request is unknown (a bare transcript): request-driven rules stay quiet."""
    include_usage: bool = False
    n: int | None = None
    """``n`` when the request set it explicitly."""
    prompts: int = 1
    """Prompts in a ``/v1/completions`` prompt array (each gets ``n`` choices, Q73)."""
    logprobs: bool = False
    top_logprobs: int | None = None
    echo: bool = False
    prompt_texts: tuple[str, ...] = ()
    """The prompt, or each prompt of an array, when given as text (empty for token-id prompts)."""
    suffix: bool = False
    stop: tuple[str, ...] = ()
    """The request's stop sequences."""
    max_tokens: int | None = None
    """The token limit: ``max_tokens`` or ``max_completion_tokens``, the larger when both are set."""
    best_of: int | None = None
    tools: bool = False

    @property
    def choices(self) -> int | None:
        """How many choices the response must carry (None when the request is unknown)."""
        return (self.n or 1) * self.prompts if self.known else None

    @property
    def completion_limit(self) -> int | None:
        """The most completion tokens usage may count: the limit per generated sequence times the
        sequences generated, ``n`` (or ``best_of``, all of which are generated and billed) per prompt."""
        if not self.known or self.max_tokens is None or self.max_tokens < 0:
            return None
        return self.max_tokens * max(self.n or 1, self.best_of or 1) * self.prompts

    def prompt_for(self, index: int) -> str | None:
        """The text prompt choice ``index`` answers (choices run prompt by prompt, ``n`` each), if known."""
        position = index // (self.n if self.n and self.n > 0 else 1)
        return self.prompt_texts[position] if 0 <= position < len(self.prompt_texts) else None

    def asked(self) -> str:
        """The request's ask, for messages: ``n=2``, or ``n=2 for each of 3 prompts``."""
        n = f"n={self.n or 1}"
        return n if self.prompts == 1 else f"{n} for each of {self.prompts} prompts"

    @classmethod
    def from_request(cls, request: Mapping[str, Any] | None) -> Expectations:
        if not request:
            return cls()
        body = request.get("body")
        if not isinstance(body, Mapping):
            return cls()
        options = body.get("stream_options")
        include_usage = isinstance(options, Mapping) and options.get("include_usage") is True
        logprobs = body.get("logprobs")
        wants_logprobs = logprobs is True or (_int_or_none(logprobs) is not None)
        top = _int_or_none(body.get("top_logprobs"))
        if _int_or_none(logprobs) is not None:
            top = _int_or_none(logprobs)
        limits = [_int_or_none(body.get(k)) for k in ("max_tokens", "max_completion_tokens")]
        max_tokens = max((v for v in limits if v is not None), default=None)
        prompt = body.get("prompt")
        prompts = prompt if isinstance(prompt, list) else []
        many = bool(prompts) and all(isinstance(p, str | list) for p in prompts)
        texts = [prompt] if isinstance(prompt, str) else prompts if many else []
        return cls(
            known=True,
            include_usage=include_usage,
            n=_int_or_none(body.get("n")),
            prompts=len(prompts) if many else 1,
            logprobs=wants_logprobs,
            top_logprobs=top,
            echo=body.get("echo") is True,
            prompt_texts=tuple(texts) if all(isinstance(t, str) for t in texts) else (),
            suffix=bool(body.get("suffix")),
            stop=_stop_sequences(body.get("stop")),
            max_tokens=max_tokens,
            best_of=_int_or_none(body.get("best_of")),
            tools=bool(body.get("tools")),
        )


def _stop_sequences(stop: Any) -> tuple[str, ...]:
    sequences = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    return tuple(s for s in sequences if isinstance(s, str) and s)


@dataclass(slots=True)
class ToolCallState:
    first_event: int
    has_id: bool = False
    has_name: bool = False
    has_type: bool = False


@dataclass(slots=True)
class ChoiceState:
    first_event: int
    index: int = 0
    role_seen: bool = False
    finished_event: int | None = None
    finish_reason: str | None = None
    content_chunks: int = 0
    tool_calls: dict[int, ToolCallState] = field(default_factory=dict)
    content_null_event: int | None = None
    """The first delta's event when its content was null and no tool call came with it (Q60)."""
    text_tail: str = ""
    """The end of the text so far that could begin a stop sequence (Q76)."""
    stop_seen: bool = False
    call_ids: set[str] = field(default_factory=set)
    """The tool-call ids the choice used (Q65): a client continuing it matches results by them."""
    echo_matched: int = 0
    """Characters of the prompt the echoed text has matched so far; -1 once judged (Q72)."""
    text_bytes: int = 0
    """UTF-8 length of a completion choice's text so far: the most any offset or token can cover."""
    legacy: LegacyLogprobsExtent | None = None
    """How far the choice's legacy logprobs reach, once it carried some."""


@dataclass(slots=True)
class LegacyLogprobsExtent:
    """What a choice's legacy logprobs cover, summed over a stream's chunks (only the extremes are kept)."""

    event: int | None
    pointer: str
    """Where the last logprobs were: findings about the whole choice point there."""
    offset_low: int | None = None
    offset_high: int | None = None
    token_length: int = 0
    """The least text the tokens can stand for, in characters (at most one UTF-8 byte each)."""
    longest_token: int = 0


_UNSET: Any = object()


def choice_text(choice: Mapping[str, Any]) -> Any:
    """The text a choice carries: a chat delta's or message's ``content``, or a completion's ``text``."""
    for key in ("delta", "message"):
        if key in choice:
            part = choice[key]
            return part.get("content") if isinstance(part, Mapping) else None
    return choice.get("text")


class Context:
    """Everything one judgement shares: endpoint, expectations, stream state and the finding sink."""

    def __init__(
        self,
        endpoint: Endpoint | None,
        stream: bool,
        expect: Expectations,
        status: int | None,
        headers: Mapping[str, str],
    ) -> None:
        self.endpoint = endpoint
        self.stream = stream
        self.expect = expect
        self.status = status
        self.headers = headers
        self.sink = FindingSink()
        # Stream state, filled in by the rules as events go by.
        self.id: Any = _UNSET
        self.model: Any = _UNSET
        self.created: Any = _UNSET
        self.chunks = 0
        self.first_chunk_event: int | None = None
        self.choices: dict[int, ChoiceState] = {}
        self.usage_event: int | None = None
        self.usage_seen_event: int | None = None
        """First event with any non-null usage (usage_event is the proper choices: [] usage chunk)."""
        self.done_event: int | None = None
        self.in_band_errors = 0
        self.unknown_seen: set[str] = set()
        self.sticky_id = False
        self.last_event: int | None = None

    @staticmethod
    def unset(value: Any) -> bool:
        return value is _UNSET

    def report(
        self,
        severity: Severity,
        rule: str,
        message: str,
        *,
        event: int | None = None,
        pointer: str | None = None,
        quirk: str | None = None,
    ) -> None:
        self.sink.add(Finding(rule, severity, message, event, pointer, quirk))

    def error(
        self,
        rule: str,
        message: str,
        *,
        event: int | None = None,
        pointer: str | None = None,
        quirk: str | None = None,
    ) -> None:
        self.report(ERROR, rule, message, event=event, pointer=pointer, quirk=quirk)

    def warn(
        self,
        rule: str,
        message: str,
        *,
        event: int | None = None,
        pointer: str | None = None,
        quirk: str | None = None,
    ) -> None:
        self.report(WARNING, rule, message, event=event, pointer=pointer, quirk=quirk)
