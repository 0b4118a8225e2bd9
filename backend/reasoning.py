"""A thinking model's reasoning split out of its answer, into ``reasoning_content`` (issue 20, item 3).

Which markers a model thinks between is read from its chat template, as llama.cpp's ``common/chat.cpp``
does: the template of a thinking model writes its markers (Qwen 3's drops ``<think>...</think>`` from
earlier turns and writes an empty pair when thinking is off; DeepSeek R1's splits old answers at
``</think>``). And as llama.cpp's ``thinking_forced_open``: a prompt that ends with the opening marker
(DeepSeek R1 0528 and its distills, GLM 4.5, MiniMax M2 end the generation prompt with ``<think>\\n``)
means the model's output starts inside its thinking, with only the closing marker to come.

The text is split as it is generated: a marker split over tokens is held back until it is whole (or
is not a marker after all), so a stream's ``delta.reasoning_content`` and ``delta.content`` carry the
same texts a whole body's ``message`` does. Tokens generated while thinking are counted as
``usage.completion_tokens_details.reasoning_tokens`` (the closing marker's token included).

Recorded outputs the splitter is tested on (tests/backend/test_reasoning.py): DeepSeek-R1's API
reference (``reasoning_content`` beside ``content``) and Qwen 3's model card ("Thinking and
non-thinking mode": ``<think>...</think>`` before the answer, token 151668 closing it).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MARKERS",
    "ChoiceReasoning",
    "ReasoningSplitter",
    "ThinkingMarkers",
    "markers_in_template",
]


@dataclass(frozen=True, slots=True)
class ThinkingMarkers:
    open: str
    close: str

    def forced_open(self, prompt: str) -> bool:
        """Whether ``prompt`` (the rendered chat prompt) ends inside a thinking block: llama.cpp's
        ``thinking_forced_open``, when the generation prompt ends with the opening marker."""
        return prompt.rstrip().endswith(self.open)


MARKERS = (
    ThinkingMarkers("<think>", "</think>"),  # DeepSeek R1, Qwen 3, QwQ, GLM 4.5, MiniMax M2, Granite
    ThinkingMarkers("<|START_THINKING|>", "<|END_THINKING|>"),  # Command R7B
    ThinkingMarkers("<seed:think>", "</seed:think>"),  # Seed-OSS
    ThinkingMarkers("[THINK]", "[/THINK]"),  # Magistral
    ThinkingMarkers("<thinking>", "</thinking>"),  # Apriel, Nemotron (llama.cpp's "<thinking>\n")
)
"""Pairs in the order they are looked for: ``<seed:think>`` and ``<thinking>`` do not contain
``</think>``, so the first pair whose closing marker a template writes is the model's."""


def markers_in_template(source: str | None) -> ThinkingMarkers | None:
    """The thinking markers a chat template writes, if it is a thinking model's."""
    if not source:
        return None
    return next((m for m in MARKERS if m.close in source), None)


def _partial_end(text: str, marker: str) -> int:
    """Where the longest end of ``text`` that could begin ``marker`` starts (``len(text)`` if none)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return len(text) - size
    return len(text)


class ReasoningSplitter:
    """One choice's generated text as (reasoning, content), fed piece by piece.

    Thinking is looked for at the start of the answer only (after white space), as the templates put
    it: a ``<think>`` later in an answer is text about the tag, not thinking.
    """

    __slots__ = ("_fresh", "_held", "_markers", "_state")

    def __init__(self, markers: ThinkingMarkers, *, forced_open: bool = False) -> None:
        self._markers = markers
        self._held = ""
        self._state = "thinking" if forced_open else "start"
        self._fresh = forced_open  # nothing of the thinking seen yet

    @property
    def thinking(self) -> bool:
        """Whether text fed now is reasoning (its tokens count as reasoning tokens)."""
        return self._state == "thinking"

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning, content) that can go out now."""
        held = self._held + text
        self._held = ""
        markers = self._markers
        if self._state == "start":
            stripped = held.lstrip()
            if stripped.startswith(markers.open):
                self._state = "thinking"
                self._fresh = True
                held = stripped[len(markers.open) :]
            elif markers.open.startswith(stripped):
                self._held = held  # the opening marker may still be coming
                return "", ""
            else:
                self._state = "answer"
        if self._state == "thinking":
            if self._fresh:  # the templates put a newline after the opening marker: not reasoning
                held = held.lstrip()
                self._fresh = not held
            end = held.find(markers.close)
            if end < 0:
                cut = _partial_end(held, markers.close)
                self._held = held[cut:]
                return held[:cut], ""
            self._state = "answer_start"
            reasoning, held = held[:end], held[end + len(markers.close) :]
            return reasoning, self._answer(held)
        return "", self._answer(held)

    def _answer(self, text: str) -> str:
        if self._state == "answer_start":  # the templates put blank lines after the closing marker
            text = text.lstrip()
            if not text:
                return ""
            self._state = "answer"
        return text

    def finish(self) -> tuple[str, str]:
        """What was held at the end: unfinished thinking stays reasoning, a partial marker is text."""
        held, self._held = self._held, ""
        if self._state == "thinking":
            return held, ""
        return "", held


class ChoiceReasoning:
    """One chat choice's split: the deltas to send, the whole texts, and its reasoning tokens."""

    __slots__ = ("_seen", "content", "reasoning", "splitter", "tokens")

    def __init__(self, markers: ThinkingMarkers, prompt: str) -> None:
        self.splitter = ReasoningSplitter(markers, forced_open=markers.forced_open(prompt))
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.tokens = 0
        self._seen = 0

    def delta(self, text: str, completion_tokens: int) -> dict[str, str]:
        """The delta for generated ``text``; ``completion_tokens``: the choice's count with it. The
        tokens of text that comes while thinking are reasoning tokens."""
        if self.splitter.thinking:
            self.tokens += max(completion_tokens - self._seen, 0)
        self._seen = max(completion_tokens, self._seen)
        return self._out(*self.splitter.feed(text))

    def end(self) -> dict[str, str]:
        """The delta of what was held back at the end (empty when nothing was)."""
        return self._out(*self.splitter.finish())

    def _out(self, reasoning: str, content: str) -> dict[str, str]:
        delta = {}
        if reasoning:
            self.reasoning.append(reasoning)
            delta["reasoning_content"] = reasoning
        if content:
            self.content.append(content)
            delta["content"] = content
        return delta
