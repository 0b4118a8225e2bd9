"""The response store's settings, one table row each, in ``serve``'s table and the backend's alike, and
the store they name: a SQLite file (store.py) for the servers of one machine, or, for a
``postgresql://`` or ``postgres://`` URL, a PostgreSQL database that several servers share behind a
load balancer (store_postgres.py, issue 38, point 5). Its driver is the ``postgres`` extra's, imported
only when a URL names one.
"""

from __future__ import annotations

import sys
from typing import Any

from conformance.settings import CommandError, Setting, positive_integer, positive_number, text

from .store import ResponseStore, StoreUnavailable, default_store_path, owner_of
from .store_base import Store, is_postgres_url, redacted_url

__all__ = ["RESPONSES_STORE_SETTINGS", "default_store", "opened_store", "shown_setting", "store_of"]

RESPONSES_STORE = Setting[str | None](
    "responses_store",
    text,
    None,
    "SQLite file of the stored /v1/responses (store, previous_response_id), one for every worker; or a "
    "postgresql:// URL of a database that several servers share",
    metavar="PATH|URL",
    shown="$XDG_STATE_HOME/conformant/responses.sqlite3",
)
RESPONSES_STORE_MAX_BYTES = Setting(
    "responses_store_max_bytes",
    positive_integer,
    256 * 1024 * 1024,
    "bytes of stored responses kept (their JSON); past it the oldest go, and a larger one is not stored",
    shown="256 MiB",
)
RESPONSES_STORE_MAX_AGE = Setting(
    "responses_store_max_age",
    positive_number,
    30 * 24 * 3600.0,
    "seconds a stored response is kept (OpenAI keeps them 30 days)",
    shown="30 days",
)
RESPONSES_STORE_SETTINGS: tuple[Setting[Any], ...] = (
    RESPONSES_STORE,
    RESPONSES_STORE_MAX_BYTES,
    RESPONSES_STORE_MAX_AGE,
)


def store_of(config: Any) -> Store:
    """The store a config object (with the three settings as attributes) names, by the value's form: a
    PostgreSQL URL's database, else a SQLite file; nothing opened yet. A URL without the ``postgres``
    extra installed stops the command with one line that says how to install it (``CommandError``)."""
    given: str | None = config.responses_store
    max_bytes, max_age = config.responses_store_max_bytes, config.responses_store_max_age
    owner = owner_of(getattr(config, "api_key", None))
    if given and is_postgres_url(given):
        return _postgres_store(given, max_bytes=max_bytes, max_age=max_age, owner=owner)
    return ResponseStore(given or default_store_path(), max_bytes=max_bytes, max_age=max_age, owner=owner)


def _postgres_store(url: str, *, max_bytes: int, max_age: float, owner: str) -> Store:
    try:
        from .store_postgres import PostgresResponseStore
    except ImportError as exc:
        if exc.name and not exc.name.startswith("psycopg"):  # not the driver: a bug, to be seen whole
            raise
        raise CommandError(
            "--responses-store: a PostgreSQL URL needs psycopg, which cannot be imported here; install the "
            "postgres extra: pip install 'conformant[postgres]' (in a checkout: pip install '.[postgres]')"
        ) from None
    return PostgresResponseStore(url, max_bytes=max_bytes, max_age=max_age, owner=owner)


def shown_setting(value: str) -> str:
    """The setting's value as it may be printed: a URL without its password, a path as given."""
    return redacted_url(value) if is_postgres_url(value) else value


def default_store() -> ResponseStore:
    """The store of the three settings' defaults."""
    return ResponseStore(
        default_store_path(),
        max_bytes=RESPONSES_STORE_MAX_BYTES.default,
        max_age=RESPONSES_STORE_MAX_AGE.default,
    )


def opened_store(config: Any, command: str) -> Store:
    """The store ``config`` names, its file or database opened (created) now, at a server's start, so
    that every worker opens the same one. A path or URL given (``--responses-store`` or its variable)
    that cannot hold it stops the command with one line (``CommandError``; a URL shown without its
    password); the default one that cannot (a read-only home) is a warning line, and the server runs
    on: stored responses then say ``"store": false`` and a continuation is a 503, while every other
    route works as before."""
    store = store_of(config)
    try:
        store.open_now()
    except StoreUnavailable as exc:
        if config.responses_store:
            raise CommandError(f"--responses-store {shown_setting(config.responses_store)}: {exc}") from None
        print(
            f"conformant {command}: {exc} ({store.location}); /v1/responses will store nothing "
            "(give --responses-store a writable path)",
            file=sys.stderr,
            flush=True,
        )
    return store
