"""The functions a request offers, as the readers of calls written as text need them: which names a
call may have, how its parameters are typed, and which tools ask for strict arguments.

A call read out of a model's text is taken only as a call of an offered function with arguments that
are a JSON object, valid against the function's schema where the tool is ``strict``: anything else is
not a call the client could run, and a wrong guess would run a tool nobody called. A name written dotted
where the client flattened it (``os.fs.read`` for ``os__fs__read``: agents flatten MCP namespaces, and
models write them back as they read them in descriptions) is mapped back only where one offered name
fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import referencing.exceptions

from conformance import jsoncodec
from conformance.tool_formats.base import ParsedCall

__all__ = ["NO_TOOLS", "OfferedTools"]

_FLATTENED = ("__", "_", "-", "")
"""How clients flatten a dotted name into the function names OpenAI allows (``^[a-zA-Z0-9_-]+$``)."""


@dataclass(frozen=True, slots=True)
class OfferedTools:
    names: tuple[str, ...] = ()
    schemas: Mapping[str, Any] = field(default_factory=dict)
    """Each function's ``parameters`` schema."""
    strict: frozenset[str] = frozenset()
    """The functions whose tool asked for ``strict`` arguments."""

    def __bool__(self) -> bool:
        return bool(self.names)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> OfferedTools:
        """A chat body's function tools; none where ``tool_choice`` is ``"none"``."""
        tools = body.get("tools")
        if not isinstance(tools, list) or body.get("tool_choice") == "none":
            return cls()
        names: list[str] = []
        schemas: dict[str, Any] = {}
        strict: set[str] = set()
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if not isinstance(function, dict) or not isinstance(name, str) or not name:
                continue
            names.append(name)
            schemas[name] = function.get("parameters")
            if function.get("strict") is True:
                strict.add(name)
        return cls(tuple(names), schemas, frozenset(strict))

    def resolve(self, written: str) -> str | None:
        """The offered function a call names: its name as written, or the one flattened form of a
        dotted name that is offered; None for anything else (no guess between two)."""
        if written in self.names:
            return written
        if "." not in written:
            return None
        fits = {written.replace(".", sep) for sep in _FLATTENED} & set(self.names)
        return fits.pop() if len(fits) == 1 else None

    def accept(self, call: ParsedCall) -> ParsedCall | None:
        """``call`` as a call of an offered function, or None where it is not one the client could run."""
        name = self.resolve(call.name)
        if name is None:
            return None
        try:
            arguments = jsoncodec.loads(call.arguments)
        except ValueError:
            return None
        if not isinstance(arguments, dict):
            return None
        if name in self.strict and not _valid(arguments, self.schemas.get(name)):
            return None
        return call if name == call.name else ParsedCall(name, call.arguments, call.id)


def _valid(arguments: dict[str, Any], schema: Any) -> bool:
    if not isinstance(schema, dict):
        return True
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        return next(iter(validator.iter_errors(arguments)), None) is None
    except (
        jsonschema.SchemaError,
        referencing.exceptions.Unresolvable,
        RecursionError,
        ValueError,
        TypeError,
    ):
        return False  # a schema the validator cannot read: the call cannot be shown to fit it


NO_TOOLS = OfferedTools()
"""A request without tools (or with ``tool_choice: "none"``)."""
