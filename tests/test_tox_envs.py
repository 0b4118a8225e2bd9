"""`tox` runs every test, quietly, on a llama.cpp built with tox's own flags.

Each env's pytest command is read from tox.ini and its tests collected as that env collects them (the
core env has no llama-cpp-python: its import is blocked in the collecting process). Collecting every
test needs llama-cpp-python, so this runs in the backend env.
"""

from __future__ import annotations

import configparser
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parent.parent
_BLOCK_LLAMA_CPP = "import sys; sys.modules['llama_cpp'] = None"  # find_spec then says "not installed"


def _tox() -> configparser.ConfigParser:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    return tox


def _pytest_args(tox: configparser.ConfigParser) -> dict[str, list[str]]:
    """Each env's pytest arguments, ``{posargs}`` left out."""
    envs = {}
    for section in tox.sections():
        if not section.startswith("testenv:"):
            continue
        for line in tox[section].get("commands", "").strip().splitlines():
            words = shlex.split(line)
            if words and words[0] == "pytest":
                envs[section.removeprefix("testenv:")] = [w for w in words[1:] if w != "{posargs}"]
    return envs


def _installs_llama_cpp(tox: configparser.ConfigParser, env: str) -> bool:
    section = tox[f"testenv:{env}"]
    return "llama-cpp-python" in section.get("deps", "") or "backend" in section.get("extras", "").split()


def _collect(args: list[str], *, prelude: str = "") -> tuple[set[str], str]:
    """The test ids pytest collects with ``args``, and everything it printed."""
    code = f"{prelude}\nimport sys, pytest\nsys.exit(pytest.main(sys.argv[1:]))"
    run = subprocess.run(
        [sys.executable, "-c", code, "--collect-only", "-q", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode in (0, 5), run.stdout[-3000:] + run.stderr[-3000:]  # 5: nothing collected
    ids = {line for line in run.stdout.splitlines() if "::" in line}
    return ids, run.stdout + run.stderr


def _collect_each(runs: list[tuple[list[str], str]]) -> list[tuple[set[str], str]]:
    """``_collect`` of each (args, prelude), side by side: each is a process that imports the whole
    suite, and one after the other they took 98 s of the backend env's time in CI."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(lambda run: _collect(run[0], prelude=run[1]), runs))


def _prelude(tox: configparser.ConfigParser, env: str) -> str:
    return "" if _installs_llama_cpp(tox, env) else _BLOCK_LLAMA_CPP


def test_every_test_runs_in_some_env_and_pytest_warns_of_nothing() -> None:
    pytest.importorskip("llama_cpp")
    tox = _tox()
    envs = _pytest_args(tox)
    assert envs, "no env in tox.ini runs pytest"
    runs = [([], ""), *((args, _prelude(tox, env)) for env, args in envs.items())]
    (everything, output), *per_env = _collect_each(runs)
    assert len(everything) > 500
    assert "warnings summary" not in output, output[-3000:]
    run_by_some_env: set[str] = set()
    for env, (collected, output) in zip(envs, per_env, strict=True):
        assert "warnings summary" not in output, (env, output[-3000:])
        run_by_some_env |= collected
    missed = sorted(everything - run_by_some_env)
    assert missed == [], f"{len(missed)} tests run in no tox env: {missed[:10]}"


def test_llama_cpp_is_built_with_tox_flags_never_taken_from_the_users_wheel_cache() -> None:
    """pip reuses a wheel it built by the source alone: a cache shared with a plain install would hand
    tox a llama.cpp built without CMAKE_ARGS. Every env that installs it caches apart, by the flags."""
    tox = _tox()
    flags = tox["llamacpp"]["cmake_args"].strip()
    assert flags
    envs = [s.removeprefix("testenv:") for s in tox.sections() if s.startswith("testenv:")]
    building = [env for env in envs if _installs_llama_cpp(tox, env)]
    assert "backend" in building
    for env in building:
        set_env = tox[f"testenv:{env}"].get("set_env", "")
        set_env = set_env.replace("{[llamacpp]set_env}", tox["llamacpp"]["set_env"])  # (it may add lines)
        settings = dict(
            (key.strip(), value.strip())
            for key, _, value in (line.partition("=") for line in set_env.splitlines() if "=" in line)
        )
        assert settings.get("CMAKE_ARGS") == "{[llamacpp]cmake_args}", env
        cache = settings.get("PIP_CACHE_DIR", "")
        assert cache.startswith("{work_dir}"), (env, cache)  # tox's own, not the user's
        assert "{[llamacpp]cmake_args}" in cache, (env, cache)  # other flags, another cache


def test_the_clients_env_alone_runs_the_client_tests_and_ci_runs_it() -> None:
    """The JavaScript clients' tests (tests/clients/, marked ``clients`` by their folder) run in the
    clients env and in no other: their ``npm ci`` fetches 480 MB that no other env needs, and the backend
    env would otherwise start a second proxy and backend for them. CI runs every env of env_list."""
    pytest.importorskip("llama_cpp")
    tox = _tox()
    assert "clients" in [env.strip() for env in tox["tox"]["env_list"].split(",")]
    envs = _pytest_args(tox)
    runs = [
        (["tests/clients"], ""),
        *(([*args, "tests/clients"], _prelude(tox, env)) for env, args in envs.items()),
    ]
    (client_tests, _), *per_env = _collect_each(runs)  # that folder only: quick
    assert client_tests
    for env, (collected, _) in zip(envs, per_env, strict=True):
        assert collected == (client_tests if env == "clients" else set()), env
    # npm installs into the env's own folder, never into the repo tree.
    assert "CONFORMANT_CLIENTS_JS_DIR = {env_dir}" in tox["testenv:clients"]["set_env"]
