"""The response store's settings, one table row each, in ``serve``'s table and the backend's alike."""

from __future__ import annotations

import sys
from typing import Any

from conformance.settings import CommandError, Setting, positive_integer, positive_number, text

from .store import ResponseStore, StoreUnavailable, default_store_path, owner_of

__all__ = ["RESPONSES_STORE_SETTINGS", "default_store", "opened_store", "store_of"]

RESPONSES_STORE = Setting[str | None](
    "responses_store",
    text,
    None,
    "SQLite file of the stored /v1/responses (store, previous_response_id), one for every worker",
    metavar="PATH",
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


def store_of(config: Any) -> ResponseStore:
    """The store a config object (with the three settings as attributes) names; nothing opened yet."""
    return ResponseStore(
        config.responses_store or default_store_path(),
        max_bytes=config.responses_store_max_bytes,
        max_age=config.responses_store_max_age,
        owner=owner_of(getattr(config, "api_key", None)),
    )


def default_store() -> ResponseStore:
    """The store of the three settings' defaults."""
    return ResponseStore(
        default_store_path(),
        max_bytes=RESPONSES_STORE_MAX_BYTES.default,
        max_age=RESPONSES_STORE_MAX_AGE.default,
    )


def opened_store(config: Any, command: str) -> ResponseStore:
    """The store ``config`` names, its file opened (created) now, at a server's start, so that every
    worker opens the same one. A path given (``--responses-store`` or its variable) that cannot hold
    it stops the command with one line (``CommandError``); the default one that cannot (a read-only
    home) is a warning line, and the server runs on: stored responses then say ``"store": false``
    and a continuation is a 503, while every other route works as before."""
    store = store_of(config)
    try:
        store.open_now()
    except StoreUnavailable as exc:
        if config.responses_store:
            raise CommandError(f"--responses-store {config.responses_store}: {exc}") from None
        print(
            f"conformant {command}: {exc} ({store.path}); /v1/responses will store nothing "
            "(give --responses-store a writable path)",
            file=sys.stderr,
            flush=True,
        )
    return store
