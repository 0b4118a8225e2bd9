"""Every test in this folder is a backend test: marked so here, not file by file.

The core env runs ``-m "not backend"`` without llama-cpp-python and skips this folder's files (below);
the backend env runs ``-m backend``. A test here left unmarked ran in neither (21 flag and spec tests of
test_loading.py did), so the mark comes with the folder.

A module-level importorskip in a conftest aborts the whole run where llama_cpp is missing, so the
core env (which deselects backend tests anyway) must not even import these modules.
"""

import importlib.util
from pathlib import Path

import pytest

if importlib.util.find_spec("llama_cpp") is None:
    collect_ignore_glob = ["test_*.py"]
else:
    from tests.backend.fixtures import *  # noqa: F403 - fixtures for this folder, imported only with llama_cpp

_HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Called with the whole session's items, wherever the conftest is: only this folder's are marked.
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.backend)
