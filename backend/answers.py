"""The answers of chat and completions requests built from engine events: streamed chunks and whole bodies.

Shapes follow OpenAI's recorded streams (see the project's openai-spec notes): the role sent once per
choice, an empty-delta finish chunk per choice, ``usage`` only in a last ``choices: []`` chunk when
``stream_options.include_usage`` asks for it (and ``null`` on the other chunks then), legacy logprobs as
parallel arrays, chat logprobs as ``{content: [...], refusal: null}``.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from backend.engine import Event, TokenLogprob
from backend.reasoning import ChoiceReasoning, ThinkingMarkers
from backend.requests import GenerationRequest
from backend.service import Prompt
from backend.tool_formats import ParsedCall, ToolCallStream
from conformance.protocols.front_end import with_stop_named

__all__ = ["AnswerBuilder", "Choice"]

_FLOOR = -9999.0  # OpenAI's value for "very unlikely"; JSON has no -inf


def _lp(value: float) -> float:
    return value if value > _FLOOR else _FLOOR


@dataclass
class Choice:
    """What has accumulated for one choice (used whole for non-streaming answers)."""

    text: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None
    stop_sequence: str | None = None
    completion_tokens: int = 0
    started: bool = False
    tool_stream: ToolCallStream | None = None
    """Set when the request has tools: splits the text into content and calls."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning: ChoiceReasoning | None = None
    """A thinking model's chat choice: its text split into reasoning and content (backend/reasoning.py)."""


class AnswerBuilder:
    def __init__(
        self,
        req: GenerationRequest,
        prompts: list[Prompt],
        model: str,
        piece: Any,
        thinking: ThinkingMarkers | None = None,
        *,
        names_stop: bool = False,
    ) -> None:
        self.req = req
        self.names_stop = names_stop  # the client's protocol names the stop sequence met (a Message)
        self.prompts = prompts
        self.model = model
        self.piece = piece  # token id -> bytes, for echoed prompt tokens
        chat = req.endpoint == "chat"
        self.id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        self.object = (
            "chat.completion.chunk"
            if chat and req.stream
            else "chat.completion"
            if chat
            else "text_completion"
        )
        self.created = int(time.time())
        self.choices = [Choice() for _ in range(len(prompts) * req.n)]
        if req.tool_format is not None:
            for choice in self.choices:
                choice.tool_stream = ToolCallStream(req.tool_format)
        self.thinking = thinking if chat else None
        if self.thinking is not None:
            for index, choice in enumerate(self.choices):
                choice.reasoning = ChoiceReasoning(self.thinking, self.prompt_of(index).text)

    def prompt_of(self, index: int) -> Prompt:
        return self.prompts[index // self.req.n]

    def usage(self) -> dict[str, Any]:
        prompt = sum(len(p.tokens) for p in self.prompts)
        completion = sum(c.completion_tokens for c in self.choices)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if self.thinking is not None:
            reasoning = sum(c.reasoning.tokens for c in self.choices if c.reasoning is not None)
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        return usage

    def _envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if self.req.stream and self.req.include_usage:
            out["usage"] = None
        return out

    # ---- streaming ---------------------------------------------------------------------------------

    def chunks(self, event: Event) -> list[dict[str, Any]]:
        """The chunks one engine event turns into (possibly none)."""
        choice = self.choices[event.index]
        choice.completion_tokens = max(choice.completion_tokens, event.completion_tokens)
        if self.req.endpoint == "chat":
            return self._chat_chunks(choice, event)
        return self._completion_chunks(choice, event)

    def _completion_chunks(self, choice: Choice, event: Event) -> list[dict[str, Any]]:
        out = []
        if not choice.started:
            choice.started = True
            if self.req.echo:
                prompt = self.prompt_of(event.index)
                lp = (
                    self._echo_logprobs(prompt, event.prompt_logprobs)
                    if event.prompt_logprobs is not None
                    else None
                )
                out.append(self._text_chunk(event.index, prompt.text, lp))
        if event.text or event.logprobs:
            lp = (
                self._legacy_logprobs(event.logprobs, choice, event.index)
                if self.req.logprobs is not None
                else None
            )
            out.append(self._text_chunk(event.index, event.text, lp))
        choice.text += event.text
        if event.finish_reason is not None:
            out.append(self._text_chunk(event.index, "", None, event.finish_reason))
        return out

    def _text_chunk(self, index: int, text: str, logprobs: Any, finish: str | None = None) -> dict[str, Any]:
        return self._envelope([{"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}])

    def _chat_chunks(self, choice: Choice, event: Event) -> list[dict[str, Any]]:
        want = self.req.logprobs is not None
        out = []
        if not choice.started:
            choice.started = True
            role_lp: dict[str, Any] | None = {"content": [], "refusal": None} if want else None
            out.append(
                self._delta(event.index, {"role": "assistant", "content": "", "refusal": None}, role_lp)
            )
        if choice.tool_stream is not None:
            return out + self._tool_chunks(choice, event)
        split = choice.reasoning
        # A thinking choice sees every event, one without text too: its tokens still count (the last
        # token's text may be held back, a partial character, when the limit stops it).
        if event.text or event.logprobs or split is not None:
            lp = {"content": [self._chat_token(t) for t in event.logprobs], "refusal": None} if want else None
            delta = (
                {"content": event.text} if split is None else split.delta(event.text, event.completion_tokens)
            )
            if delta or lp is not None:
                out.append(self._delta(event.index, delta, lp))
        if event.finish_reason is not None:
            if choice.reasoning is not None and (held := choice.reasoning.end()):
                out.append(self._delta(event.index, held, None))
            out.append(self._finished(event.index, event.finish_reason, event.stop_sequence))
        return out

    def _tool_chunks(self, choice: Choice, event: Event) -> list[dict[str, Any]]:
        """A tools request's deltas: content while no call has opened, then the calls as OpenAI streams
        them (``index``; ``id``, ``type`` and ``name`` in the first fragment only; the arguments in
        pieces), and ``finish_reason: "tool_calls"`` when calls were made."""
        assert choice.tool_stream is not None
        out: list[dict[str, Any]] = []
        content, fragments = choice.tool_stream.feed(event.text) if event.text else ("", [])
        if event.finish_reason is not None:
            tail, more = choice.tool_stream.finish()
            content, fragments = content + tail, fragments + more
        if content:
            want = self.req.logprobs is not None
            lp = {"content": [self._chat_token(t) for t in event.logprobs], "refusal": None} if want else None
            out.append(self._delta(event.index, {"content": content}, lp))
        for fragment in fragments:
            if fragment.name is not None:
                entry = self._tool_call(choice, ParsedCall(fragment.name, "", fragment.call_id))
                first = {
                    "index": fragment.index,
                    "id": entry["id"],
                    "type": "function",
                    "function": {"name": fragment.name, "arguments": ""},
                }
                out.append(self._delta(event.index, {"tool_calls": [first]}, None))
            for piece in _pieces(fragment.arguments) if fragment.arguments else []:
                delta = {"tool_calls": [{"index": fragment.index, "function": {"arguments": piece}}]}
                out.append(self._delta(event.index, delta, None))
        if event.finish_reason is not None:
            reason = _finish_reason(choice, event.finish_reason)
            out.append(self._finished(event.index, reason, event.stop_sequence))
        return out

    def _tool_call(self, choice: Choice, call: ParsedCall) -> dict[str, Any]:
        """The OpenAI entry for a call, kept on the choice (its position is its ``index``)."""
        assert self.req.tool_format is not None
        entry = {
            "id": call.id or self.req.tool_format.new_call_id(),
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        choice.tool_calls.append(entry)
        return entry

    def _delta(
        self, index: int, delta: dict[str, Any], logprobs: Any, finish: str | None = None
    ) -> dict[str, Any]:
        return self._envelope(
            [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]
        )

    def _finished(self, index: int, reason: str, stop_sequence: str | None) -> dict[str, Any]:
        """A chat choice's finish chunk, marked with the stop sequence met where the protocol names it,
        and with llama-server's ``__verbose`` where the request asks."""
        chunk = self._delta(index, {}, None, reason)
        with_stop_named(chunk["choices"][0], stop_sequence if self.names_stop else None)
        if self.req.verbose:
            chunk["__verbose"] = _stop_report(reason, stop_sequence)
        return chunk

    def usage_chunk(self) -> dict[str, Any]:
        chunk = self._envelope([])
        chunk["usage"] = self.usage()
        return chunk

    # ---- whole bodies ------------------------------------------------------------------------------

    def add(self, event: Event) -> None:
        choice = self.choices[event.index]
        choice.text += event.text
        choice.logprobs += event.logprobs
        if event.prompt_logprobs is not None:
            choice.prompt_logprobs = event.prompt_logprobs
        if choice.reasoning is not None:
            choice.reasoning.delta(event.text, event.completion_tokens)
        if event.finish_reason is not None:
            choice.finish_reason = event.finish_reason
            choice.stop_sequence = event.stop_sequence
            choice.completion_tokens = event.completion_tokens
            if choice.reasoning is not None:
                choice.reasoning.end()

    def body(self) -> dict[str, Any]:
        chat = self.req.endpoint == "chat"
        choices = [
            self._chat_choice(i, c) if chat else self._text_choice(i, c) for i, c in enumerate(self.choices)
        ]
        out = self._envelope(choices)
        out["usage"] = self.usage()
        if self.req.verbose and self.choices:
            out["__verbose"] = _stop_report(choices[0]["finish_reason"], self.choices[0].stop_sequence)
        return out

    def _chat_choice(self, i: int, c: Choice) -> dict[str, Any]:
        """One chat choice of a whole answer: its calls read out of its text where the request has tools,
        its reasoning apart for a thinking model."""
        lp = (
            {"content": [self._chat_token(t) for t in c.logprobs], "refusal": None}
            if self.req.logprobs is not None
            else None
        )
        message: dict[str, Any] = {"role": "assistant", "content": c.text, "refusal": None}
        if self.req.tool_format is not None:
            parsed = self.req.tool_format.read(c.text, final=True)
            for call in parsed.calls:
                self._tool_call(c, call)
            if c.tool_calls:
                message["content"] = parsed.content or None
                message["tool_calls"] = c.tool_calls
            else:
                message["content"] = parsed.content
        elif c.reasoning is not None:
            message["content"] = "".join(c.reasoning.content)
            if c.reasoning.reasoning:
                message["reasoning_content"] = "".join(c.reasoning.reasoning)
        whole = {
            "index": i,
            "message": message,
            "logprobs": lp,
            "finish_reason": _finish_reason(c, c.finish_reason or "stop"),
        }
        return with_stop_named(whole, c.stop_sequence if self.names_stop else None)

    def _text_choice(self, i: int, c: Choice) -> dict[str, Any]:
        """One completion choice of a whole answer: the prompt before its text with ``echo``."""
        prompt = self.prompt_of(i)
        text, legacy = c.text, None
        if self.req.logprobs is not None:
            legacy = self._legacy_logprobs(c.logprobs, Choice(), i)
        if self.req.echo:
            text = prompt.text + c.text
            if legacy is not None:
                head = self._echo_logprobs(prompt, c.prompt_logprobs or [])
                legacy = {k: head[k] + legacy[k] for k in head}
        return {"text": text, "index": i, "logprobs": legacy, "finish_reason": c.finish_reason or "stop"}

    # ---- logprobs ----------------------------------------------------------------------------------

    def _legacy_logprobs(self, tokens: list[TokenLogprob], choice: Choice, index: int) -> dict[str, Any]:
        base = len(self.prompt_of(index).text) + len(choice.text)
        offsets, pos = [], base
        for t in tokens:
            offsets.append(pos)
            pos += len(t.token)
        return {
            "tokens": [t.token for t in tokens],
            "token_logprobs": [_lp(t.logprob) for t in tokens],
            "top_logprobs": [{alt: _lp(lp) for alt, _, lp in t.top} for t in tokens],
            "text_offset": offsets,
        }

    def _echo_logprobs(self, prompt: Prompt, scored: list[TokenLogprob]) -> dict[str, Any]:
        """The prompt's tokens: the first has no logprob (nothing precedes it), as OpenAI answers."""
        texts = [self.piece(t).decode("utf-8", "replace") for t in prompt.tokens]
        offsets, pos = [], 0
        for text in texts:
            offsets.append(pos)
            pos += len(text)
        return {
            "tokens": texts,
            "token_logprobs": [None] + [_lp(t.logprob) for t in scored],
            "top_logprobs": [None] + [{alt: _lp(lp) for alt, _, lp in t.top} for t in scored],
            "text_offset": offsets,
        }

    @staticmethod
    def _chat_token(t: TokenLogprob) -> dict[str, Any]:
        return {
            "token": t.token,
            "logprob": _lp(t.logprob),
            "bytes": list(t.bytes),
            "top_logprobs": [
                {"token": alt, "logprob": _lp(lp), "bytes": list(raw)} for alt, raw, lp in t.top
            ],
        }


_PIECE = 24


def _pieces(arguments: str) -> list[str]:
    """Arguments in fragments of at most ``_PIECE`` characters, as OpenAI streams them (clients must
    join them; some forget to): a call handed out whole is not sent as one block either."""
    return [arguments[i : i + _PIECE] for i in range(0, len(arguments), _PIECE)]


def _finish_reason(choice: Choice, reason: str) -> str:
    """``tool_calls`` when the answer made calls and ended by itself (a cut-off answer stays ``length``)."""
    return "tool_calls" if choice.tool_calls and reason == "stop" else reason


def _stop_report(reason: str, stop_sequence: str | None) -> dict[str, Any]:
    """llama-server's ``stop_type`` and ``stopping_word`` of a finished choice (``req.verbose``)."""
    if stop_sequence is not None:
        return {"stop_type": "word", "stopping_word": stop_sequence}
    return {"stop_type": "limit" if reason == "length" else "eos", "stopping_word": ""}
