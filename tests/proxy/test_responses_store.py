"""The response store (conformance/protocols/responses/store.py): kept, continued, deleted, bounded, shared
by processes, and never in the event loop's way."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.protocols.responses import store as store_module
from conformance.protocols.responses.store import ResponseStore, StoreUnavailable, owner_of

MiB = 1024 * 1024
DAY = 24 * 3600.0


def _response(key: str, text: str = "hi", **extra: Any) -> dict[str, Any]:
    message = {"type": "message", "id": "msg_" + key, "role": "assistant", "status": "completed"}
    message["content"] = [{"type": "output_text", "text": text, "annotations": []}]
    return {"id": "resp_" + key, "object": "response", "status": "completed", "output": [message], **extra}


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResponseStore]:
    opened = ResponseStore(tmp_path / "state" / "responses.sqlite3", max_bytes=MiB, max_age=DAY)
    yield opened
    asyncio.run(opened.aclose())


def _run(store: ResponseStore, *calls: Any) -> list[Any]:
    """Each call (a function of the store returning an awaitable), in turn, on one event loop."""

    async def main() -> list[Any]:
        return [await call(store) for call in calls]

    return asyncio.run(main())


def test_a_stored_response_is_read_back_with_its_conversation_and_forgotten_on_delete(
    store: ResponseStore,
) -> None:
    response = _response("a", "Paris.", instructions="Be brief.")
    saved, found, deleted, again, missing = _run(
        store,
        lambda s: s.save(response, [_user("Capital of France?")]),
        lambda s: s.load("resp_a"),
        lambda s: s.delete("resp_a"),
        lambda s: s.delete("resp_a"),
        lambda s: s.load("resp_a"),
    )
    assert saved is True
    assert found.response == response
    assert found.input_items == [_user("Capital of France?")]
    # What a continuation puts before its own input: the input, then the output; no instructions.
    assert found.conversation == [_user("Capital of France?"), response["output"][0]]
    assert (deleted, again, missing) == (True, False, None)


def test_the_file_and_its_directory_are_private(store: ResponseStore) -> None:
    _run(store, lambda s: s.save(_response("a"), []))
    assert store.path.stat().st_mode & 0o077 == 0
    assert store.path.parent.stat().st_mode & 0o077 == 0
    assert sqlite3.connect(store.path).execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_an_entry_older_than_the_max_age_is_gone_and_evicted_by_the_next_write(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = 1_000_000.0
    monkeypatch.setattr(store_module.time, "time", lambda: now)
    _run(store, lambda s: s.save(_response("old"), []))
    now += DAY + 1
    assert _run(store, lambda s: s.load("resp_old"), lambda s: s.delete("resp_old")) == [None, False]
    _run(store, lambda s: s.save(_response("new"), []))
    rows = sqlite3.connect(store.path).execute("SELECT id FROM responses").fetchall()
    assert rows == [("resp_new",)]


def test_past_the_max_bytes_the_oldest_entries_go_first(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3", max_bytes=10_000, max_age=DAY)
    text = "x" * 2_000  # each entry a little over 2 KB: four fit in 10 KB, not five
    _run(store, *(lambda s, i=i: s.save(_response(str(i), text), []) for i in range(6)))
    found = _run(store, *(lambda s, i=i: s.load(f"resp_{i}") for i in range(6)))
    assert [entry is not None for entry in found] == [False, False, True, True, True, True]
    total = sqlite3.connect(store.path).execute("SELECT bytes, (SELECT SUM(size) FROM responses) FROM totals")
    kept, summed = total.fetchone()
    assert kept == summed <= 10_000
    asyncio.run(store.aclose())


def test_an_entry_larger_than_the_bound_by_itself_is_not_stored_and_evicts_nothing(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3", max_bytes=10_000, max_age=DAY)
    saved = _run(
        store,
        lambda s: s.save(_response("small"), []),
        lambda s: s.save(_response("big", "x" * 10_000), []),
        lambda s: s.load("resp_small"),
        lambda s: s.load("resp_big"),
    )
    assert saved[:2] == [True, False]
    assert saved[2] is not None
    assert saved[3] is None
    asyncio.run(store.aclose())


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
    found = _run(store, *(lambda s, k=k: s.load(k) for k in ("resp_a199", "resp_b0", "resp_b199")))
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
        saving = asyncio.ensure_future(store.save(_response("a"), []))
        ticks = 0
        while ticks < 50:  # the loop turns while the save waits for the lock
            await asyncio.sleep(0)
            ticks += 1
        assert not saving.done()
        holder.execute("COMMIT")
        return await saving, ticks

    assert asyncio.run(main()) == (True, 50)
    assert _run(store, lambda s: s.load("resp_a"))[0] is not None
    holder.close()


def test_a_path_that_cannot_hold_the_file_is_an_error_that_names_no_path(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    store = ResponseStore(blocker / "sub" / "responses.sqlite3", max_bytes=MiB, max_age=DAY)
    with pytest.raises(StoreUnavailable) as raised:
        store.open_now()
    assert str(tmp_path) not in str(raised.value)
    with pytest.raises(StoreUnavailable) as raised:
        _run(store, lambda s: s.load("resp_a"))
    assert "a-file" not in str(raised.value)
    asyncio.run(store.aclose())


def test_each_key_sees_only_its_own_responses_on_a_shared_file(tmp_path: Path) -> None:
    """With two keys on one store, B could read, list, continue and delete A's responses (issue 32).
    Each server's store is its key's: another key's server finds nothing, deletes nothing."""
    path = tmp_path / "responses.sqlite3"
    a = ResponseStore(path, max_bytes=MiB, max_age=DAY, owner=owner_of("sk-team-a"))
    b = ResponseStore(path, max_bytes=MiB, max_age=DAY, owner=owner_of("sk-team-b"))
    _run(a, lambda s: s.save(_response("a"), [_user("secret plans")]))
    assert _run(b, lambda s: s.load("resp_a"), lambda s: s.delete("resp_a")) == [None, False]
    found = _run(a, lambda s: s.load("resp_a"))[0]
    assert found is not None
    assert found.input_items == [_user("secret plans")]
    assert "sk-team-a" not in path.read_bytes().decode(errors="replace")  # a digest, never the key
    asyncio.run(a.aclose())
    asyncio.run(b.aclose())


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
    assert _run(keyless, lambda s: s.load("resp_old"))[0] is not None
    assert _run(keyed, lambda s: s.load("resp_old"))[0] is None
    asyncio.run(keyless.aclose())
    asyncio.run(keyed.aclose())
