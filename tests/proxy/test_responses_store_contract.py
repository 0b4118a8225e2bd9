"""What every response store does, one test each, run against both: the SQLite file
(conformance/protocols/responses/store.py) and PostgreSQL (store_postgres.py, issue 38 point 5, on a
throwaway server started by the tests). Kept, continued and deleted; each key's own; bounded by age and by
bytes, the oldest going first; an entry over the bound by itself refused. What only one of them does (a
private file, a write lock between processes; COPY of a spooled answer, connections the server ended)
is tested in its own module."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance.protocols.responses import store as store_module
from conformance.protocols.responses.store import ResponseStore, owner_of
from tests.proxy.conftest import psycopg_or_skip
from tests.proxy.stored_responses import DAY, MiB, response, run, user


@dataclass
class StoreKind:
    """One kind of store on storage of its own: how to open a store there (any number, as several
    servers would), and what the storage holds, read around the store."""

    opens: Callable[..., Any]
    rows: Callable[[str], list[tuple[Any, ...]]]
    """The rows a query of the storage returns; ``responses`` and ``totals`` name its tables."""
    responses: str
    totals: str
    opened: list[Any]

    def open(self, *, max_bytes: int = MiB, max_age: float = DAY, key: str | None = None) -> Any:
        store = self.opens(max_bytes=max_bytes, max_age=max_age, owner=owner_of(key))
        self.opened.append(store)
        return store

    def ids(self) -> list[str]:
        return sorted(row[0] for row in self.rows(f"SELECT id FROM {self.responses}"))

    def bytes_kept(self) -> tuple[int, int]:
        """The byte total the store keeps, and the sum of its entries' sizes that it must equal."""
        ((kept, summed),) = self.rows(
            f"SELECT bytes, (SELECT COALESCE(SUM(size), 0) FROM {self.responses}) FROM {self.totals}"
        )
        return int(kept), int(summed)

    def stored_text(self) -> str:
        """Every row of the responses table, as text."""
        return repr(self.rows(f"SELECT * FROM {self.responses}"))


def _sqlite(tmp_path: Path) -> StoreKind:
    path = tmp_path / "state" / "responses.sqlite3"

    def rows(query: str) -> list[tuple[Any, ...]]:
        with contextlib.closing(sqlite3.connect(path)) as connection:
            return connection.execute(query).fetchall()

    def opens(**bounds: Any) -> ResponseStore:
        return ResponseStore(path, **bounds)

    return StoreKind(opens, rows, "responses", "totals", [])


def _postgres(database: str) -> StoreKind:
    from conformance.protocols.responses.store_postgres import PostgresResponseStore

    def rows(query: str) -> list[tuple[Any, ...]]:
        with psycopg_or_skip().connect(database, autocommit=True) as connection:
            found: list[tuple[Any, ...]] = connection.execute(query).fetchall()
            return found

    def opens(**bounds: Any) -> PostgresResponseStore:
        return PostgresResponseStore(database, **bounds)

    return StoreKind(opens, rows, "conformant_responses", "conformant_responses_total", [])


@pytest.fixture(params=["sqlite", "postgresql"])
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreKind]:
    made = _sqlite(tmp_path) if request.param == "sqlite" else _postgres(request.getfixturevalue("database"))
    yield made
    for store in made.opened:
        asyncio.run(store.aclose())


def test_a_stored_response_is_read_back_with_its_conversation_and_forgotten_on_delete(
    kind: StoreKind,
) -> None:
    store = kind.open()
    answer = response("a", "Paris.", instructions="Be brief.")
    saved, found, deleted, again, missing = run(
        store,
        lambda s: s.save(answer, [user("Capital of France?")]),
        lambda s: s.load("resp_a"),
        lambda s: s.delete("resp_a"),
        lambda s: s.delete("resp_a"),
        lambda s: s.load("resp_a"),
    )
    assert saved is True
    assert found.response == answer
    assert found.input_items == [user("Capital of France?")]
    # What a continuation puts before its own input: the input, then the output; no instructions.
    assert found.conversation == [user("Capital of France?"), answer["output"][0]]
    assert (deleted, again, missing) == (True, False, None)
    assert kind.bytes_kept() == (0, 0)


def test_each_key_sees_only_its_own_responses(kind: StoreKind) -> None:
    """With two keys on one store, B could read, list, continue and delete A's responses (issue 32).
    Each server's store is its key's: another key's server finds nothing, deletes nothing, and the
    key itself is never stored, only its digest."""
    a, b = kind.open(key="sk-team-a"), kind.open(key="sk-team-b")
    run(a, lambda s: s.save(response("a"), [user("secret plans")]))
    assert run(b, lambda s: s.load("resp_a"), lambda s: s.delete("resp_a")) == [None, False]
    found = run(a, lambda s: s.load("resp_a"))[0]
    assert found is not None
    assert found.input_items == [user("secret plans")]
    stored = kind.stored_text()
    assert "sk-team-a" not in stored
    assert owner_of("sk-team-a") in stored


def test_an_entry_older_than_the_max_age_is_gone_and_evicted_by_the_next_write(
    kind: StoreKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = kind.open()
    now = 1_000_000.0
    monkeypatch.setattr(store_module.time, "time", lambda: now)
    run(store, lambda s: s.save(response("old"), []))
    now += DAY + 1
    assert run(store, lambda s: s.load("resp_old"), lambda s: s.delete("resp_old")) == [None, False]
    run(store, lambda s: s.save(response("new"), []))
    assert kind.ids() == ["resp_new"]
    kept, summed = kind.bytes_kept()
    assert kept == summed


def test_past_the_max_bytes_the_oldest_entries_go_first(kind: StoreKind) -> None:
    store = kind.open(max_bytes=10_000)
    text = "x" * 2_000  # each entry a little over 2 KB: four fit in 10 KB, not five
    run(store, *(lambda s, i=i: s.save(response(str(i), text), []) for i in range(6)))
    found = run(store, *(lambda s, i=i: s.load(f"resp_{i}") for i in range(6)))
    assert [entry is not None for entry in found] == [False, False, True, True, True, True]
    kept, summed = kind.bytes_kept()
    assert kept == summed <= 10_000


def test_an_entry_larger_than_the_bound_by_itself_is_not_stored_and_evicts_nothing(kind: StoreKind) -> None:
    store = kind.open(max_bytes=10_000)
    saved = run(
        store,
        lambda s: s.save(response("small"), []),
        lambda s: s.save(response("big", "x" * 10_000), []),
        lambda s: s.load("resp_small"),
        lambda s: s.load("resp_big"),
    )
    assert saved[:2] == [True, False]
    assert saved[2] is not None
    assert saved[3] is None
    assert kind.ids() == ["resp_small"]
