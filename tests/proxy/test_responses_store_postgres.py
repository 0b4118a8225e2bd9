"""The PostgreSQL response store (conformance/protocols/responses/store_postgres.py, issue 38, point 5),
against a real PostgreSQL server: what only it does (a spooled answer sent by COPY, its row locks under
concurrent writers, connections the server ended), shared by several ``conformant serve`` processes,
each key's responses its own; and a database that cannot be reached, or a driver that is missing,
stopping ``serve`` in one line that shows no password. What every store does (kept, continued, deleted,
bounded) is tests/proxy/test_responses_store_contract.py, run on this one too.

A throwaway server (tests/support/postgres.py) serves the whole session; each test gets a database of
its own. Without PostgreSQL's server programs here, the tests that need one skip and say so.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from conformance.protocols.responses.store import StoreUnavailable, owner_of
from conformance.protocols.responses.store_base import is_postgres_url, passwords_in, redacted_url
from conformance.protocols.spooled_text import SpooledJSON, TextSpool
from tests.proxy.conftest import psycopg_or_skip
from tests.proxy.stored_responses import DAY, MiB, response, run, user
from tests.support.postgres import PASSWORD, PostgresServer
from tests.support.servers import RecordingUpstream, free_port, run_asgi, run_process

SERVE = [sys.executable, "-m", "conformance", "serve"]


def _store(url: str, *, max_bytes: int = MiB, max_age: float = DAY, key: str | None = None) -> Any:
    from conformance.protocols.responses.store_postgres import PostgresResponseStore

    return PostgresResponseStore(url, max_bytes=max_bytes, max_age=max_age, owner=owner_of(key))


def _sql(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg_or_skip().connect(url, autocommit=True) as connection:
        rows: list[tuple[Any, ...]] = connection.execute(query).fetchall()
        return rows


def _totals(url: str) -> tuple[int, int]:
    """The byte total the triggers keep, and the sum of the entries' sizes it must equal."""
    ((kept, summed),) = _sql(
        url,
        "SELECT bytes, (SELECT COALESCE(SUM(size), 0) FROM conformant_responses)"
        " FROM conformant_responses_total",
    )
    return int(kept), int(summed)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://bob:hunter2@db:5432/r", "postgresql://bob:***@db:5432/r"),
        (
            "postgres://bob:p%40ss@h1,h2:5433/r?sslmode=require",
            "postgres://bob:***@h1,h2:5433/r?sslmode=require",
        ),
        (
            "postgresql://bob@db/r?Password=hunter2&sslpassword=k",
            "postgresql://bob@db/r?Password=***&sslpassword=***",
        ),
        ("postgresql:///r?host=/run/postgresql", "postgresql:///r?host=/run/postgresql"),
        ("postgresql://bob:hunter2@[::1/r", "postgresql://bob:***@[::1/r"),
        ("postgresql://bob:pa#ss?w@db/r", "postgresql://bob:***@db/r"),
    ],
)
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert is_postgres_url(url)
    assert redacted_url(url) == shown
    for secret in passwords_in(url):
        assert secret not in shown


def test_only_a_postgresql_url_names_a_database() -> None:
    assert [is_postgres_url(v) for v in ("POSTGRESQL://h/d", "postgres://h", "/var/r.sqlite3", "pg.db")] == [
        True,
        True,
        False,
        False,
    ]
    assert passwords_in("postgres://bob:p%40ss@h/r") == ["p%40ss", "p@ss"]


# --- the store ---------------------------------------------------------------------------------------


def test_what_is_read_passes_through_redact(database: str) -> None:
    store = _store(database)
    run(store, lambda s: s.save(response("a", "the key is sk-upstream-1"), []))
    store.redact = lambda text: text.replace("sk-upstream-1", "[redacted]")
    found = run(store, lambda s: s.load("resp_a"))[0]
    assert found.response["output"][0]["content"][0]["text"] == "the key is [redacted]"
    asyncio.run(store.aclose())


SPOOLED_PIECE = ('lorem "ipsum" \\ dolor\n\tsit\r\x01\x1f amet, é ü 日本 🙂 ' * 2000)[:65536]
"""64 Ki characters of a spooled answer: quotes and backslashes (which JSON escapes, and COPY's text format
escapes again), line ends and a tab (COPY's row and field ends), control characters, and characters of
two, three and four bytes in UTF-8."""


def _spooled_response(key: str, megabytes: int) -> tuple[SpooledJSON, str]:
    """A Response whose answer went to a file, as a long stream leaves it, and that answer."""
    spool = TextSpool()
    for _ in range(megabytes * 16):
        spool.append(SPOOLED_PIECE)
    spool.finish()
    assert spool.spilled
    spooled = response(key, spool.token, store=True)
    return SpooledJSON(spooled, {spool.token: spool}), SPOOLED_PIECE * (megabytes * 16)


def test_a_spooled_response_is_stored_a_piece_at_a_time_and_read_back_the_same(database: str) -> None:
    """Issue 32: a long stream's Response, its texts in files (protocols/spooled_text.py), is sent to the
    database a piece at a time, never whole in the proxy's memory: Python's allocations in every thread
    (``tracemalloc``) peak far below its JSON's size while it is saved. Built whole (as it was once:
    the bytes joined, decoded, encoded again by the driver), these 8 Mi characters of answer (13.1 MB of
    JSON) took the save to a peak of 104 MB; by COPY, 1.6 MB (most of it orjson's room for escaping one
    64 KiB piece: spooled_text.READ_BYTES). What is stored is the text it was before, byte for byte, and
    read back it is the Response as written."""
    store = _store(database, max_bytes=64 * MiB)
    spooled, text = _spooled_response("long", 8)
    written = spooled.whole()
    run(store, lambda s: s.save(response("warm"), []))  # the connection and its tables, made once
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        saved = run(store, lambda s: s.save(spooled, [user("go on")]))[0]
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert saved is True
    assert peak < 4 * MiB, f"{peak / 1e6:.1f} MB at the peak for {len(written) / 1e6:.1f} MB of JSON"
    ((stored, items, size),) = _sql(
        database, "SELECT response, input, size FROM conformant_responses WHERE id = 'resp_long'"
    )
    assert stored.encode() == written
    assert items == json.dumps([user("go on")], separators=(",", ":"), ensure_ascii=False)
    assert size == len(written) + len(items.encode())
    found = run(store, lambda s: s.load("resp_long"))[0]
    assert found.response == response("long", text, store=True)
    assert found.input_items == [user("go on")]
    kept, summed = _totals(database)
    assert kept == summed
    asyncio.run(store.aclose())


def test_a_spooled_response_whose_id_is_stored_already_leaves_that_entry(database: str) -> None:
    """As the INSERT's ``ON CONFLICT DO NOTHING`` leaves a stored id's entry, so does the COPY of a
    spooled Response: the first entry stays, the total counts it once, and the save says stored."""
    store = _store(database, max_bytes=64 * MiB)
    first, text = _spooled_response("same", 2)
    second, _ = _spooled_response("same", 3)
    assert run(store, lambda s: s.save(first, []), lambda s: s.save(second, [user("again")])) == [
        True,
        True,
    ]
    found = run(store, lambda s: s.load("resp_same"))[0]
    assert found.response == response("same", text, store=True)
    assert found.input_items == []
    kept, summed = _totals(database)
    assert kept == summed == len(first.whole()) + len(b"[]")
    asyncio.run(store.aclose())


def test_two_processes_writing_at_once_keep_the_total_and_the_bound(database: str) -> None:
    """Two processes (two servers) save 150 responses each at once, past a bound that evicts on most
    writes: none fails, and the total the triggers keep is the entries' sum, within the bound."""
    _store(database).open_now()
    writer = (
        "import asyncio, sys\n"
        "from conformance.protocols.responses.store_postgres import PostgresResponseStore\n"
        "async def main(url, name):\n"
        "    store = PostgresResponseStore(url, max_bytes=20_000, max_age=86400.0)\n"
        "    saved = await asyncio.gather(*(store.save({'id': f'resp_{name}{i}', 'output': ['x' * 300]},"
        " [{'role': 'user', 'content': 'y'}]) for i in range(150)))\n"
        "    await store.aclose()\n"
        "    sys.exit(0 if all(saved) else 1)\n"
        "asyncio.run(main(sys.argv[1], sys.argv[2]))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", writer, database, name]) for name in "ab"]
    assert [proc.wait(timeout=120) for proc in procs] == [0, 0]
    kept, summed = _totals(database)
    assert kept == summed
    assert 20_000 - 400 < kept <= 20_000
    # What is left is the newest entries, with no gap: the oldest went first, whoever wrote them.
    ((first, last, count),) = _sql(database, "SELECT MIN(seq), MAX(seq), COUNT(*) FROM conformant_responses")
    assert (last, last - first + 1) == (300, count)
    store = _store(database, max_bytes=20_000)
    ((newest,),) = _sql(database, "SELECT id FROM conformant_responses ORDER BY seq DESC LIMIT 1")
    assert run(store, lambda s: s.load(newest))[0] is not None
    asyncio.run(store.aclose())


def test_saves_that_evict_and_deletes_at_once_never_deadlock(database: str) -> None:
    """A save evicting the entries a DELETE of another server is removing: had each locked its rows
    before the total, each would wait for the other, and PostgreSQL would abort one (a response not
    stored, a 503). Every writer takes the total's lock first: all succeed (without it, 25 of these
    960 writes failed with a deadlock here)."""
    saver, deleter = _store(database, max_bytes=3_000), _store(database, max_bytes=3_000)

    async def main() -> list[Any]:
        results: list[Any] = []
        for base in range(0, 480, 8):
            saves = [saver.save({"id": f"r{base + i}", "output": ["x" * 300]}, []) for i in range(8)]
            deletes = [deleter.delete(f"r{base + i - 8}") for i in range(8)]
            results += await asyncio.gather(*saves, *deletes, return_exceptions=True)
        await saver.aclose()
        await deleter.aclose()
        return results

    assert [result for result in asyncio.run(main()) if isinstance(result, BaseException)] == []
    kept, summed = _totals(database)
    assert kept == summed <= 3_000


def test_a_save_waiting_for_another_writer_leaves_the_event_loop_free(database: str) -> None:
    """Another server holds the writers' lock: the save waits on the store's thread while the loop runs
    other work, and completes once the lock is released."""
    store = _store(database)
    store.open_now()
    holder = psycopg_or_skip().connect(database)
    holder.execute("SELECT bytes FROM conformant_responses_total FOR UPDATE")

    async def main() -> tuple[bool, int]:
        saving = asyncio.ensure_future(store.save(response("a"), []))
        ticks = 0
        while ticks < 50:
            await asyncio.sleep(0.002)
            ticks += 1
        assert not saving.done()
        holder.commit()
        return await saving, ticks

    assert asyncio.run(main()) == (True, 50)
    holder.close()
    assert run(store, lambda s: s.load("resp_a"))[0] is not None
    asyncio.run(store.aclose())


def test_connections_the_server_ended_are_replaced_without_a_failure(database: str) -> None:
    """The database restarted or failed over while the store's connections were idle: the next calls
    connect again instead of failing once per connection."""
    store = _store(database)
    run(store, *(lambda s, i=i: s.save(response(str(i)), []) for i in range(8)))

    async def at_once() -> list[Any]:
        return list(await asyncio.gather(*(store.load(f"resp_{i}") for i in range(8))))

    asyncio.run(at_once())  # every thread has its connection now
    _sql(
        database,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    assert all(entry is not None for entry in asyncio.run(at_once()))
    asyncio.run(store.aclose())


def test_a_failing_database_is_store_unavailable_in_words_that_name_nothing(
    postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused credentials, a missing database, nothing listening, a URL libpq cannot parse: each is a
    ``StoreUnavailable`` (a 503 or ``"store": false`` for a client) that names no host, port, user or
    password, and the log line about it shows no password either."""
    closed = free_port()
    cases = {
        postgres.url(password="not-" + PASSWORD): "the database refused the credentials",
        postgres.url("no_such_database"): "the database does not exist",
        f"postgresql://conformant:{PASSWORD}@127.0.0.1:{closed}/db": "the database server cannot be reached",
        f"postgresql://conformant:{PASSWORD}@[::1/db": "the URL is not a valid PostgreSQL URL",
    }
    caplog.set_level(logging.WARNING, logger="conformant.responses")
    for url, reason in cases.items():
        store = _store(url)
        with pytest.raises(StoreUnavailable) as opening:
            store.open_now()
        assert str(opening.value) == f"the response store cannot be opened: {reason}"
        with pytest.raises(StoreUnavailable) as loading:
            run(store, lambda s: s.load("resp_a"))
        assert str(loading.value) == f"the response store failed: {reason}"
        asyncio.run(store.aclose())
    logged = caplog.text
    assert "127.0.0.1" in logged  # the log is the operator's: it tells where, without the password
    assert PASSWORD not in logged


# --- conformant serve ----------------------------------------------------------------------------------


@pytest.fixture
def chat_upstream() -> Iterator[tuple[str, RecordingUpstream]]:
    """A chat-completions upstream that answers "reply N" to its Nth request and keeps the bodies."""

    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        recording.seen.append(("/v1/chat/completions", body))
        choice = {"index": 0, "message": {"role": "assistant", "content": f"reply {len(recording.seen)}"}}
        usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
        return JSONResponse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [{**choice, "finish_reason": "stop"}],
                "usage": usage,
            }
        )

    recording = RecordingUpstream([Route("/v1/chat/completions", chat, methods=["POST"])])
    with run_asgi(recording.app) as url:
        yield url, recording


def _serve(upstream: str, database: str, key: str, log: Path, *extra: str) -> Any:
    port = free_port()
    args = [
        *SERVE,
        "--upstream",
        upstream,
        "--upstream-kind",
        "openai",
        "--port",
        str(port),
        "--api-key",
        key,
    ]
    args += ["--responses-store", database, "--responses-store-max-bytes", "12000", *extra]
    return run_process(args, health_path="/health", port=port, timeout=120, log_path=log)


def _ask(url: str, key: str, text: str, **extra: Any) -> dict[str, Any]:
    body = {"model": "m", "input": text, **extra}
    answer = httpx.post(
        url + "/v1/responses", json=body, headers={"authorization": f"Bearer {key}"}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


@pytest.mark.slow
def test_servers_on_one_database_share_conversations_and_keep_each_keys_own(
    database: str, chat_upstream: tuple[str, RecordingUpstream], tmp_path: Path
) -> None:
    """Issue 38, point 5: two ``serve`` processes of key A behind a load balancer (the second with two
    workers of its own), and one of key B, on one database. A conversation begun on the first
    continues on the second (the upstream gets the first turn's items), either answers for what the
    other stored, B's server finds none of it, and the byte bound holds across them."""
    upstream, recording = chat_upstream
    logs = [tmp_path / f"serve-{n}.log" for n in range(3)]
    a_auth, b_auth = {"authorization": "Bearer sk-a"}, {"authorization": "Bearer sk-b"}
    with (
        _serve(upstream, database, "sk-a", logs[0]) as (one, _),
        _serve(upstream, database, "sk-a", logs[1], "--workers", "2") as (two, _),
        _serve(upstream, database, "sk-b", logs[2]) as (other, _),
    ):
        first = _ask(one, "sk-a", "My name is Ada. Remember it.")
        second = _ask(two, "sk-a", "What is my name?", previous_response_id=first["id"])
        sent = recording.bodies("/v1/chat/completions")[1]["messages"]
        assert [m["content"] for m in sent] == ["My name is Ada. Remember it.", "reply 1", "What is my name?"]
        assert httpx.get(f"{two}/v1/responses/{first['id']}", headers=a_auth).json() == first
        listed = httpx.get(f"{one}/v1/responses/{second['id']}/input_items?order=asc", headers=a_auth).json()
        assert [item["content"][0]["text"] for item in listed["data"]] == [
            "My name is Ada. Remember it.",
            "reply 1",
            "What is my name?",
        ]

        # Key B's server: A's responses are not found, cannot be deleted or continued.
        assert httpx.get(f"{other}/v1/responses/{first['id']}", headers=b_auth).status_code == 404
        assert httpx.delete(f"{other}/v1/responses/{first['id']}", headers=b_auth).status_code == 404
        continued = httpx.post(
            other + "/v1/responses",
            json={"model": "m", "input": "and?", "previous_response_id": first["id"]},
            headers=b_auth,
        )
        assert continued.status_code == 400
        assert continued.json()["error"]["code"] == "previous_response_not_found"

        # Deleted on one server, gone on the other.
        assert httpx.delete(f"{one}/v1/responses/{second['id']}", headers=a_auth).json()["deleted"] is True
        assert httpx.get(f"{two}/v1/responses/{second['id']}", headers=a_auth).status_code == 404

        # The bound (12,000 bytes), over both servers' writes: the oldest go first, and an answer
        # larger than the bound by itself is not stored and says so.
        ids = [_ask((one, two)[n % 2], "sk-a", f"turn {n}")["id"] for n in range(12)]
        assert httpx.get(f"{two}/v1/responses/{first['id']}", headers=a_auth).status_code == 404
        assert httpx.get(f"{one}/v1/responses/{ids[-1]}", headers=a_auth).status_code == 200
        kept, summed = _totals(database)
        assert kept == summed <= 12_000
        huge = _ask(one, "sk-a", "x" * 13_000)
        assert huge["store"] is False
        assert httpx.get(f"{two}/v1/responses/{huge['id']}", headers=a_auth).status_code == 404
    for log in logs:
        assert PASSWORD not in log.read_text()


def test_a_database_that_cannot_be_reached_stops_serve_in_one_line_without_the_password() -> None:
    """Given as the variable this time (the flag's path is the same)."""
    psycopg_or_skip()
    url = f"postgresql://conformant:{PASSWORD}@127.0.0.1:{free_port()}/responses"
    result = subprocess.run(
        [*SERVE, "--upstream", "http://127.0.0.1:9", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CONFORMANT_RESPONSES_STORE": url},
    )
    assert result.returncode == 2
    shown = url.replace(PASSWORD, "***")
    assert result.stderr.strip().splitlines()[-1] == (
        f"conformant serve: --responses-store {shown}: "
        "the response store cannot be opened: the database server cannot be reached"
    )
    assert PASSWORD not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_a_postgresql_url_without_the_driver_says_how_to_install_it(tmp_path: Path) -> None:
    """Where psycopg cannot be imported (a core install), a URL is one line naming the extra."""
    (tmp_path / "psycopg").mkdir()
    (tmp_path / "psycopg" / "__init__.py").write_text(
        "raise ImportError('no psycopg here', name='psycopg')\n"
    )
    url = f"postgresql://conformant:{PASSWORD}@127.0.0.1:5432/responses"
    result = subprocess.run(
        [*SERVE, "--upstream", "http://127.0.0.1:9", "--port", str(free_port()), "--responses-store", url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])},
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "conformant serve: --responses-store: a PostgreSQL URL needs psycopg, which cannot be imported "
        "here; install the postgres extra: pip install 'conformant[postgres]' (in a checkout: pip install "
        "'.[postgres]')"
    ]
