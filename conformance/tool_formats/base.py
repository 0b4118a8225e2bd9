"""What every tool-call syntax shares: the calls read out of a model's text, and the interface one
format module implements.

A model writes a tool call as text in its family's own syntax; a server parses it into ``tool_calls``
(llama.cpp's common/chat.cpp keeps one parser per family) or, lacking the parser, sends it on as text
(Q79). Three readers need the same knowledge of each syntax: the bundled backend, which parses what its
model writes; the proxy, which repairs what an upstream left as text; the judge, which finds markup left
in ``content``. So each syntax is one module here, and none of them imports the backend or the proxy.

A syntax knows: the text that opens a call (``markers``), the text that ends one where it has one
(``ends``: the proxy holds a stream from a marker to an end, and parses only then), whether a call can
only open the answer (``leading_only``), and how to read calls out of a text (``parse``). Parsing never
raises and never guesses: text that does not hold a whole call stays content.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance import jsoncodec
from conformance.tool_formats._scanning import skip_space

__all__ = [
    "CallSyntax",
    "ParsedCall",
    "ParsedOutput",
    "Schemas",
    "arguments_text",
    "call_from_object",
    "decode_json_at",
    "parameter_schema",
    "typed_value",
]

Schemas = Mapping[str, Any]
"""The offered functions' ``parameters`` schemas by name: how a syntax that writes arguments as text
(Qwen3-Coder's XML, GLM's ``<arg_value>``) tells the string ``"5"`` from the number 5."""


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str
    """The arguments as a JSON text (OpenAI sends ``function.arguments`` as a string)."""
    id: str | None = None
    """The id the model wrote itself (Mistral's, Kimi's), else None: the server makes one."""


@dataclass(slots=True)
class ParsedOutput:
    content: str
    calls: list[ParsedCall] = field(default_factory=list)


def decode_json_at(text: str, start: int) -> tuple[Any, int] | None:
    """The JSON value starting at ``text[start:]`` (after white space) and the index after it, or None.

    A value nested deeper than jsoncodec reads is None too: a model's arguments nested 5,000 deep made
    the standard parser raise RecursionError, which is no ValueError (issue 18)."""
    start = skip_space(text, start)
    try:
        value, end = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        return None
    if jsoncodec.too_deep(text[start:end], value):
        return None
    return value, end


def arguments_text(value: Any) -> str | None:
    """A call's arguments as OpenAI's JSON string: an object is dumped, a string holding an object is
    kept (some models quote them); anything else is no arguments at all."""
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        found = decode_json_at(value, 0)
        if found is not None and isinstance(found[0], dict) and not value[found[1] :].strip():
            return value.strip()
    return None


def call_from_object(obj: Any, *, arguments_keys: tuple[str, ...] = ("arguments",)) -> ParsedCall | None:
    """``{"name": ..., "arguments": {...}}`` (or another arguments key) -> a call; None if not one."""
    if not isinstance(obj, dict):
        return None
    if obj.get("type") == "function" and isinstance(obj.get("function"), dict):
        obj = obj["function"]  # OpenAI's own shape, which some fine-tunes copy
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    for key in arguments_keys:
        if key in obj:
            arguments = arguments_text(obj[key])
            if arguments is None:
                return None
            call_id = obj.get("id")
            return ParsedCall(name, arguments, call_id if isinstance(call_id, str) else None)
    return ParsedCall(name, "{}")


def typed_value(text: str, schema: Any) -> Any:
    """A parameter written as text, as the value its schema types it: kept a string where the schema
    says ``string`` (or says nothing and the text is no JSON), else read as JSON (``5``, ``true``,
    ``[1, 2]``) when it is JSON. llama.cpp's Qwen3-Coder parser decides the same way."""
    types = schema.get("type") if isinstance(schema, dict) else None
    wanted = {types} if isinstance(types, str) else set(types) if isinstance(types, list) else set()
    if wanted == {"string"}:
        return text
    found = decode_json_at(text, 0)
    if found is None or text[found[1] :].strip():
        return text
    return found[0]


def parameter_schema(schemas: Schemas | None, name: str, key: str) -> Any:
    """The schema of parameter ``key`` of function ``name``, or None where the request says nothing."""
    if not isinstance(schemas, Mapping):
        return None
    parameters = schemas.get(name)
    if not isinstance(parameters, Mapping):
        return None
    properties = parameters.get("properties")
    return properties.get(key) if isinstance(properties, Mapping) else None


class CallSyntax:
    """The interface one syntax module implements (see the module docstring)."""

    name: str = ""
    markers: tuple[str, ...] = ()
    """Text that opens a call; content streams until one shows up."""
    ends: tuple[str, ...] = ()
    """Text after which the calls a marker opened are whole (empty: only the answer's end says so)."""
    leading_only: bool = False
    """Whether a call can only open the answer (Llama 3.x JSON): then the answer's start is held until
    it is clear whether it is a call."""
    opens_call: bool = True
    """Whether a marker always opens a call (False for harmony, whose markers open any message: one that
    never reaches an end was no call, not a call that failed to parse)."""

    def ends_of(self, marker: str) -> tuple[str, ...]:
        """The ends of what ``marker`` opened (a syntax with two markers may close each its own way)."""
        return self.ends

    def opens_answer(self, lead: str) -> bool | None:
        """For a leading-only syntax: whether an answer that begins with ``lead`` (white space taken
        off) opens a call; None while it is too short to tell."""
        if any(lead.startswith(marker) for marker in self.markers):
            return True
        return None if any(marker.startswith(lead) for marker in self.markers) else False

    def parse(self, text: str, *, final: bool, schemas: Schemas | None = None) -> ParsedOutput:
        """Calls in ``text`` and the content around them; with ``final`` False only whole calls count,
        and text from an unfinished call on is left out (it may still become one)."""
        raise NotImplementedError


_DECODER = json.JSONDecoder()
