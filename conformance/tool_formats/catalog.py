"""Every syntax the proxy repairs and the judge looks for, in the order they are tried where two open
with the same marker (Hermes's JSON body before Qwen3-Coder's and GLM's XML ones: each reads only its
own body, so the order only saves work)."""

from __future__ import annotations

from collections.abc import Collection

from conformance.tool_formats.base import CallSyntax
from conformance.tool_formats.deepseek import DeepSeek
from conformance.tool_formats.gemma import Gemma
from conformance.tool_formats.glm import Glm
from conformance.tool_formats.granite import Granite
from conformance.tool_formats.harmony import Harmony
from conformance.tool_formats.hermes import Hermes
from conformance.tool_formats.kimi import Kimi
from conformance.tool_formats.llama3 import Llama3
from conformance.tool_formats.mistral import Mistral
from conformance.tool_formats.qwen_xml import QwenXml

__all__ = ["CALL_MARKERS", "MARKERS", "SYNTAXES", "markup_in"]

SYNTAXES: tuple[CallSyntax, ...] = (
    Hermes(),
    QwenXml(),
    Glm(),
    Mistral(),
    Granite(),
    DeepSeek(),
    Kimi(),
    Harmony(),
    Gemma(),
    Llama3(),
)

MARKERS: tuple[str, ...] = tuple(
    dict.fromkeys(marker for syntax in SYNTAXES for marker in syntax.markers if marker != "{")
)
"""The text that opens a call in any of them (not a bare ``{``, which opens any JSON answer too)."""

CALL_MARKERS: tuple[str, ...] = tuple(
    dict.fromkeys(m for syntax in SYNTAXES if syntax.opens_call for m in syntax.markers if m != "{")
)
"""Those that open nothing but a call (harmony's ``<|channel|>`` opens any message: a final answer too)."""


def markup_in(text: str, offered: Collection[str] = ()) -> str | None:
    """The first call markup ``text`` holds: a marker, or the opening of an answer that a leading-only
    syntax reads as a call of one of the ``offered`` functions (Llama 3.x's bare ``{"name": ...,
    "parameters": ...}``: without the name of an offered function it is any JSON answer); None if none."""
    marker = next((m for m in CALL_MARKERS if m in text), None)
    if marker is not None:
        return marker
    for syntax in SYNTAXES:  # (harmony's markup: markup of a call only where it reads as one)
        found = None if syntax.opens_call else next((m for m in syntax.markers if m in text), None)
        if found is not None and syntax.parse(text, final=True).calls:
            return found
    if not offered:
        return None
    lead = text.lstrip()
    for syntax in SYNTAXES:
        if syntax.leading_only and syntax.opens_answer(lead):
            calls = syntax.parse(text, final=True).calls
            if calls and all(call.name in offered for call in calls):
                return lead[: lead.find(":") + 1]
    return None
