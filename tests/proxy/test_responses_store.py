"""The SQLite response store (conformance/protocols/responses/store.py): a private file, shared by processes,
never in the event loop's way, opened from before owners. What every store does (kept, continued,
deleted, each key's own, bounded) is tests/proxy/test_responses_store_contract.py, run on this one too."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.protocols.responses.store import ResponseStore, StoreUnavailable, owner_of
from tests.proxy.stored_responses import DAY, MiB, response, run


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResponseStore]:
    opened = ResponseStore(tmp_path / "state" / "responses.sqlite3", max_bytes=MiB, max_age=DAY)
    yield opened
    asyncio.run(opened.aclose())


def test_the_file_and_its_directory_are_private(store: ResponseStore) -> None:
    run(store, lambda s: s.save(response("a"), []))
    assert store.path.stat().st_mode & 0o077 == 0
    assert store.path.parent.stat().st_mode & 0o077 == 0
    assert sqlite3.connect(store.path).execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_two_processes_writing_at_once_take_turns_and_see_each_others_entries(tmp_path: Path) -> None:
    """Two processes (as two --workers) save 200 responses each into one file at the same time: none is
    lost to a locked database, and each reads the other's."""
    path = tmp_path / "shared.sqlite3"
    ResponseStore(path, max_bytes=64 * MiB, max_age=DAY).open_now()
    writer = textwrap.dedent(
        """
        import asyncio, sys
        from conformance.protocols.responses.store import ResponseStore

        async def main(name):
            store = ResponseStore(sys.argv[1], max_bytes=64 * 1024 * 1024, max_age=86400.0)
            for i in range(200):
                await store.save({"id": f"resp_{name}{i}", "output": []}, [{"role": "user", "content": "x"}])
            await store.aclose()

        asyncio.run(main(sys.argv[2]))
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", writer, str(path), name]) for name in "ab"]
    assert [proc.wait(timeout=120) for proc in procs] == [0, 0]
    store = ResponseStore(path, max_bytes=64 * MiB, max_age=DAY)
    found = run(store, *(lambda s, k=k: s.load(k) for k in ("resp_a199", "resp_b0", "resp_b199")))
    assert all(entry is not None for entry in found)
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM responses").fetchone() == (400,)
    asyncio.run(store.aclose())


def test_a_save_waiting_for_another_writer_leaves_the_event_loop_free(store: ResponseStore) -> None:
    """Another process holds the write lock: the save waits on the store's thread while the loop runs
    other work, and completes once the lock is released."""
    store.open_now()
    holder = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")

    async def main() -> tuple[bool, int]:
        saving = asyncio.ensure_future(store.save(response("a"), []))
        ticks = 0
        while ticks < 50:  # the loop turns while the save waits for the lock
            await asyncio.sleep(0)
            ticks += 1
        assert not saving.done()
        holder.execute("COMMIT")
        return await saving, ticks

    assert asyncio.run(main()) == (True, 50)
    assert run(store, lambda s: s.load("resp_a"))[0] is not None
    holder.close()


def test_a_path_that_cannot_hold_the_file_is_an_error_that_names_no_path(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    store = ResponseStore(blocker / "sub" / "responses.sqlite3", max_bytes=MiB, max_age=DAY)
    with pytest.raises(StoreUnavailable) as raised:
        store.open_now()
    assert str(tmp_path) not in str(raised.value)
    with pytest.raises(StoreUnavailable) as raised:
        run(store, lambda s: s.load("resp_a"))
    assert "a-file" not in str(raised.value)
    asyncio.run(store.aclose())


def test_a_file_from_before_owners_is_opened_and_its_responses_are_no_keys(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite3"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE responses (id TEXT PRIMARY KEY, stored_at REAL NOT NULL, size INTEGER NOT NULL,"
        " response TEXT NOT NULL, input TEXT NOT NULL);"
    )
    old.execute("INSERT INTO responses VALUES ('resp_old', 1e12, 2, '{}', '[]')")
    old.commit()
    old.close()
    keyless = ResponseStore(path, max_bytes=MiB, max_age=1e13)
    keyed = ResponseStore(path, max_bytes=MiB, max_age=1e13, owner=owner_of("sk-x"))
    assert run(keyless, lambda s: s.load("resp_old"))[0] is not None
    assert run(keyed, lambda s: s.load("resp_old"))[0] is None
    asyncio.run(keyless.aclose())
    asyncio.run(keyed.aclose())


def test_the_key_is_in_no_byte_of_the_file(tmp_path: Path) -> None:
    """The owner is the key's digest (test_responses_store_contract.py reads the rows): nowhere in the
    file, nor in its write-ahead log, is the key itself."""
    path = tmp_path / "responses.sqlite3"
    store = ResponseStore(path, max_bytes=MiB, max_age=DAY, owner=owner_of("sk-team-a"))
    run(store, lambda s: s.save(response("a"), []))
    written = b"".join(p.read_bytes() for p in tmp_path.glob("responses.sqlite3*"))
    assert owner_of("sk-team-a").encode() in written
    assert b"sk-team-a" not in written
    asyncio.run(store.aclose())
