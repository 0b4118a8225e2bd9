"""Every syntax the proxy repairs and the judge looks for, in the order they are tried where two open
with the same marker (Hermes's JSON body before Qwen3-Coder's and GLM's XML ones: each reads only its
own body, so the order only saves work)."""

from __future__ import annotations

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

__all__ = ["MARKERS", "SYNTAXES"]

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
