"""Settings tables: a command's flags, ``CONFORMANT_*`` variables, casts, defaults and help, written once.

As in starlette's ``config.py``, where one call names a variable, its cast and its default, a
:class:`Setting` holds everything about one setting, and the rest is derived from the table:
:func:`add_settings` adds the argparse flags, each with its help, its default and its variable shown in
``--help``; the variable's text becomes the flag's default *text*, which argparse casts only when that
command runs (a bad variable is one usage line, exit 2, for its command and no concern of the others);
the command's config object takes its defaults from the same table (``proxy/config.py``,
``backend/config.py``), and the docs' flag tables are checked against it (tests/test_settings_docs.py).
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

__all__ = [
    "PREFIX",
    "CommandError",
    "Setting",
    "add_settings",
    "boolean",
    "check_can_listen",
    "comma_list",
    "flag_type",
    "integer",
    "non_negative_integer",
    "non_negative_number",
    "one_of",
    "port",
    "positive_integer",
    "positive_number",
    "shown_default",
    "text",
    "variable",
]


class CommandError(Exception):
    """A failure to report as one line on stderr with exit status 2 (bad invocation, a bad setting,
    unreadable input): what every ``conformant`` command raises for its user's mistakes."""


T = TypeVar("T")
PREFIX = "CONFORMANT_"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def check_can_listen(host: str, port: int) -> None:
    """A ``CommandError`` now, in one line, where the address is taken (uvicorn would log its own error
    and exit 1, or 3 for ``replay-server``, after the command said it was listening)."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(addresses[0][0], socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(addresses[0][4])
    except OSError as exc:
        raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def variable(name: str) -> str:
    """The environment variable of a setting: ``API_KEY`` is ``CONFORMANT_API_KEY``."""
    return PREFIX + name


# --- casts: text (a flag's value or a variable's) to a value; a ValueError says what the text is not ----


def text(value: str) -> str:
    return value


def _number(kind: type[int] | type[float], value: str) -> int | float:
    try:
        return kind(value)
    except ValueError:
        raise ValueError("is not " + ("an integer" if kind is int else "a number")) from None


def integer(value: str) -> int:
    return int(_number(int, value))


def _bounded(kind: type[int] | type[float], value: str, zero: bool) -> int | float:
    number = _number(kind, value)
    if not (number >= 0 if zero else number > 0):  # NaN fails both comparisons
        qualifier = "non-negative " if zero else "positive "
        raise ValueError("is not a " + qualifier + ("integer" if kind is int else "number"))
    return number


def positive_integer(value: str) -> int:
    return int(_bounded(int, value, zero=False))


def positive_number(value: str) -> float:
    return float(_bounded(float, value, zero=False))


def non_negative_integer(value: str) -> int:
    return int(_bounded(int, value, zero=True))


def non_negative_number(value: str) -> float:
    return float(_bounded(float, value, zero=True))


def port(value: str) -> int:
    number = positive_integer(value)
    if number > 65535:
        raise ValueError("is not a TCP port, 1-65535")
    return number


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    """One of ``choices``, case aside (argparse checks ``choices`` on flags only, not on defaults)."""

    def cast(value: str) -> str:
        if value.lower() not in choices:
            raise ValueError(f"is not one of {', '.join(choices)}")
        return value.lower()

    return cast


def boolean(value: str) -> bool:
    """A variable's yes (1, true, yes, on) or no (0, false, no, off, empty)."""
    if value.strip().lower() not in _TRUE + _FALSE:
        raise ValueError("is neither a yes (1, true) nor a no (0, false)")
    return value.strip().lower() in _TRUE


def comma_list(value: str) -> tuple[str, ...]:
    """Comma-separated items, spaces around them allowed, empty ones dropped."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


# --- the table's row -------------------------------------------------------------------------------------


# Not slots: typing sets ``__orig_class__`` on an instance of Setting[X](...); frozen refuses it quietly.
@dataclass(frozen=True)
class Setting(Generic[T]):
    """One setting. ``kind``: ``value`` (a flag with one value), ``switch`` (a flag without a value; its
    variable a yes or a no) or ``list`` (a repeatable flag; its variable a comma-separated list, which
    the flags replace)."""

    name: str
    """The attribute on argparse's namespace and on the config object: ``max_body``."""
    cast: Callable[[str], T]
    default: T
    help: str
    flag: str = ""
    """Default: ``--`` and the name with dashes, ``--max-body``."""
    env: str = ""
    """The variable after the prefix; default: the name in capitals, ``MAX_BODY``."""
    aliases: tuple[str, ...] = ()
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    shown: str | None = None
    """The default as ``--help`` and the docs give it, where the value alone says too little."""
    unit: str = ""
    """Shown after the default: ``s`` for seconds."""
    kind: Literal["value", "switch", "list"] = "value"

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def variable(self) -> str:
        return variable(self.env or self.name.upper())


def shown_default(setting: Setting[Any]) -> str:
    """The default in words: ``shown``, else the value (``10 s`` for 10.0 seconds, ``none``, ``off``)."""
    if setting.shown is not None:
        return setting.shown
    value = setting.default
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value} {setting.unit}" if setting.unit else str(value)


def flag_type(cast: Callable[[str], T]) -> Callable[[str], T]:
    """``cast`` (one of the casts above) as a plain flag's argparse type: its ValueError the usage
    error, in the words the settings' flags use (``'0' is not a positive integer``)."""

    def parse(value: str) -> T:
        try:
            return cast(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{value!r} {exc}") from None

    parse.__name__ = cast.__name__
    return parse


def _argparse_type(setting: Setting[Any]) -> Callable[[str], Any]:
    """The cast, its ValueError as argparse's usage error naming the flag's variable too."""

    def parse(value: str) -> Any:
        try:
            return setting.cast(value)
        except ValueError as exc:
            if setting.kind == "switch":  # a switch's text can only come from its variable
                raise argparse.ArgumentTypeError(f"{setting.variable}={value!r} {exc}") from None
            raise argparse.ArgumentTypeError(
                f"{value!r} {exc} (from the flag or {setting.variable})"
            ) from None

    parse.__name__ = setting.name  # argparse names the type in some of its messages
    return parse


class _Switch(argparse.Action):
    """``store_true`` with a ``type``, so that argparse casts the variable's text given as the default."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, True)


class _Items(argparse.Action):
    """A repeatable flag whose values replace the variable's list (the default) instead of adding to it."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None) -> None:
        current = getattr(namespace, self.dest)
        before = () if current is self.default or not isinstance(current, tuple) else current
        setattr(namespace, self.dest, before + tuple(values))


def add_settings(
    parser: argparse.ArgumentParser | Any,
    settings: Iterable[Setting[Any]],
    environ: Mapping[str, str] = os.environ,
) -> None:
    """Add a flag for each setting to ``parser`` (or an argument group), its default the variable's text
    when set (cast by argparse when the command runs), else the table's default."""
    for setting in settings:
        help_text = f"{setting.help} (default: {shown_default(setting)}; {setting.variable})"
        options: dict[str, Any] = {
            "dest": setting.name,
            "default": environ.get(setting.variable, setting.default),
            "type": _argparse_type(setting),
            "help": help_text.replace("%", "%%"),
        }
        if setting.kind == "switch":
            options["action"] = _Switch
        else:
            options["metavar"] = setting.metavar
            if setting.kind == "list":
                options["action"] = _Items
            if setting.choices is not None:
                options["choices"] = setting.choices
        parser.add_argument(setting.option, *setting.aliases, **options)
