"""``conformant serve --config FILE``: the upstreams a proxy routes to, read from TOML (stdlib tomllib).

The smallest file is a list of ``[[upstream]]`` tables with ``url`` and ``models``; everything else has
a default. A key is never written in the file: ``api_key_env`` names the environment variable that holds
it. A file that does not hold together stops ``serve`` with one line naming the key and the problem
(``ConfigFileError``), as a bad flag does; on ``SIGHUP`` the same error keeps the routes that serve.

    [routing]                    # optional; these are the defaults
    health_interval = 5.0        # seconds between GET /health of each upstream
    eject_cooldown = 10.0        # seconds an upstream is left out after a connect error or a 5xx
    prefix_chars = 512           # how much of the prompt's start names its prefix (affinity)
    affinity_slack = 4           # outstanding requests the prefix's replica may have over the least busy

    [aliases]                    # optional: names clients may use for a model served below
    "gpt-4o-mini" = "gemma-3-270m"

    [[upstream]]
    url = "http://10.0.0.5:8080/v1"
    kind = "auto"                # auto | openai | llamacpp (as --upstream-kind)
    responses = "translate"      # translate | native | auto (as --responses, whose value is the default)
    messages = "translate"       # likewise for /v1/messages (as --messages)
    api_key_env = "GPU1_KEY"     # the variable holding the key sent to this upstream
    models = ["gemma-3-270m"]    # left out: the models its /v1/models lists
    weight = 1.0                 # share of the load against the group's other replicas
    max_concurrency = 8          # requests sent at once (left out: no limit)
    max_queue = 64               # requests waiting for a slot past which a request gets a 429
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.protocols import PROTOCOLS

from ..config import (
    NATIVE_MODES,
    UPSTREAM_KINDS,
    NativeMode,
    ProxyConfig,
    UpstreamKind,
    base_of,
    upstream_url_problem,
)

__all__ = [
    "ConfigFileError",
    "RoutingFile",
    "RoutingOptions",
    "UpstreamEntry",
    "load_routing_file",
    "one_upstream",
    "routing_of",
]


class ConfigFileError(ValueError):
    """The file cannot be served: its message is one line, ``FILE: KEY: PROBLEM``."""


@dataclass(frozen=True, slots=True)
class UpstreamEntry:
    """One ``[[upstream]]`` table."""

    url: str
    kind: UpstreamKind = "auto"
    api_key_env: str | None = None
    api_key: str | None = field(default=None, repr=False)
    """Read from ``api_key_env`` when the file is loaded; never in the file."""
    models: tuple[str, ...] | None = None
    """None: the models the upstream's own listing names."""
    weight: float = 1.0
    max_concurrency: int | None = None
    max_queue: int = 64
    native: Mapping[str, NativeMode] = field(default_factory=dict)
    """How each protocol an upstream may speak itself goes to it (``responses = "native"``), where the
    file says; else as the command line says (``--responses``)."""

    @property
    def identity(self) -> tuple[str, str | None]:
        """What makes a reloaded entry the same upstream (its state and connections are kept)."""
        return (self.url.rstrip("/"), self.api_key)


@dataclass(frozen=True, slots=True)
class RoutingOptions:
    health_interval: float = 5.0
    eject_cooldown: float = 10.0
    prefix_chars: int = 512
    affinity_slack: int = 4


@dataclass(frozen=True, slots=True)
class RoutingFile:
    upstreams: tuple[UpstreamEntry, ...]
    aliases: dict[str, str]
    options: RoutingOptions
    catch_all: bool = False
    """The pool of one that ``--upstream`` makes: every model goes to it, and it is never checked nor
    left out (a refusal or a fault of the only upstream is the client's answer)."""


def one_upstream(config: ProxyConfig) -> RoutingFile:
    """``--upstream``: a pool of one, served by the same router as a file's upstreams."""
    entry = UpstreamEntry(
        url=config.upstream, kind=config.upstream_kind, api_key=config.upstream_api_key, models=None
    )
    return RoutingFile((entry,), {}, RoutingOptions(prefix_chars=0), catch_all=True)


def routing_of(config: ProxyConfig) -> RoutingFile:
    """The upstreams the proxy serves: ``--config``'s file, or ``--upstream``'s pool of one."""
    return one_upstream(config) if config.config_file is None else load_routing_file(config.config_file)


_NATIVE_KEYS = frozenset(protocol.name for protocol in PROTOCOLS if protocol.native)
_UPSTREAM_KEYS = {
    "url",
    "kind",
    "api_key_env",
    "models",
    "weight",
    "max_concurrency",
    "max_queue",
    *_NATIVE_KEYS,
}
_ROUTING_KEYS = {"health_interval", "eject_cooldown", "prefix_chars", "affinity_slack"}


def _fail(where: str, problem: str) -> ConfigFileError:
    return ConfigFileError(f"{where}: {problem}")


def _number(value: Any, where: str, *, integer: bool = False, minimum: float = 0.0) -> Any:
    wrong = isinstance(value, bool) or not isinstance(value, int if integer else (int, float))
    if wrong or not math.isfinite(value):
        raise _fail(where, f"must be {'an integer' if integer else 'a number'}, not {value!r}")
    positive = minimum == 0 and not integer  # (a number of seconds or a weight: 0 would mean nothing)
    if value < minimum or (positive and value == 0):
        raise _fail(where, f"must be {'above 0' if positive else f'at least {minimum:g}'}, not {value!r}")
    return value


def _url(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _fail(where, f"must be a string, not {value!r}")
    if (problem := upstream_url_problem(value, "name the key's variable in api_key_env")) is not None:
        raise _fail(where, problem)
    return value


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise _fail(where, "must be a non-empty list of model names")
    for name in value:
        if not isinstance(name, str) or not name.strip():
            raise _fail(where, f"must hold model names (strings), not {name!r}")
    return tuple(value)


def _upstream(table: Any, where: str, environ: dict[str, str]) -> UpstreamEntry:
    if not isinstance(table, dict):
        raise _fail(where, "must be a table ([[upstream]])")
    unknown = sorted(set(table) - _UPSTREAM_KEYS)
    if unknown:
        raise _fail(f"{where}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(_UPSTREAM_KEYS))})")
    if "url" not in table:
        raise _fail(f"{where}.url", "missing: each upstream needs its URL")
    values: dict[str, Any] = {"url": _url(table["url"], f"{where}.url")}
    if "kind" in table:
        if table["kind"] not in UPSTREAM_KINDS:
            raise _fail(f"{where}.kind", f"must be one of {', '.join(UPSTREAM_KINDS)}, not {table['kind']!r}")
        values["kind"] = table["kind"]
    if "api_key_env" in table:
        name = table["api_key_env"]
        if not isinstance(name, str) or not name:
            raise _fail(f"{where}.api_key_env", f"must name an environment variable, not {name!r}")
        key = environ.get(name)
        if not key:
            raise _fail(f"{where}.api_key_env", f"the environment variable {name} is not set")
        values["api_key_env"], values["api_key"] = name, key
    if "models" in table:
        values["models"] = _names(table["models"], f"{where}.models")
    if "weight" in table:
        values["weight"] = float(_number(table["weight"], f"{where}.weight"))
    if "max_concurrency" in table:
        limit = table["max_concurrency"]
        values["max_concurrency"] = _number(limit, f"{where}.max_concurrency", integer=True, minimum=1)
    if "max_queue" in table:
        values["max_queue"] = _number(table["max_queue"], f"{where}.max_queue", integer=True)
    values["native"] = _native(table, where)
    return UpstreamEntry(**values)


def _native(table: dict[str, Any], where: str) -> dict[str, NativeMode]:
    modes: dict[str, NativeMode] = {}
    for name in sorted(_NATIVE_KEYS & set(table)):
        mode = table[name]
        if mode not in NATIVE_MODES:
            raise _fail(f"{where}.{name}", f"must be one of {', '.join(NATIVE_MODES)}, not {mode!r}")
        modes[name] = mode
    return modes


def _options(table: Any) -> RoutingOptions:
    if not isinstance(table, dict):
        raise _fail("routing", "must be a table ([routing])")
    unknown = sorted(set(table) - _ROUTING_KEYS)
    if unknown:
        raise _fail(f"routing.{unknown[0]}", f"unknown key (known: {', '.join(sorted(_ROUTING_KEYS))})")
    values: dict[str, Any] = {}
    for name in ("health_interval", "eject_cooldown"):
        if name in table:
            values[name] = float(_number(table[name], f"routing.{name}"))
    for name in ("prefix_chars", "affinity_slack"):
        if name in table:
            values[name] = _number(table[name], f"routing.{name}", integer=True)
    return RoutingOptions(**values)


def parse_routing(document: dict[str, Any], environ: dict[str, str] | None = None) -> RoutingFile:
    """The routes of a parsed TOML document (``environ``: where keys are read; the process's own)."""
    environ = dict(os.environ) if environ is None else environ
    unknown = sorted(set(document) - {"upstream", "aliases", "routing"})
    if unknown:
        raise _fail(unknown[0], "unknown key (known: upstream, aliases, routing)")
    tables = document.get("upstream")
    if tables is not None and not isinstance(tables, list):
        raise _fail("upstream", f"must be [[upstream]] tables, not {tables!r}")
    if not tables:
        raise _fail("upstream", "missing: give at least one [[upstream]] table with url and models")
    upstreams = tuple(_upstream(t, f"upstream[{i}]", environ) for i, t in enumerate(tables))
    _once_each(upstreams)
    aliases = document.get("aliases", {})
    if not isinstance(aliases, dict):
        raise _fail("aliases", "must be a table of alias = model name")
    known = {name for entry in upstreams for name in entry.models or ()}
    discovered = any(entry.models is None for entry in upstreams)
    for alias, model in aliases.items():
        if not isinstance(model, str) or not model:
            raise _fail(f"aliases.{alias}", f"must be a model name, not {model!r}")
        if model not in known and not discovered:
            raise _fail(f"aliases.{alias}", f"names {model!r}, which no upstream serves")
        if alias in known:
            raise _fail(f"aliases.{alias}", "is also a model an upstream serves")
    return RoutingFile(upstreams, dict(aliases), _options(document.get("routing", {})))


def _once_each(upstreams: tuple[UpstreamEntry, ...]) -> None:
    """One table per server: two for one (``.../v1`` and ``...``) were two sets of limits on it, shown
    in ``/metrics`` as one upstream whose counts were either's."""
    seen: dict[str, int] = {}
    for index, entry in enumerate(upstreams):
        first = seen.setdefault(base_of(entry.url), index)
        if first != index:
            raise _fail(
                f"upstream[{index}].url", f"names the server upstream[{first}] names; give it one table"
            )


def load_routing_file(path: str | Path, environ: dict[str, str] | None = None) -> RoutingFile:
    """The routes ``path`` holds; a ConfigFileError of one line (``FILE: KEY: PROBLEM``) if none."""
    name = str(path)
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise ConfigFileError(f"{name}: cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"{name}: not TOML: {exc}") from None
    except UnicodeDecodeError as exc:  # (TOML is UTF-8 text: a traceback at start, and on SIGHUP)
        raise ConfigFileError(f"{name}: not TOML: not UTF-8 text (byte {exc.start})") from None
    try:
        return parse_routing(document, environ)
    except ConfigFileError as exc:
        raise ConfigFileError(f"{name}: {exc}") from None
