"""What the Responses routes need of a response store, whichever database holds it.

One SQLite file (store.py) serves the ``--workers`` of one machine; several ``conformant serve``
processes behind a load balancer need one database they all reach, PostgreSQL (store_postgres.py;
issue 38, point 5). The routes, ``previous_response_id`` and the servers' start-up call only what this
protocol names, so that ``store_of`` (store_settings.py) can hand them either, chosen by the setting's
value; the two implementations share only store.py's types and its encoding of an entry, as httpx's
transports share their models.

The setting's value is a path or a URL, and a URL may hold a password: what is printed of it (a
start-up error, a log line) is ``redacted_url``'s, never the value itself.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..spooled_text import SpooledJSON
from .store import StoredResponse

__all__ = ["POSTGRES_SCHEMES", "Store", "is_postgres_url", "passwords_in", "redacted_url"]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""The two schemes libpq takes for a connection URI."""

_SECRET_PARAMETERS = ("password", "sslpassword")
"""libpq's URI parameters that hold a secret (``?password=...`` is as valid as ``user:password@``)."""


class Store(Protocol):
    """A store of Responses for one owner (``owner_of`` the server's API key), bounded by age and bytes.

    Every method but ``open_now`` leaves the event loop free while the database works, and raises
    ``StoreUnavailable`` (its message safe for a client) when the database fails."""

    redact: Callable[[str], str]
    """What is read passes through it (the proxy cuts its upstream keys out of stored answers)."""

    @property
    def location(self) -> str:
        """What names this store to another process: a worker opens the store of this text. It may
        hold a password: never print it."""
        ...

    async def save(self, response: Mapping[str, Any] | SpooledJSON, input_items: Sequence[Any]) -> bool:
        """Store ``response`` with the input it came from; False when it alone exceeds the byte bound."""
        ...

    async def load(self, response_id: str, most: int | None = None) -> StoredResponse | None:
        """The owner's stored response, or None (never stored, another owner's, deleted, evicted, expired);
        ``StoredTooLarge`` for one of more than ``most`` bytes, found before it is read."""
        ...

    async def delete(self, response_id: str) -> bool:
        """Forget the owner's response; False if there was none to forget."""
        ...

    async def aclose(self) -> None: ...

    def open_now(self) -> None:
        """Open (and create) the store in the calling thread, at a server's start, so that a store that
        cannot be opened is one line then, not an error on every request."""
        ...


def is_postgres_url(value: str) -> bool:
    """Whether the setting names a PostgreSQL database (else it is a SQLite file's path)."""
    return value.lower().startswith(POSTGRES_SCHEMES)


def redacted_url(url: str) -> str:
    """``url`` as it may be printed: its password, in the user part or a parameter, as ``***``."""
    scheme, user, at, place, question, parameters = _parts(url)
    if ":" in user:
        user = user.split(":", 1)[0] + ":***"
    shown = "&".join(
        f"{field.partition('=')[0]}=***" if field.partition("=")[0].lower() in _SECRET_PARAMETERS else field
        for field in parameters.split("&")
    )
    return f"{scheme}://{user}{at}{place}{question}{shown}"


def passwords_in(url: str) -> list[str]:
    """Every password ``url`` holds, as written and decoded: what must be cut out of a driver's
    message before it is logged (libpq quotes a URL it cannot parse whole)."""
    _, user, _, _, _, parameters = _parts(url)
    found = [user.split(":", 1)[1]] if ":" in user else []
    found += [
        value
        for name, _, value in (field.partition("=") for field in parameters.split("&"))
        if name.lower() in _SECRET_PARAMETERS
    ]
    forms = {form for text in found if text for form in (text, urllib.parse.unquote(text))}
    return sorted(forms, key=len, reverse=True)  # the longest first: one may contain another


def _parts(url: str) -> tuple[str, str, str, str, str, str]:
    """Scheme, user part, "@", hosts and database, "?", parameters: split by hand, not by urlsplit,
    which fails on a malformed host and cuts at a "#" or "?" in a password left unencoded (libpq
    fails on those too, and its message quotes them). The user part ends at the last "@": a "@" in a
    parameter's value hides more than the password, never less."""
    scheme, _, rest = url.partition("://")
    user, at, rest = rest.rpartition("@")
    place, question, parameters = rest.partition("?")
    return scheme, user, at, place, question, parameters
