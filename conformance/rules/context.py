"""Per-response state the rules share: what the request asked for, what the stream showed so far, findings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance.findings import ERROR, WARNING, Finding, FindingSink, Severity
from conformance.request import Request, integer
from conformance.rules.token_scan import TokenScan
from conformance.sse import SSEBlock

__all__ = [
    "OPENAI_PROFILE",
    "OPEN_RESPONSES_PROFILE",
    "PROFILES",
    "ChoiceState",
    "Context",
    "FindingSink",
    "LegacyLogprobsExtent",
    "ProtocolRules",
    "Request",
    "ToolCallState",
    "choice_text",
    "clipped",
    "usage_count",
]


OPENAI_PROFILE = "openai"
OPEN_RESPONSES_PROFILE = "open-responses"
PROFILES = (OPENAI_PROFILE, OPEN_RESPONSES_PROFILE)
"""The specifications a protocol that two define is judged by (``--profile``): OpenAI's own, or Open
Responses' stricter ``/v1/responses`` (conformance/protocols/responses/open_responses.py)."""


def clipped(value: str, limit: int) -> str:
    """``value`` quoted as a finding quotes it: whole up to ``limit`` characters, else its start and
    "...", so that a reader sees it was cut (an id or a path cut silently reads as the server's value)."""
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}..."


def usage_count(usage: Any, key: str) -> int | None:
    """A token count of a usage object (``completion_tokens``), when it is one: the one reader of counts."""
    return integer(usage.get(key)) if isinstance(usage, Mapping) else None


@dataclass(slots=True)
class ToolCallState:
    first_event: int
    has_id: bool = False
    has_name: bool = False
    has_type: bool = False
    name: str | None = None
    """The function name the call's first fragment (or the message) gave."""
    arguments: list[str] = field(default_factory=list)
    """The ``arguments`` fragments in order: joined, one JSON object (rules/tool_use.py)."""
    arguments_not_text: bool = False
    """``arguments`` came as a JSON value, not a string: the schema's finding, not one of JSON text."""


@dataclass(slots=True)
class ChoiceState:
    first_event: int
    index: int = 0
    role_seen: bool = False
    finished_event: int | None = None
    finish_reason: str | None = None
    """The choice's last final finish_reason: what it ended with (Q14 repeats one on every chunk)."""
    output_seen: bool = False
    """The choice carried any output: text, content, reasoning, a refusal or a tool call (ik_llama #767)."""
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
    text_chars: int = 0
    """Characters of text so far, counted only where the request's token limit is 0."""
    text_bytes: int = 0
    """UTF-8 length of a completion choice's text so far: the most any offset or token can cover."""
    legacy: LegacyLogprobsExtent | None = None
    """How far the choice's legacy logprobs reach, once it carried some."""
    logprobs_seen: bool = False
    """A chunk of the choice carried non-null logprobs (Q69: asked for, and null on every chunk)."""
    content: list[str] = field(default_factory=list)
    """The chat content in pieces, kept only where a rule reads it whole (tools, a JSON response format)."""
    tokens: TokenScan = field(default_factory=TokenScan)
    """The content's scan for a chat template's control tokens (rules/template_tokens.py): a bounded
    tail, not the text."""


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


@dataclass(frozen=True)
class ProtocolRules:
    """How the judge reads the answers of a protocol that the core serves by translation (the Responses
    API, the Messages API): its own rules, which run instead of the core's chat and completions ones.
    Each protocol's package makes one (conformance/protocols/); the judge takes it from the registry."""

    route: str
    """The path a server may not have at all: a 404 there is the protocol unsupported, not an error."""
    owns: Callable[[Any], bool]
    """Whether a payload (an event, a body) is one of this protocol's: how a bare transcript is read."""
    names_events: Callable[[str], bool]
    """Whether an ``event:`` line's name is one of this protocol's (its streams name their events)."""
    event: Callable[[Context, int, dict[str, Any], SSEBlock | None], None]
    """Every rule on one event of a stream."""
    body: Callable[[Context, dict[str, Any]], None]
    """Every rule on a whole (non-streamed) answer."""
    end: tuple[Callable[[Context], None], ...]
    """The rules on a whole stream, run at its end."""
    limit_reached: Callable[[Context], None]
    """The ``finish-length`` intent: how this protocol says the token limit was reached."""
    error: Callable[[Context, Any], None] | None = None
    """How an error body is judged where the protocol has its own error shape (Anthropic's); None:
    OpenAI's (rules/errors.py). Its stream's error events go to ``event`` like any other."""


class Context:
    """Everything one judgement shares: endpoint, request, stream state and the finding sink."""

    def __init__(
        self,
        endpoint: str | None,
        stream: bool,
        request: Request,
        status: int | None,
        headers: Mapping[str, str],
        intent: str | None = None,
        profile: str = OPENAI_PROFILE,
    ) -> None:
        self.endpoint = endpoint
        self.stream = stream
        self.request = request
        self.intent = intent
        self.profile = profile
        """The specification a protocol is judged by where two define it: ``openai``, or
        ``open-responses`` (its stricter Response: conformance/protocols/responses/open_responses.py)."""
        """What the exchange was meant to show (a probe's ``expect``: ``success``, ``context-overflow``)."""
        self.status = status
        self.headers = headers
        self.sink = FindingSink()
        self.choice_rules: tuple[Any, ...] = ()
        """The choice rules this response is judged by (the judge sets them from the request)."""
        # Stream state, filled in by the rules as events go by.
        self.id: Any = _UNSET
        self.model: Any = _UNSET
        self.created: Any = _UNSET
        self.chunks = 0
        self.first_chunk_event: int | None = None
        self.choices: dict[int, ChoiceState] = {}
        self.usage_event: int | None = None
        self.usage: dict[str, Any] | None = None
        """The last usage object the response carried: what it says it generated."""
        self.data_events = 0
        """Data events other than ``[DONE]``: a 200 stream with none is empty (Q52)."""
        self.usage_seen_event: int | None = None
        """First event with any non-null usage (usage_event is the proper choices: [] usage chunk)."""
        self.usage_last_event: int | None = None
        """Event of the last usage object (:attr:`usage`, whose counts the rules quote); None: a body."""
        self.path: str | None = None
        """The path the request was sent to, as recorded (None when unknown)."""
        self.done_event: int | None = None
        self.in_band_errors = 0
        self.unknown_seen: set[str] = set()
        self.sticky_id = False
        self.last_event: int | None = None
        self.body_bytes = 0
        """Bytes of the response body read."""
        self.error_object: dict[str, Any] | None = None
        """The ``error`` object of an error body."""
        self.reasoning_keys: set[str] = set()
        """The keys reasoning text came under (``reasoning_content``, ``reasoning``; Q39)."""
        self.protocol: ProtocolRules | None = None
        """The rules of a protocol served by translation, when the answer is one of its (the judge sets
        it); None: a chat or completions answer, judged by the core's rules."""
        self.protocol_state: Any = None
        """What that protocol's rules keep of the answer so far (their own type)."""

    @property
    def completion_tokens(self) -> int | None:
        """``completion_tokens`` of the last usage object seen."""
        return usage_count(self.usage, "completion_tokens")

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
