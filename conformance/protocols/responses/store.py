"""Stored Responses: what ``store`` keeps and ``previous_response_id`` continues, in one SQLite file that
every ``--workers`` process shares.

OpenAI keeps a response created with ``store`` (true unless the request says false) for 30 days,
answers it on ``GET /v1/responses/{id}``, forgets it on ``DELETE``, lists the items it was generated
from on ``GET /v1/responses/{id}/input_items``, and continues a conversation from it when a later
request names it in ``previous_response_id``: the stored response's input items, then its output
items, come before the new input, and its ``instructions`` do not carry over (OpenAI's
conversation-state guide; the ``instructions`` field's description in its OpenAPI spec). Each entry here
holds the Response object as the client got it and the whole input it was generated from (a response
that continued another holds that one's items too), so continuing never walks a chain of entries and
survives the eviction of the entries it came from.

One file for all workers, on the standard library's ``sqlite3``: WAL mode, so readers never wait for
the writer; a busy timeout, so workers that write at once take turns instead of failing; a write is
one short transaction (``BEGIN IMMEDIATE``: it takes the write lock first, so two workers never
deadlock upgrading a read). Each process does its SQLite calls on one thread of the store's own, so
the event loop never waits on the file and the connection never changes threads.

Bounded by age and bytes: an entry older than ``max_age`` is gone (read as missing at once, deleted by
the next write); past ``max_bytes`` (the JSON text of every entry, kept as a running total by
triggers), the oldest entries go first. An entry larger than ``max_bytes`` by itself is not stored:
``save`` says so, and the Response the client gets says ``"store": false`` (see docs/responses.md),
as it would for ``store: false``; the file's freed pages are reused, so it does not grow past the
bound and SQLite's overhead.

A streamed Response whose texts went to files (``SpooledJSON``, protocols/spooled_text.py) is counted
and written a piece at a time: its size from the pieces, let go as they are counted, so that one past the
bound is refused without its text in memory; and its JSON written by SQLite's incremental I/O into a
blob of that size, in the column ``spooled`` (``response`` is then empty), read back as text by
``CAST``. That column is the table's last (added last to a file from before it) because SQLite builds
a row whose ``zeroblob`` is not its last field in memory whole: with the blob in ``response``, storing
a 235 MB Response took the process from 37 MB to 502 MB, and to 51 MB with the blob last. Written whole,
a 200 MiB answer took the proxy to a peak RSS of 2.5 GB (bench/hostile_load.py shape 6).

Several ``conformant serve`` processes on different machines share one PostgreSQL database instead
(store_postgres.py, issue 38), with the same interface (store_base.Store) and bounds; it sends a
spooled Response by ``COPY``, a piece at a time as well.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from conformance import jsoncodec

from ..spooled_text import SpooledJSON

__all__ = [
    "ResponseStore",
    "StoreUnavailable",
    "StoredResponse",
    "StoredTooLarge",
    "default_store_path",
    "owner_of",
]

log = logging.getLogger("conformant.responses")
T = TypeVar("T")

BUSY_TIMEOUT = 10.0
"""Seconds a worker waits for another's write before it gives up (a write takes milliseconds)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    stored_at REAL NOT NULL,
    size INTEGER NOT NULL,
    response TEXT NOT NULL,
    input TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    spooled BLOB
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (stored_at);
CREATE TABLE IF NOT EXISTS totals (one INTEGER PRIMARY KEY CHECK (one = 1), bytes INTEGER NOT NULL);
INSERT OR IGNORE INTO totals VALUES (1, 0);
CREATE TRIGGER IF NOT EXISTS counted_in AFTER INSERT ON responses
    BEGIN UPDATE totals SET bytes = bytes + new.size; END;
CREATE TRIGGER IF NOT EXISTS counted_out AFTER DELETE ON responses
    BEGIN UPDATE totals SET bytes = bytes - old.size; END;
"""


class StoreUnavailable(Exception):
    """The file cannot be opened, read or written (a full disk, no permission, another process holding
    the write lock past the busy timeout), or the PostgreSQL database failing (store_postgres.py).
    The message names no path, host or URL: it may reach a client."""


class StoredTooLarge(Exception):
    """A stored response larger than the caller can take (``load``'s ``most``), found by its recorded
    size alone: a continuation of a 235 MB conversation read it whole before refusing it (issue 32)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


@dataclass(frozen=True, slots=True)
class EncodedEntry:
    """A Response and its input as a store keeps them: JSON text, and their size in bytes together."""

    key: str
    """The Response's id."""
    response: str | SpooledJSON
    """Its JSON text, or where its texts went to files, what writes that text in pieces."""
    items: str
    size: int
    response_size: int
    """Bytes of the Response's JSON alone."""


def encoded_entry(
    response: Mapping[str, Any] | SpooledJSON, items: Sequence[Any], max_bytes: int
) -> EncodedEntry | None:
    """What a store writes of a Response and its input; None (and a log line) when it alone exceeds the
    store's byte bound, which then keeps nothing of it. Both stores' one encoding (store_postgres.py).
    A spooled Response is counted a piece at a time, never held whole here."""
    written: str | SpooledJSON
    if isinstance(response, SpooledJSON):
        key, written = response.value.get("id"), response
        response_size = response.size()
    else:
        key, written = response.get("id"), jsoncodec.dumps(response).decode()
        response_size = len(written.encode())
    input_text = jsoncodec.dumps(items).decode()
    size = response_size + len(input_text.encode())
    if size > max_bytes:
        log.warning(
            "response %s not stored: %d bytes, more than the store's bound of %d", key, size, max_bytes
        )
        return None
    return EncodedEntry(str(key), written, input_text, size, response_size)


def decoded_entry(response: str, items: str, redact: Callable[[str], str]) -> StoredResponse:
    """A stored entry as read: its texts through ``redact``, then parsed."""
    response, items = redact(response), redact(items)
    size = len(response.encode()) + len(items.encode())
    return StoredResponse(jsoncodec.loads(response), jsoncodec.loads(items), size)


def owner_of(api_key: str | None) -> str:
    """The owner a server's API key makes of the responses it stores: a digest, so that the file holds
    no key; "" for a server without one."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:32] if api_key else ""


@dataclass(frozen=True, slots=True)
class StoredResponse:
    response: dict[str, Any]
    """The Response object as the client got it."""
    input_items: list[Any]
    """Every input item it was generated from, the continued conversation's included."""
    size: int = 0
    """Bytes of the two as JSON, as stored: what a request continuing it adds to its own body."""

    @property
    def conversation(self) -> list[Any]:
        """What a request continuing it puts before its own input: the input items, then the output."""
        output = self.response.get("output")
        return [*self.input_items, *(output if isinstance(output, list) else [])]


def default_store_path() -> Path:
    """``$XDG_STATE_HOME/conformant/responses.sqlite3`` (``~/.local/state`` without the variable): state
    that outlives a restart, as OpenAI keeps responses 30 days, in the user's own directory, not a
    shared temporary one where another user could create the file first."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "conformant" / "responses.sqlite3"


class ResponseStore:
    """The stored responses of one file; every method but ``open_now`` runs its SQLite work on the
    store's own thread."""

    def __init__(
        self, path: str | os.PathLike[str], *, max_bytes: int, max_age: float, owner: str = ""
    ) -> None:
        self.path = Path(path)
        self.owner = owner
        """Whose responses this store reads and writes (``owner_of`` the server's API key): servers
        of other keys on the same file see none of them (issue 32: with two keys on one store, B could
        read, list, continue and delete A's responses)."""
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.redact: Callable[[str], str] = str
        """What is read passes through it: the proxy cuts its upstream keys out
        (``FrontEnd.redact_stored``). A stored answer holds what an upstream wrote, a key it repeated
        too, and reaches a client again through ``GET /v1/responses/{id}`` and, as conversation,
        another upstream through ``previous_response_id``."""
        self._connection: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="responses-store")

    @property
    def location(self) -> str:
        """The file's path, for the workers ``serve`` starts (store_base.Store)."""
        return str(self.path)

    # --- the asynchronous interface ------------------------------------------------------------------

    async def save(self, response: Mapping[str, Any] | SpooledJSON, input_items: Sequence[Any]) -> bool:
        """Store ``response`` (its ``id`` is the key) with the input it was generated from; False when
        the entry alone is larger than ``max_bytes`` and was not stored. Written as JSON on the store's
        thread too: a conversation of 400,000 items took the stdlib's encoder 0.86 s, all of it on the
        event loop (issue 32); orjson takes 70 ms of that thread."""
        items = list(input_items)
        return await self._run(lambda connection: self._store(connection, response, items))

    async def load(self, response_id: str, most: int | None = None) -> StoredResponse | None:
        """The stored response, or None if there is none (never stored, deleted, evicted or too old);
        ``StoredTooLarge`` for one of more than ``most`` bytes, before it is read."""
        return await self._run(lambda connection: self._load(connection, response_id, most))

    async def delete(self, response_id: str) -> bool:
        """Forget a response; False if there was none to forget."""
        return await self._run(lambda connection: self._remove(connection, response_id))

    async def aclose(self) -> None:
        await self._run(self._close, connect=False)
        self._thread.shutdown(wait=True)

    def open_now(self) -> None:
        """Create or open the file in the calling thread (``serve``'s start-up, before any worker runs),
        so that a path that cannot hold it is one line at the start, not an error on every request."""
        self._close(self._connect())

    # --- on the store's thread -----------------------------------------------------------------------

    async def _run(self, work: Callable[[sqlite3.Connection], T], *, connect: bool = True) -> T:
        def call() -> T:
            if self._connection is None and connect:
                self._connection = self._connect()
            try:
                return work(self._connection)  # type: ignore[arg-type]  # None only when not connecting
            except sqlite3.Error as exc:
                log.warning("responses store %s: %s", self.path, exc)
                raise StoreUnavailable(f"the response store failed: {_reason(exc)}") from None

        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # Created private before SQLite opens it: its -wal and -shm files take the same mode.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            connection = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            log.warning("responses store %s: %s", self.path, exc)
            raise StoreUnavailable(f"the response store cannot be opened: {_reason(exc)}") from None
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            # With WAL, NORMAL syncs at checkpoints only: a power cut may lose the last few entries,
            # never corrupt the file; FULL would sync on every response stored.
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.executescript(_SCHEMA)
            columns = {row[1] for row in connection.execute("PRAGMA table_info(responses)")}
            if "owner" not in columns:  # a file from before responses had owners: theirs are no key's
                connection.execute("ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
            if "spooled" not in columns:  # a file from before spooled Responses: last (the docstring)
                connection.execute("ALTER TABLE responses ADD COLUMN spooled BLOB")
        except sqlite3.Error as exc:
            connection.close()
            log.warning("responses store %s: %s", self.path, exc)
            raise StoreUnavailable(f"the response store cannot be opened: {_reason(exc)}") from None
        return connection

    def _store(
        self, connection: sqlite3.Connection, response: Mapping[str, Any] | SpooledJSON, items: list[Any]
    ) -> bool:
        entry = encoded_entry(response, items, self.max_bytes)
        if entry is None:
            return False
        self._insert(connection, entry)
        return True

    def _load(
        self, connection: sqlite3.Connection, response_id: str, most: int | None
    ) -> StoredResponse | None:
        if most is not None:
            sized = connection.execute(
                "SELECT size FROM responses WHERE id = ? AND owner = ? AND stored_at >= ?",
                (response_id, self.owner, time.time() - self.max_age),
            ).fetchone()
            if sized is not None and sized[0] > most:
                raise StoredTooLarge(sized[0])
        row = self._select(connection, response_id)
        return None if row is None else decoded_entry(row[0], row[1], self.redact)

    def _insert(self, connection: sqlite3.Connection, entry: EncodedEntry) -> None:
        now = time.time()
        spooled = entry.response if isinstance(entry.response, SpooledJSON) else None
        # A spooled Response: a blob of its size in the last column, then its pieces written into it.
        response, blob_size = ("", entry.response_size) if spooled is not None else (entry.response, None)
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.execute("DELETE FROM responses WHERE stored_at < ?", (now - self.max_age,))
            cursor = connection.execute(
                "INSERT INTO responses (id, stored_at, size, response, input, owner, spooled) "
                "VALUES (?, ?, ?, ?, ?, ?, CASE WHEN ? IS NULL THEN NULL ELSE zeroblob(?) END) "
                "ON CONFLICT (id) DO NOTHING",
                (entry.key, now, entry.size, response, entry.items, self.owner, blob_size, blob_size),
            )
            if spooled is not None and cursor.rowcount == 1 and cursor.lastrowid is not None:
                with connection.blobopen("responses", "spooled", cursor.lastrowid) as blob:
                    for piece in spooled.pieces():
                        blob.write(piece)
            (total,) = connection.execute("SELECT bytes FROM totals").fetchone()
            if total > self.max_bytes:
                self._evict_oldest(connection, total - self.max_bytes)
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise

    @staticmethod
    def _evict_oldest(connection: sqlite3.Connection, excess: int) -> None:
        freed = 0
        doomed = []
        for rowid, size in connection.execute("SELECT rowid, size FROM responses ORDER BY stored_at, rowid"):
            doomed.append((rowid,))
            freed += size
            if freed >= excess:
                break
        connection.executemany("DELETE FROM responses WHERE rowid = ?", doomed)

    def _select(self, connection: sqlite3.Connection, key: str) -> tuple[str, str] | None:
        row = connection.execute(
            # (a spooled Response: a blob of its UTF-8 text in ``spooled``, read as text)
            "SELECT CASE WHEN spooled IS NULL THEN response ELSE CAST(spooled AS TEXT) END, input "
            "FROM responses WHERE id = ? AND owner = ? AND stored_at >= ?",
            (key, self.owner, time.time() - self.max_age),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def _remove(self, connection: sqlite3.Connection, key: str) -> bool:
        cursor = connection.execute(
            "DELETE FROM responses WHERE id = ? AND owner = ? AND stored_at >= ?",
            (key, self.owner, time.time() - self.max_age),
        )
        return cursor.rowcount > 0

    def _close(self, connection: sqlite3.Connection | None) -> None:
        if connection is not None:
            connection.close()
        if connection is self._connection:
            self._connection = None


def _reason(exc: BaseException) -> str:
    """What went wrong, without the path (OSError's message names it; SQLite's do not)."""
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc)
