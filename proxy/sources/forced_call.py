"""A request that forces a tool call, answered with a call or an honest error, never with text (issue 37,
Q86).

The answer is held until it is known to call: a JSON answer is judged whole; a stream's chunks are held
(inside ``start()``, so nothing reaches the client and its status is not yet sent) until every choice
has begun a call, or the stream ended. One that ended without a call is asked again the next way
(proxy/adapters/forced_choice.py: the function named, then as JSON output), and what failed is learned
of the upstream; when no way gave a call, the client gets the 502 ``tool_choice_not_honoured``, in its
protocol's words (the front-end's error, as for any failure before the first byte). A stream that calls
goes out as it came, from its first chunk. One cut by its token limit before any call is asked again
the next way, whose call may fit in the limit, without learning anything of the upstream (the limit
ended it, not its reading of ``tool_choice``); cut so on the last way, it goes out as cut
(``finish_reason: "length"``).

What is held is bounded: a forced call begins at once (OpenAI's, llama-cpp-python's named grammar) or
after a few words (llama-server's ``required`` grammar lets text come first, Q83), so a stream still
without a call after ``HELD_EVENTS`` events is judged as one that ended without a call, and its
upstream request is closed. The held chunks are the normalizer's, one an upstream event: 4,096 of a word
each took 2.8 MB (tracemalloc; logprobs add their entries). A count of events alone does not bound a
hostile upstream's few huge events (a line may hold 4 MiB, proxy/transport.py), so the text held is
bounded too, at ``HELD_CHARS``: far more than the words any grammar lets come before a call.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from conformance.api_errors import APIError

from ..adapters.forced_choice import Attempt, ForcedKind, forced_attempts, not_honoured, unhonoured_choice
from ..adapters.tool_emulation import EmulatedCalls
from ..normalizer import Repairs
from .base import Attempts, Source
from .builder import SourceBuilder

__all__ = ["HELD_CHARS", "HELD_EVENTS", "ForcedCall"]

HELD_EVENTS = 4096
HELD_CHARS = 1 << 16
_QUIRK = "Q86"


class ForcedCall(Attempts):
    """The source of a chat request whose ``tool_choice`` forces a call (``kind``), on one upstream."""

    def __init__(self, builder: SourceBuilder, body: dict[str, Any], kind: ForcedKind) -> None:
        self._builder = replace(builder, lines=False)  # (each answer is read by batch while it is held)
        self._body = body
        self._kind = kind
        self._current: Source | None = None
        self._spent = Repairs()  # the answers without a call, and the enforcing itself (Q86)

    @property
    def failure(self) -> APIError | None:
        return None if self._current is None else self._current.failure

    async def start(self) -> list[dict[str, Any]]:
        traits = self._builder.upstream.traits
        attempts = forced_attempts(traits, self._body, self._kind)
        if not attempts:
            raise unhonoured_choice(self._kind)
        for position, attempt in enumerate(attempts):
            held, cut = await self._attempt(attempt, cut_goes=position == len(attempts) - 1)
            if held is not None:
                if attempt.way == "json_output":
                    traits.enforced_schema(True)
                if attempt.way != "asked":
                    self._spent.add(_QUIRK)
                return held
            if not cut:  # (a cut teaches nothing: the limit ended it, not the upstream)
                attempt.failed(traits, self._kind)
            self._spent.add(_QUIRK)
        raise not_honoured(self._kind)

    async def _attempt(self, attempt: Attempt, cut_goes: bool) -> tuple[list[dict[str, Any]] | None, bool]:
        """The first chunks of ``attempt``'s answer when it calls (``_called``), None when it did not, or
        when the upstream refused a way the proxy chose (a 4xx: a server without ``response_format``
        refuses JSON output), which then counts as failed; and whether the answer was cut by its token
        limit before any call. The client's own request refused, or any other failure, is raised:
        nothing was sent yet."""
        # (the JSON read as the call)
        reading = (
            partial(EmulatedCalls, attempt.names, required=True) if attempt.way == "json_output" else None
        )
        source = self._current = self._builder.build(attempt.body, reading=reading)
        try:
            held, cut = await self._called(source, await source.start(), cut_goes)
        except APIError as failed:
            if attempt.way == "asked" or not 400 <= failed.status < 500:
                raise
            held, cut = None, False
        if held is None:
            self._spent.update(source.repairs)
            await source.aclose()
        return held, cut

    async def _called(
        self, source: Source, initial: list[dict[str, Any]], cut_goes: bool
    ) -> tuple[list[dict[str, Any]] | None, bool]:
        """The chunks to send first when ``source`` answered with a call in every choice (or was cut by
        its limit before one, ``_going``): ``initial``, and a stream's chunks up to each choice's first
        call; None when it answered without one; and whether it was cut before any call. A stream that
        failed while held raises its failure: nothing was sent yet."""
        if source.body is not None:
            return _going(initial, _body_choices(source.body), cut_goes)
        held = list(initial)
        choices = _Choices()
        choices.observe(held)
        wanted = self._builder.info.choices
        next_batch = source.active.next_batch
        while sum(choices.called.values()) < wanted:
            if len(held) > HELD_EVENTS or choices.text > HELD_CHARS:
                return None, False  # (a read's batch is bounded by the read: judged with it, then no more)
            batch = await next_batch()
            if batch is None:
                if (failure := source.failure) is not None:
                    raise failure
                return _going(held, choices.judged(), cut_goes)
            held += batch
            choices.observe(batch)
        return held, False

    async def next_batch(self) -> list[dict[str, Any]] | None:
        return None if self._current is None else await self._current.next_batch()

    async def aclose(self) -> None:
        if self._current is not None:
            await self._current.aclose()


_TEXTS = frozenset({"content", "reasoning_content", "reasoning", "refusal"})


class _Choices:
    """Each choice of a held stream: whether it began a call, and its finish reason once it came; and
    the characters of text held, all choices together."""

    def __init__(self) -> None:
        self.called: dict[Any, bool] = {}
        self.finishes: dict[Any, Any] = {}
        self.text = 0

    def observe(self, chunks: list[dict[str, Any]]) -> None:
        for chunk in chunks:
            for choice in chunk.get("choices") or ():
                index = choice.get("index", 0)
                delta = choice.get("delta")
                calls = isinstance(delta, dict) and bool(delta.get("tool_calls"))
                if isinstance(delta, dict):
                    self.text += sum(len(v) for k, v in delta.items() if k in _TEXTS and isinstance(v, str))
                self.called[index] = self.called.get(index, False) or calls
                if choice.get("finish_reason") is not None:
                    self.finishes[index] = choice["finish_reason"]

    def judged(self) -> list[tuple[bool, Any]]:
        """(called, finish reason) of each choice."""
        return [(called, self.finishes.get(index)) for index, called in self.called.items()]


def _body_choices(body: dict[str, Any]) -> list[tuple[bool, Any]]:
    """(called, finish reason) of each choice of a whole answer."""
    out = []
    for choice in body.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        called = isinstance(message, dict) and bool(message.get("tool_calls"))
        out.append((called, choice.get("finish_reason") if isinstance(choice, dict) else None))
    return out


def _going(
    chunks: list[dict[str, Any]], choices: list[tuple[bool, Any]], cut_goes: bool
) -> tuple[list[dict[str, Any]] | None, bool]:
    """``chunks`` where the answer may go out (every choice called; or, where ``cut_goes``, the last way
    there is, cut by the token limit before a call), else None; and whether it was cut so. Before the last
    way, a cut answer is asked again the next way, which may call within the limit: llama-server's grammar
    for ``required`` lets text come before the call (Q83), and Gemma 3 270M wrote text up to every limit
    (``check``'s forced probes in front of llama-server with a tool template: text, finished ``length``)."""
    called = bool(choices) and all(call for call, _ in choices)
    cut = not called and bool(choices) and all(call or finish == "length" for call, finish in choices)
    return (chunks if called or (cut and cut_goes) else None), cut
