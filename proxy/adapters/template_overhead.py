"""The tokens a chat template adds to a prompt's texts, learned once per upstream that cannot render its
template for the proxy, so that the usage the proxy counts where the upstream sent none (Q28) counts
the prompt as the upstream does.

llama-server renders its template on ``/apply-template`` (proxy/adapters/llamacpp.py); llama-cpp-python
has no such endpoint (its server's routes at 0.3.36: ``/v1/*``, ``/extras/tokenize``,
``/extras/tokenize/count``, ``/extras/detokenize``; abetlen/llama-cpp-python
``llama_cpp/server/app.py``), nor has ik_llama.cpp before its #768. Counted by their texts alone,
llama-cpp-python's prompts came out at 3 tokens where it counted 13 ("Say hello." on Gemma 3 270M), 11
where it counted 21 with a tool (issue 37).

So five requests of one token each are asked once, without streaming (where llama-cpp-python does
report usage): one "Hi" message, three messages, one message with a tool, and a tool round trip with a
short and with a long result. Their reported ``prompt_tokens`` less their texts' tokens give the markup
once per prompt and per message, what a tool's definition adds per token of its JSON, what a tool
result adds, and how much of the results' texts the template writes (Gemma 3's under llama-cpp-python
writes neither tools nor results: 24 tokens with a tool and without, a round trip 27 whatever its
result). Measured with bench/usage_agreement.py on the ``check`` battery: every chat prompt counted as
llama-cpp-python 0.3.36 counted it (docs/proxy.md, usage). Until they answered, or where the upstream
reports no usage even then, a generic 3 + 5 a message is taken (ChatML's and Gemma's turns: a start,
the role, a newline, an end and a newline; the assistant turn opened last). Either way the prompt's
count is an estimate, and said to be one (``TokenCount.estimated``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from conformance.request import message_texts

from ..normalizer.usage import estimated_tokens
from ..upstream import Upstream
from .base import OPENAI_PATHS, TokenCount

__all__ = [
    "GENERIC",
    "PromptParts",
    "TemplateLearner",
    "TemplateOverhead",
    "estimated_chat_prompt",
    "estimated_prompt",
    "tools_text",
]

TextCounter = Callable[[str, float], Awaitable[int | None]]
"""A text's tokens by the upstream's tokenizer, without the tokens it adds to any text; None if unknown."""

_TRIES = 3  # learning attempts per upstream: a server that reports no usage is not asked for ever
_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
_HI = {"role": "user", "content": "Hi"}
_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"city": "Hi"}'}}
# (content "" rather than null: llama-cpp-python refuses null, Q81)
_CALLED = {"role": "assistant", "content": "", "tool_calls": [_CALL]}
_LONG_RESULT = " ".join(["Hi"] * 16)
_ASKED: tuple[dict[str, Any], ...] = (
    {"messages": [_HI]},
    {"messages": [_HI, {"role": "assistant", "content": "Hi"}, _HI]},
    {"messages": [_HI], "tools": [_TOOL]},
    {"messages": [_HI, _CALLED, {"role": "tool", "tool_call_id": "call_1", "content": "Hi"}]},
    {"messages": [_HI, _CALLED, {"role": "tool", "tool_call_id": "call_1", "content": _LONG_RESULT}]},
)


@dataclass(frozen=True, slots=True)
class TemplateOverhead:
    """The tokens a template adds: ``fixed`` once, ``per_message`` a message of text, ``per_tool_token``
    for each token of the tools' JSON definitions (0: the template leaves tools out), ``per_result``
    for each tool result with the call it answers, and ``result_ratio`` for each token of those
    results' and calls' texts (0: the template leaves them out, as Gemma 3's under llama-cpp-python:
    a round trip counted 27 tokens whatever the result's length)."""

    fixed: float
    per_message: float
    per_tool_token: float
    per_result: float
    result_ratio: float

    def tokens(self, prompt: PromptParts, tool_tokens: int, result_tokens: int) -> int:
        estimate = (
            prompt.text_tokens
            + self.fixed
            + self.per_message * prompt.messages
            + self.per_tool_token * tool_tokens
            + self.per_result * prompt.results
            + self.result_ratio * result_tokens
        )
        return max(round(estimate), prompt.text_tokens)


GENERIC = TemplateOverhead(3, 5, 1, 5, 1)


@dataclass(frozen=True, slots=True)
class PromptParts:
    """A chat request's prompt as the estimate reads it: the messages of text and their texts' tokens,
    the tool results, and the texts of those results and of the calls they answer."""

    text_tokens: int
    messages: int
    results: int
    result_text: str


def _parts(body: dict[str, Any]) -> tuple[str, int, int, str]:
    """(the texts of the messages of text, their number, the tool results, the results' and calls' texts)"""
    messages = body.get("messages")
    messages = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    results = [m for m in messages if m.get("role") == "tool"]
    calls = [c for m in messages if isinstance(m.get("tool_calls"), list) for c in m["tool_calls"]]
    call_texts = [
        f"{c['function'].get('name', '')}{c['function'].get('arguments', '')}"
        for c in calls
        if isinstance(c, dict) and isinstance(c.get("function"), dict)
    ]
    plain = [m for m in messages if m.get("role") != "tool" and (not m.get("tool_calls") or _texts([m]))]
    return _texts(plain), len(plain), len(results), "\n".join([_texts(results), *call_texts])


def tools_text(body: dict[str, Any]) -> str:
    """The request's tool definitions as JSON, one a line (what a template that writes them holds)."""
    tools = body.get("tools")
    return "\n".join(json.dumps(t, ensure_ascii=False) for t in tools) if isinstance(tools, list) else ""


def _texts(messages: Any) -> str:
    return "\n".join(message_texts(messages))


async def _reported_prompt(
    upstream: Upstream,
    model: Any,
    extra: dict[str, Any],
    timeout: float,  # noqa: ASYNC109
) -> int | None:
    body = {"model": model, "max_tokens": 1, "stream": False, **extra}
    answer = await upstream.json("POST", OPENAI_PATHS["chat"], body, timeout=timeout)
    usage = answer.get("usage") if isinstance(answer, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0 else None


async def _learned(upstream: Upstream, model: Any, count: TextCounter) -> TemplateOverhead | None:
    """The overhead the upstream's answers to the five requests show; None where one did not say.
    Asked one after another: llama-cpp-python serves one request at a time."""
    timeout = upstream.config.first_byte_timeout
    reported = []
    for extra in _ASKED:
        tokens = await _reported_prompt(upstream, model, extra, timeout)
        if tokens is None:
            return None
        reported.append(tokens)
    one, three, with_tool, short, long = reported
    texts = ("Hi", _texts(_ASKED[1]["messages"]), tools_text(_ASKED[2]), _parts(_ASKED[3])[3], _LONG_RESULT)
    counts = [await count(text, timeout) for text in texts]
    if any(c is None for c in counts):
        return None
    hi, hi_three, tool, result, long_result = (c or 0 for c in counts)
    per_message = ((three - hi_three) - (one - hi)) / 2
    fixed = one - hi - per_message
    if per_message < 0 or fixed < 0:  # no count of these prompts (one usage for every answer): not learned
        return None
    ratio = max(long - short, 0) / max(long_result - hi, 1)
    return TemplateOverhead(
        fixed=fixed,
        per_message=per_message,
        per_tool_token=max(with_tool - one, 0) / max(tool, 1),
        per_result=short - one - ratio * result,
        result_ratio=ratio,
    )


class TemplateLearner:
    """One upstream's template overhead, learned when first asked for, the caller waiting: within a
    quarter of the idle and first-byte timeouts (the bound of the calls that count an answer's usage,
    less its 2 s cap: five requests, once), else given up and tried again with a later count, a few
    times at most. Never left running past the caller: a server that serves one request at a time
    (llama-cpp-python) breaks off a stream when another request arrives (the learning sent beside the
    measuring client's next stream broke it, a 502), and that client sends its next request only once
    it has this count."""

    def __init__(self) -> None:
        self.learned: TemplateOverhead | None = None
        self._learning = False
        self._tries = 0

    async def overhead(self, upstream: Upstream, model: Any, count: TextCounter) -> TemplateOverhead | None:
        """The learned overhead, None while not (yet) known."""
        if self.learned is not None or self._learning or self._tries >= _TRIES:
            return self.learned
        self._learning, self._tries = True, self._tries + 1
        config = upstream.config
        try:
            async with asyncio.timeout(min(config.idle_timeout, config.first_byte_timeout) / 4):
                self.learned = await _learned(upstream, model, count)
        except TimeoutError:
            pass
        finally:
            self._learning = False
        return self.learned


async def estimated_chat_prompt(
    learner: TemplateLearner,
    upstream: Upstream,
    body: dict[str, Any],
    count: TextCounter,
    timeout: float,  # noqa: ASYNC109
) -> TokenCount | None:
    """A chat prompt's tokens where the upstream cannot render its template: its texts (and tools and
    tool results, where its template writes them) counted by its tokenizer, with the markup learned or
    guessed; None where the tokenizer did not count in ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    plain, messages, results, result_text = _parts(body)
    texts = await count(plain, timeout)
    if texts is None:
        return None
    overhead = await learner.overhead(upstream, body.get("model"), count) or GENERIC
    deadline = max(deadline, loop.time() + timeout)  # (the learning, once, has its own bound)
    tools = tools_text(body)
    tool_tokens = result_tokens = 0
    if tools and overhead.per_tool_token > 0:
        tool_tokens = await count(tools, deadline - loop.time()) or estimated_tokens(tools)
    if result_text and overhead.result_ratio > 0:
        result_tokens = await count(result_text, deadline - loop.time()) or estimated_tokens(result_text)
    prompt = PromptParts(texts, messages, results, result_text)
    return TokenCount(overhead.tokens(prompt, tool_tokens, result_tokens), estimated=True)


def estimated_prompt(body: dict[str, Any]) -> int:
    """A prompt's tokens where no tokenizer counted them: a completion's token ids, else its pieces
    (estimated_tokens); a chat request's with the generic markup."""
    prompt = body.get("prompt")
    if "messages" not in body:
        if isinstance(prompt, list):
            return len(prompt)
        return estimated_tokens(prompt) if isinstance(prompt, str) else 0
    plain, messages, results, result_text = _parts(body)
    parts = PromptParts(estimated_tokens(plain), messages, results, result_text)
    return GENERIC.tokens(parts, estimated_tokens(tools_text(body)), estimated_tokens(result_text))
