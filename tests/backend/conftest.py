"""The backend's fixtures need llama-cpp-python, which only the backend test env installs.

A module-level importorskip in a conftest aborts the whole run where llama_cpp is missing, so the
core env (which deselects backend tests anyway) must not even import these modules.
"""

import importlib.util

if importlib.util.find_spec("llama_cpp") is None:
    collect_ignore_glob = ["test_*.py"]
else:
    from tests.backend.fixtures import *  # noqa: F403 - fixtures for this folder, imported only with llama_cpp
