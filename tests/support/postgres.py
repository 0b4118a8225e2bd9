"""A throwaway PostgreSQL server for the tests of the PostgreSQL response store (issue 38, point 5).

Real, not mocked: the store's concurrency rests on PostgreSQL's row locks and triggers, which only a
server has. ``initdb`` into a temporary directory, ``pg_ctl start`` on a free loopback port (its Unix
socket in that directory, never the system's), one database made for the tests, and everything
stopped and removed after. PostgreSQL refuses to run as root, so as root the server runs as the
``postgres`` account (or ``nobody``), which owns the directory.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.servers import free_port

__all__ = ["PostgresServer", "postgres_binaries", "running_postgres"]

USER = "conformant"
PASSWORD = "pw-s3cret-Zq9"  # a password tests can look for in what must never show it
DATABASE = "conformant_test"


@dataclass(frozen=True)
class PostgresServer:
    port: int
    database: str = DATABASE

    def url(self, database: str | None = None, *, password: str = PASSWORD) -> str:
        return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/{database or self.database}"


def postgres_binaries() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``: on PATH, else the newest
    ``/usr/lib/postgresql/*/bin`` (Debian's packages put them there, off PATH); None without them."""
    on_path = shutil.which("pg_ctl")
    candidates = [Path(on_path).resolve().parent] if on_path else []
    installed = [Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin") if Path(p).parent.name.isdigit()]
    candidates += sorted(installed, key=lambda p: int(p.parent.name), reverse=True)
    for directory in candidates:
        if all((directory / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return directory
    return None


def _unprivileged() -> tuple[int, int] | None:
    """The (uid, gid) to run the server as: None when this process is not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            account = pwd.getpwnam(name)
            return account.pw_uid, account.pw_gid
    raise RuntimeError("running as root with neither a postgres nor a nobody account to run PostgreSQL as")


@contextlib.contextmanager
def running_postgres(binaries: Path) -> Iterator[PostgresServer]:
    """A PostgreSQL server of ``binaries`` on 127.0.0.1 (password authentication over TCP, for user
    ``USER``), with the database ``DATABASE``; stopped and removed on exit."""
    account = _unprivileged()
    as_user = {"user": account[0], "group": account[1], "extra_groups": []} if account else {}
    root = Path(tempfile.mkdtemp(prefix="conformant-pg-"))
    data, port = root / "data", free_port()
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    try:
        (root / "password").write_text(PASSWORD + "\n")
        if account:
            os.chown(root, *account)
            os.chown(root / "password", *account)

        def run(*args: str) -> None:
            done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, **as_user)
            if done.returncode:
                raise RuntimeError(f"{' '.join(args[:2])} failed:\n{done.stdout}\n{done.stderr}")

        run(
            str(binaries / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={root / 'password'}",
            "-E", "UTF8", "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256",
        )  # fmt: skip
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off -c full_page_writes=off"
        run(str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start")
        try:
            server = PostgresServer(port)
            _create_database(server)
            yield server
        finally:
            run(str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _create_database(server: PostgresServer) -> None:
    import psycopg

    with psycopg.connect(server.url("postgres"), autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {DATABASE}")
