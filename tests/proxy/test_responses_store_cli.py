"""``serve``'s start with a response store that cannot be opened: a path given stops it in one line, the
default one (a read-only home) is a warning and the server runs on."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.servers import free_port, wait_http

SERVE = [sys.executable, "-m", "conformance", "serve", "--upstream", "http://127.0.0.1:9"]


def test_a_given_store_path_that_cannot_hold_the_file_stops_serve_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = subprocess.run(
        [*SERVE, "--port", str(free_port()), "--responses-store", str(blocker / "responses.sqlite3")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"conformant serve: --responses-store {blocker}/responses.sqlite3: ")
    assert "Traceback" not in result.stderr


def test_a_default_store_that_cannot_be_opened_is_a_warning_and_serve_runs_on(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    port = free_port()
    env = {**os.environ, "XDG_STATE_HOME": str(blocker)}  # the default path lies under a file
    env.pop("CONFORMANT_RESPONSES_STORE", None)
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([*SERVE, "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_http(f"http://127.0.0.1:{port}/health", 60, proc)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        log.seek(0)
        stderr = log.read().decode()
    assert "/v1/responses will store nothing (give --responses-store a writable path)" in stderr
    assert "Traceback" not in stderr
