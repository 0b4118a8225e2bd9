"""Real clients through ``conformant serve``: every test here is a ``clients`` test, run by the clients tox
env alone (Node.js, the pinned npm packages, the bundled backend).

The mark comes with the folder, as tests/backend's does. These tests are ``backend`` tests too (they need
llama.cpp, so the core env never runs them); the backend env leaves them to the clients env
(``-m "backend and not clients"``), whose ``npm ci`` fetches 480 MB that no other env needs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.clients.node import NodeClients, install
from tests.support.servers import free_port, run_process

_HERE = Path(__file__).parent

DEFAULT_MAX_TOKENS = 256
"""The proxy's cap for requests that set none: Codex sets no output limit, and a base model would write to
the end of the context. Codex fails a turn whose answer the cap cuts ("Incomplete response returned,
reason: max_output_tokens", measured with 64), so the cap leaves the model room to close its reply."""
TIMEOUT = 1500
"""Seconds per test, setup included: the first test's setup runs ``npm ci`` (480 MB from the registry on a
fresh machine, up to 1,200 s) and starts the backend; each client run has its own limit in node.py."""
UPSTREAM_VARIABLE = "CONFORMANT_CLIENTS_UPSTREAM"
"""An upstream URL to put the proxy in front of instead of the bundled backend (e.g. llama-cpp-python's
server started with ``--chat_format chatml-function-calling``), to see what the clients make of it."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clients: real JavaScript clients on Node.js (tox env clients)")


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.clients)
            item.add_marker(pytest.mark.backend)
            item.add_marker(pytest.mark.timeout(TIMEOUT))


@pytest.fixture(scope="session")
def node_clients() -> NodeClients:
    """Node.js with the pinned clients installed (skips where Node.js or npm is missing)."""
    return install()


@pytest.fixture(scope="session")
def proxy_url(node_clients: NodeClients) -> Iterator[str]:
    """``conformant serve`` on a free port, in front of the bundled backend it starts with its defaults
    (README's first command: the model's training context in one KV cache for 4 slots, which holds Codex
    CLI's ~8,700-token first request), or of ``CONFORMANT_CLIENTS_UPSTREAM``. Asks for the clients first,
    so that a machine without Node.js skips before it loads a model."""
    upstream = os.environ.get(UPSTREAM_VARIABLE)
    with serve(["--upstream", upstream] if upstream else []) as url:
        yield url


@contextlib.contextmanager
def serve(args: list[str]) -> Iterator[str]:
    """``conformant serve`` on a free port with ``args``; the backend it starts (without ``--upstream``)
    runs with its own context defaults, as a user's does."""
    port = free_port()
    command = ["python", "-m", "conformance", "serve", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--default-max-tokens", str(DEFAULT_MAX_TOKENS), *args]
    with run_process(command, health_path="/health", port=port, timeout=300) as (url, _):
        yield url


SCRIPTED_REPLY = "Hi there."
SCRIPTED_CONTEXT = 65536
"""The scripted model's training context, which the backend then holds: Codex CLI's ~40 KB prompt in the
synthetic model's small vocabulary (single letters and short words) takes several times Gemma's ~8,700
tokens."""


@pytest.fixture(scope="session")
def scripted_proxy_url(node_clients: NodeClients, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``conformant serve`` with the bundled backend serving a scripted synthetic model
    (backend/synthetic.py, ``reply``): it answers every prompt with ``SCRIPTED_REPLY`` and ends its turn,
    with the Hermes tool template, so a client's whole exchange runs through the real backend and proxy
    to its end, whatever the client's prompt."""
    from backend.synthetic import HERMES_TOOLS_TEMPLATE, SyntheticSpec, write_synthetic

    spec = SyntheticSpec(
        reply=SCRIPTED_REPLY, chat_template=HERMES_TOOLS_TEMPLATE, n_ctx_train=SCRIPTED_CONTEXT
    )
    path = write_synthetic(tmp_path_factory.mktemp("scripted") / "scripted.gguf", spec)
    with serve(["--model", str(path)]) as url:
        yield url


@pytest.fixture(scope="session")
def model(proxy_url: str) -> str:
    """The model the proxy lists first."""
    listed = httpx.get(proxy_url + "/v1/models", timeout=30).json()
    name = listed["data"][0]["id"]
    assert isinstance(name, str)
    return name
