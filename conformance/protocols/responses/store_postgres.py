"""Stored Responses in PostgreSQL: one store that several ``conformant serve`` processes share, on one
machine or many behind a load balancer (issue 38, point 5).

A SQLite file (store.py) is shared by the workers of one machine only. Behind a load balancer, the
request that continues a conversation (``previous_response_id``), reads it (``GET``) or deletes it
may reach another machine than the one that stored it; every server then names one database with
``--responses-store postgresql://...``. The store keeps what the SQLite one keeps, with the same
bounds and the same answers (store.py's docstring): each entry is the Response as the client got it
and the whole input it came from, owned by the API key of the server that stored it (another key's
server finds nothing); an entry older than ``max_age`` reads as missing and is deleted by the next
write; past ``max_bytes`` the oldest entries go first; one larger than ``max_bytes`` by itself is not
stored, and the Response says ``"store": false``.

Why it is built so:

- psycopg 3's blocking calls run on a few threads of the store's own, one connection each, as the
  SQLite store runs its calls on its thread: the event loop never waits on the database, several
  requests of one process use it at once, and the store works from any event loop.
- The byte total is one row, kept by triggers on the entries' table (statement triggers over the
  inserted or deleted rows), so it is right however rows go, a hand-made ``DELETE`` included.
- Every writing transaction locks that row first (``SELECT ... FOR UPDATE``): writers of every server
  take turns, as ``BEGIN IMMEDIATE`` makes SQLite's do, so the total each one reads is final, and two
  never deadlock (one holding an entry the other's eviction deletes, while it waits for the total).
- A long stream's Response, its texts in files (protocols/spooled_text.py), goes to the database by
  ``COPY ... FROM STDIN``, its JSON a piece at a time escaped for COPY's text format, never whole in the
  proxy: sent as one parameter, 200 MiB of answer (225 MiB of JSON) took the proxy from 71 MB to a peak
  RSS of 747 MB, by COPY to 72 MB (bench/hostile_load.py, ``run_long_stream_postgres``). COPY has no
  ``ON CONFLICT``: the id is looked for first, under that lock. A Response already in memory keeps
  its ``INSERT``: one round trip, where the look-up and COPY take three.
- "Oldest" is the order entries were stored in, a sequence taken under that lock, not the clock of
  whichever server wrote them: machines' clocks differ; ages (``max_age``) are long enough for that.
- The database's errors become ``StoreUnavailable`` in one place (``_failures``), in words of this
  module's own: a driver's message may name the host, a socket's path or the whole URL (libpq quotes a
  URL it cannot parse), and the message may reach a client. What is logged has the password cut out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow

from ..spooled_text import SpooledJSON
from .store import (
    BUSY_TIMEOUT,
    EncodedEntry,
    StoredResponse,
    StoredTooLarge,
    StoreUnavailable,
    decoded_entry,
    encoded_entry,
)
from .store_base import passwords_in, redacted_url

__all__ = ["PostgresResponseStore"]

log = logging.getLogger("conformant.responses")
T = TypeVar("T")
Connection = psycopg.Connection[TupleRow]

CONNECTIONS = 4
"""Threads, each with its connection, per process: requests that store or load at once."""

STATEMENT_TIMEOUT = 60.0
"""Seconds one statement may take (a 64 MiB entry took 1.4 s to write, 0.6 s to read, on a 2-core
machine): a database that stopped answering fails the request instead of holding it for ever."""

_CONNECTION_DEFAULTS = {
    # What the URL does not set itself. libpq waits for ever to connect by default, and notices a
    # peer that vanished only after the system's two hours of keepalive silence.
    "connect_timeout": "10",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "application_name": "conformant",
}

_SCHEMA_LOCK = 0x636F6E66_6F726D74
"""The advisory lock under which one server creates the tables, while the others starting wait."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conformant_responses (
    id TEXT PRIMARY KEY,
    seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    stored_at DOUBLE PRECISION NOT NULL,
    size BIGINT NOT NULL,
    owner TEXT NOT NULL,
    response TEXT NOT NULL,
    input TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS conformant_responses_by_age ON conformant_responses (stored_at);
CREATE TABLE IF NOT EXISTS conformant_responses_total (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    bytes BIGINT NOT NULL
);
INSERT INTO conformant_responses_total VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE OR REPLACE FUNCTION conformant_responses_counted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    change BIGINT;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT COALESCE(SUM(size), 0) INTO change FROM added;
    ELSE
        SELECT -COALESCE(SUM(size), 0) INTO change FROM removed;
    END IF;
    IF change <> 0 THEN  -- a write that changed nothing leaves the row (and its lock) alone
        UPDATE conformant_responses_total SET bytes = bytes + change;
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS conformant_responses_counted_in ON conformant_responses;
CREATE TRIGGER conformant_responses_counted_in AFTER INSERT ON conformant_responses
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION conformant_responses_counted();
DROP TRIGGER IF EXISTS conformant_responses_counted_out ON conformant_responses;
CREATE TRIGGER conformant_responses_counted_out AFTER DELETE ON conformant_responses
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION conformant_responses_counted();
"""

_LOCK_TOTAL = "SELECT bytes FROM conformant_responses_total WHERE one = 1 FOR UPDATE"
_EXPIRE = "DELETE FROM conformant_responses WHERE stored_at < %s"
_INSERT = (
    "INSERT INTO conformant_responses (id, stored_at, size, owner, response, input) "
    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING"
)
_EXISTS = "SELECT 1 FROM conformant_responses WHERE id = %s"
# One row in COPY's text format, the Response last: its JSON follows the other fields a piece at a time.
# The encoding is named: the pieces are UTF-8 whatever the connection's client_encoding.
_COPY = (
    "COPY conformant_responses (id, stored_at, size, owner, input, response) "
    "FROM STDIN WITH (FORMAT text, ENCODING 'UTF8')"
)
_TOTAL = "SELECT bytes FROM conformant_responses_total WHERE one = 1"
# The oldest entries whose sizes add up to the excess: the running sum stops at the first entry that
# reaches it (the window is computed along the sequence's index, and LIMIT ends the scan there).
_EVICT = """
DELETE FROM conformant_responses WHERE seq <= (
    SELECT seq FROM (
        SELECT seq, SUM(size) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS freed
        FROM conformant_responses
    ) AS oldest
    WHERE freed >= %s ORDER BY seq LIMIT 1
)
"""
_SELECT = "SELECT response, input FROM conformant_responses WHERE id = %s AND owner = %s AND stored_at >= %s"
_SIZE = "SELECT size FROM conformant_responses WHERE id = %s AND owner = %s AND stored_at >= %s"
_DELETE = "DELETE FROM conformant_responses WHERE id = %s AND owner = %s AND stored_at >= %s"

_REASONS_BY_STATE = (
    # SQLSTATE prefixes (PostgreSQL's appendix A), most specific first.
    ("28", "the database refused the credentials"),
    ("3D", "the database does not exist"),
    ("42501", "the database user lacks a permission the store needs"),
    ("55P03", "the database timed out"),
    ("57014", "the database timed out"),
    ("53", "the database server is out of disk, memory or connections"),
    ("08", "the database server cannot be reached"),
    ("40", "the database aborted the write for a conflicting one"),
    ("57P", "the database server is shutting down"),
)
_REASONS_BY_TEXT = (
    # A connection refused at its start carries libpq's text alone, no SQLSTATE.
    ("authentication failed", "the database refused the credentials"),
    ("no password supplied", "the database refused the credentials"),
    ('role "', "the database refused the credentials"),
    ('database "', "the database does not exist"),
)


class _InvalidURL(psycopg.InterfaceError):
    """The URL libpq cannot parse (its own message quotes the URL whole, password and all)."""


class PostgresResponseStore:
    """The stored responses of one PostgreSQL database (store_base.Store); every method but
    ``open_now`` runs its database work on the store's own threads."""

    def __init__(self, url: str, *, max_bytes: int, max_age: float, owner: str = "") -> None:
        self._url = url
        self.shown = redacted_url(url)
        """The URL as it may be printed: without its password."""
        self.owner = owner
        """Whose responses this store reads and writes (``owner_of`` the server's API key)."""
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.redact: Callable[[str], str] = str
        """What is read passes through it, as in the SQLite store (``FrontEnd.redact_stored``)."""
        self._secrets = passwords_in(url)
        self._threads = ThreadPoolExecutor(max_workers=CONNECTIONS, thread_name_prefix="responses-store")
        self._local = threading.local()
        self._open: set[Connection] = set()
        self._open_lock = threading.Lock()

    @property
    def location(self) -> str:
        """The URL as given, password included, for the workers ``serve`` starts: never print it."""
        return self._url

    # --- the asynchronous interface ------------------------------------------------------------------

    async def save(self, response: Mapping[str, Any] | SpooledJSON, input_items: Sequence[Any]) -> bool:
        """Store ``response`` (its ``id`` is the key) with the input it was generated from; False when
        the entry alone is larger than ``max_bytes`` and was not stored. Encoded on the store's thread,
        as the SQLite store does: a long conversation's JSON takes the encoder tens of milliseconds."""
        items = list(input_items)
        return await self._run(lambda connection: self._store(connection, response, items))

    async def load(self, response_id: str, most: int | None = None) -> StoredResponse | None:
        """The stored response, or None if there is none (never stored, another key's, deleted,
        evicted or too old); ``StoredTooLarge`` for one of more than ``most`` bytes, before it is read."""
        return await self._run(lambda connection: self._load(connection, response_id, most))

    async def delete(self, response_id: str) -> bool:
        """Forget a response; False if there was none to forget."""
        return await self._run(lambda connection: self._remove(connection, response_id))

    async def aclose(self) -> None:
        await asyncio.to_thread(self._close_all)

    def open_now(self) -> None:
        """Connect and create the tables in the calling thread (``serve``'s start-up, before any worker
        runs), so that a database that cannot be reached is one line at the start."""
        with self._failures("cannot be opened"):
            self._connect().close()

    # --- on the store's threads ----------------------------------------------------------------------

    async def _run(self, work: Callable[[Connection], T]) -> T:
        def call() -> T:
            with self._failures("failed"):
                kept: Connection | None = getattr(self._local, "connection", None)
                if kept is not None:
                    try:
                        return self._attempt(work, kept)
                    except psycopg.OperationalError:
                        if not kept.broken:
                            raise
                        # It died while idle (the server restarted, a failover, a pooler's idle
                        # timeout): once more on a new one, not a failure for each of the threads'
                        # connections in turn. Every write is one transaction: none is half done.
                return self._attempt(work, self._new_connection())

        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    def _attempt(self, work: Callable[[Connection], T], connection: Connection) -> T:
        try:
            return work(connection)
        finally:
            if connection.broken or connection.closed:  # this thread's next call connects again
                self._forget(connection)

    @contextlib.contextmanager
    def _failures(self, doing: str) -> Iterator[None]:
        """The one place where the database's errors become ``StoreUnavailable``: logged without the
        password, told in words that name no host, path or URL."""
        try:
            yield
        except psycopg.Error as exc:
            log.warning("responses store %s: %s", self.shown, self._scrubbed(str(exc)))
            raise StoreUnavailable(f"the response store {doing}: {_reason(exc)}") from None

    def _scrubbed(self, text: str) -> str:
        text = text.replace(self._url, self.shown)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return " ".join(text.split())  # libpq's hints are on lines of their own: one log line

    def _new_connection(self) -> Connection:
        """A connection for this thread, kept for its next calls."""
        connection = self._connect()
        self._local.connection = connection
        with self._open_lock:
            self._open.add(connection)
        return connection

    def _connect(self) -> Connection:
        try:
            given = conninfo_to_dict(self._url)
        except psycopg.ProgrammingError as exc:
            raise _InvalidURL(str(exc)) from None  # (its text is logged scrubbed, never told a client)
        defaults = {name: value for name, value in _CONNECTION_DEFAULTS.items() if name not in given}
        conninfo = make_conninfo(self._url, **defaults)
        # No server-side prepared statements: a pooler in transaction mode (PgBouncer's usual
        # set-up in front of several servers) hands each transaction another session, without them.
        connection = psycopg.connect(conninfo, autocommit=True, prepare_threshold=None)
        try:
            # A writer waits for another's lock as long as a SQLite worker waits for the file's.
            connection.execute(
                "SELECT set_config('lock_timeout', %s, false), set_config('statement_timeout', %s, false)",
                (f"{int(BUSY_TIMEOUT * 1000)}", f"{int(STATEMENT_TIMEOUT * 1000)}"),
            )
            _create_tables(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _forget(self, connection: Connection) -> None:
        self._local.connection = None
        with self._open_lock:
            self._open.discard(connection)
        connection.close()

    def _close_all(self) -> None:
        self._threads.shutdown(wait=True)
        with self._open_lock:
            connections, self._open = self._open, set()
        for connection in connections:
            connection.close()

    def _store(
        self, connection: Connection, response: Mapping[str, Any] | SpooledJSON, items: list[Any]
    ) -> bool:
        entry = encoded_entry(response, items, self.max_bytes)
        if entry is None:
            return False
        now = time.time()
        with connection.transaction():
            connection.execute(_LOCK_TOTAL)  # writers take turns (the module's docstring)
            connection.execute(_EXPIRE, (now - self.max_age,))
            self._insert(connection, entry, now)
            row = connection.execute(_TOTAL).fetchone()
            total = int(row[0]) if row else 0
            if total > self.max_bytes:
                connection.execute(_EVICT, (total - self.max_bytes,))
        return True

    def _insert(self, connection: Connection, entry: EncodedEntry, now: float) -> None:
        """The entry's row: a Response already in memory as one parameter (one round trip); a spooled
        one by ``COPY``, its JSON a piece at a time out of its files (the module's docstring)."""
        if isinstance(entry.response, str):
            connection.execute(_INSERT, (entry.key, now, entry.size, self.owner, entry.response, entry.items))
            return
        # COPY has no ON CONFLICT: a stored id is looked for first, as the INSERT's DO NOTHING would
        # leave it. No other store writes between the two: every writer holds the total's row lock.
        if connection.execute(_EXISTS, (entry.key,)).fetchone() is not None:
            return
        fields = (entry.key, repr(now), str(entry.size), self.owner, entry.items)
        with connection.cursor() as cursor, cursor.copy(_COPY) as copy:
            copy.write(b"\t".join(_copy_escaped(field.encode()) for field in fields) + b"\t")
            for piece in entry.response.pieces():
                copy.write(_copy_escaped(piece))  # (psycopg sends it on: it keeps no copy of its own)
            copy.write(b"\n")

    def _load(self, connection: Connection, response_id: str, most: int | None) -> StoredResponse | None:
        where = (response_id, self.owner, time.time() - self.max_age)
        if most is not None:
            sized = connection.execute(_SIZE, where).fetchone()
            if sized is not None and sized[0] > most:
                raise StoredTooLarge(sized[0])
        row = connection.execute(_SELECT, where).fetchone()
        return None if row is None else decoded_entry(row[0], row[1], self.redact)

    def _remove(self, connection: Connection, response_id: str) -> bool:
        with connection.transaction():
            connection.execute(_LOCK_TOTAL)  # before the row: the trigger's update would take it after
            cursor = connection.execute(_DELETE, (response_id, self.owner, time.time() - self.max_age))
            return cursor.rowcount > 0


def _copy_escaped(data: bytes) -> bytes:
    """``data`` as one field of COPY's text format: the backslash, and the line ends and tab that end a
    field or a row, escaped. Each is one byte that no other UTF-8 character's bytes contain, so pieces
    escaped one by one join into the whole text escaped; compact JSON has no raw line end or tab, so
    only its backslashes are doubled in practice."""
    return data.replace(b"\\", b"\\\\").replace(b"\n", b"\\n").replace(b"\r", b"\\r").replace(b"\t", b"\\t")


def _create_tables(connection: Connection) -> None:
    """The tables, index and triggers, made once per database: under an advisory lock, so that servers
    starting together do not race to create them, and checked first, so that a connection to a
    database that has them takes no lock at all."""
    if _has_tables(connection):
        return
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        if not _has_tables(connection):
            connection.execute(_SCHEMA)


def _has_tables(connection: Connection) -> bool:
    row = connection.execute("SELECT to_regclass('conformant_responses_total') IS NOT NULL").fetchone()
    return bool(row and row[0])


def _reason(exc: psycopg.Error) -> str:
    """What went wrong, in words that are safe for a client: the SQLSTATE's class, or for a connection
    refused at its start (no SQLSTATE) what libpq's text says it was; never the text itself."""
    if isinstance(exc, _InvalidURL):
        return "the URL is not a valid PostgreSQL URL"
    state = exc.sqlstate or ""
    for prefix, reason in _REASONS_BY_STATE:
        if state.startswith(prefix):
            return reason
    if state:
        return f"the database failed (SQLSTATE {state})"
    if isinstance(exc, psycopg.OperationalError):
        text = str(exc)
        for marker, reason in _REASONS_BY_TEXT:
            if marker in text:
                return reason
        return "the database server cannot be reached"
    return f"the database failed ({type(exc).__name__})"
