"""What differs per upstream family: which endpoint serves a request, its native format, tokenizing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from conformance.api_errors import APIError
from conformance.request import Endpoint, integer
from conformance.request_info import RequestInfo

from ..upstream import Upstream
from ..upstream_traits import UpstreamTraits

__all__ = [
    "LIMIT_KEYS",
    "Adapter",
    "TokenCount",
    "UpstreamCall",
    "fitted_request",
    "messages_with_reasoning_as",
    "requested_limit",
    "with_limit",
    "with_stop_asked",
    "without_streaming",
]

OPENAI_PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}

# The names of the generation limit, by llama.cpp's precedence (n_predict > max_completion_tokens >
# max_tokens); OpenAI reads the last two.
LIMIT_KEYS = ("n_predict", "max_completion_tokens", "max_tokens")


def requested_limit(body: dict[str, Any]) -> int | None:
    """The generation limit the request gives (the first of LIMIT_KEYS set to an integer), if any."""
    for key in LIMIT_KEYS:
        value = integer(body.get(key))
        if value is not None:
            return value
    return None


# A chat answer says nothing of which stop sequence ended it (the Messages API names it: its
# ``stop_sequence``). Asked with ``verbose`` (llama-server reads it per request since its request schema,
# b11434; the bundled backend too, its /props says ``reports_stopping_word``), the last chunk or body
# carries ``__verbose``, the native answer's fields, narrowed by ``response_fields`` to these two (else
# llama-server sends the whole prompt back in it): normalizer/finish.py reads them, and the normalizer
# drops the key as it drops ``timings`` (Q35). Asked only for a protocol that names the sequence
# (RequestInfo.names_stop, proxy/sources/builder.py), of an adapter that ``reports_stopping_word``.
_STOP_ASKED = {"verbose": True, "response_fields": ["stop_type", "stopping_word"]}


def with_stop_asked(body: dict[str, Any]) -> dict[str, Any]:
    """A chat ``body`` with stop sequences (``RequestInfo.names_stop``) asking that the one met be
    named (``_STOP_ASKED``)."""
    return {**body, **_STOP_ASKED}


def with_limit(body: dict[str, Any], default: int | None) -> dict[str, Any]:
    """``body`` with a generation limit every upstream reads.

    ``max_completion_tokens``, OpenAI's newer name, is sent as ``max_tokens`` too: llama-cpp-python,
    Ollama, TGI and ik_llama.cpp read only the older one and would generate to the end of the context
    (ik_llama.cpp, which shifts its context, for ever). A request that gives no limit gets the
    operator's ``default`` (``--default-max-tokens``), when there is one.
    """
    limit = integer(body.get("max_completion_tokens"))
    if body.get("max_tokens") is None and limit is not None:
        return {**body, "max_tokens": limit}
    if default is not None and requested_limit(body) is None:
        return {**body, "max_tokens": default}
    return body


def without_streaming(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` asking for one JSON answer rather than a stream (``stream_options`` goes with the stream:
    some upstreams refuse it without one)."""
    return {k: v for k, v in body.items() if k != "stream_options"} | {"stream": False}


def fitted_request(traits: UpstreamTraits, body: dict[str, Any], info: RequestInfo) -> dict[str, Any]:
    """``body`` as the upstream must be asked for it to answer as the client asked, by its ``traits``."""
    if not info.generates and traits.zero_limit_unbounded:
        # max_tokens 0 (a prompt scored with echo) would generate to the end of the context. One token
        # is asked for, and not sent (info.generates).
        body = body | {name: 1 for name in ("max_tokens", "max_completion_tokens") if body.get(name) == 0}
    body = _with_stop_sent(body)
    if info.stream and body.get("echo") is True and not traits.streams_echo:
        # The prompt (and its logprobs) would be left out of the stream, not out of a JSON answer: an
        # echo (scoring a prompt, mostly) is asked for whole and streamed by the proxy.
        body = without_streaming(body)
    return body


def _with_stop_sent(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with the stop sequences the upstream is to apply: none with tools offered, no empty one."""
    stop = body.get("stop")
    if stop and body.get("tools") and body.get("tool_choice") != "none":
        # A server that reads its calls out of the model's text applies a stop sequence inside them too:
        # llama-server cut `{"city": "` at "Paris", and the answer was a call that cannot run (a 502).
        # A client's stop sequences are for the text: the proxy cuts the text at them itself (Q76), as for
        # upstreams that ignore them, and drops what the upstream writes after.
        return {k: v for k, v in body.items() if k != "stop"}
    if stop == "" or (isinstance(stop, list) and "" in stop):
        # An empty stop sequence is met where the text begins: llama-server cut every answer to nothing
        # at one. The judge reads none (conformance.request), and the bundled backend ignores it.
        kept = [s for s in stop if s != ""] if isinstance(stop, list) else []
        return {k: v for k, v in body.items() if k != "stop"} | ({"stop": kept} if kept else {})
    return body


def messages_with_reasoning_as(body: dict[str, Any], name: str) -> dict[str, Any]:
    """``body`` with each assistant message's reasoning under ``name``, the one the upstream reads
    (``UpstreamTraits.reasoning_field``): clients send back what they got, under either name (Q39;
    the Vercel AI SDK reads both), and an upstream reading the other would drop it from the prompt."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    other = "reasoning" if name == "reasoning_content" else "reasoning_content"
    if not any(isinstance(m, dict) and other in m for m in messages):
        return body  # the usual case: nothing to rename, nothing copied
    renamed = []
    for message in messages:
        if isinstance(message, dict) and other in message and message.get("role") == "assistant":
            message = {k: v for k, v in message.items() if k != other} | {
                name: message[other] if message.get(name) is None else message[name]
            }
        renamed.append(message)
    return {**body, "messages": renamed}


class TokenCount(NamedTuple):
    """A prompt's tokens, and whether they are an estimate: the upstream's template was not had, so
    its markup was estimated (proxy/adapters/template_overhead.py), or it has no tokenizer."""

    tokens: int
    estimated: bool


class Translate(Protocol):
    def __call__(self, payload: Any, /) -> Any: ...


@dataclass(slots=True)
class UpstreamCall:
    """One upstream request: where it goes, its body, and how to read native events (None: OpenAI)."""

    path: str
    body: dict[str, Any]
    translate: Translate | None = None


class Adapter(Protocol):
    name: str
    reports_stopping_word: bool
    """Whether the upstream says which stop sequence ended a chat answer if asked (``with_stop_asked``)."""

    def call(self, endpoint: Endpoint, body: dict[str, Any]) -> UpstreamCall: ...

    async def refusal(self, upstream: Upstream, endpoint: Endpoint, body: dict[str, Any]) -> APIError | None:
        """The error to answer before sending a request the upstream would mishandle, else None."""
        ...

    def instead_of_refused(self, call: UpstreamCall, refused: APIError) -> UpstreamCall | APIError | None:
        """What to do about ``call``, which the upstream refused (``refused``, before any byte of an
        answer): another call that serves it another way, or the error the client gets in the refusal's
        place (the spec's words for what the upstream said in its own); None: the refusal stands."""
        ...

    async def count_tokens(self, upstream: Upstream, text: str, timeout: float) -> int | None:  # noqa: ASYNC109
        """``text``'s tokens by the upstream's tokenizer; None without one, or when it takes longer."""
        ...

    async def prompt_tokens(
        self,
        upstream: Upstream,
        body: dict[str, Any],
        timeout: float,  # noqa: ASYNC109
    ) -> TokenCount | None:
        """The tokens of a request's prompt as the upstream reads it: a chat request's messages and
        tools under its template, a completion's prompt with the start token; None where the upstream's
        tokenizer cannot say in ``timeout`` seconds."""
        ...

    async def native_fits(self, upstream: Upstream, body: dict[str, Any]) -> bool:
        """Whether the upstream's own endpoint of a protocol (``/v1/messages``, ``/v1/responses``)
        serves the request whose chat translation is ``body`` as asked: False where only the translated
        route supplies what it needs, which the request then takes."""
        ...

    async def sampling_defaults(self, upstream: Upstream) -> dict[str, float] | None:
        """The sampling the upstream uses for a field a request leaves out (``temperature``, ``top_p``,
        the penalties: conformance/protocols/sampling.py); None where it does not say."""
        ...
