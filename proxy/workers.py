"""``conformant serve --workers N``: N processes, each the whole proxy on its own event loop.

They share one listening socket, so the kernel spreads connections over them, and each stream lives in
one process from its request to its last chunk. uvicorn's process supervisor starts them (spawned, not
forked), restarts one that dies and stops them all on SIGINT or SIGTERM. A spawned worker builds its
app from the configuration the parent put in its environment; the variable is removed as soon as it
is read, so nothing the worker starts inherits the keys in it.

Prometheus metrics are kept in prometheus_client's multiprocess mode: every worker writes its counters
to files in one directory, and ``/metrics`` on any worker sums them over all workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from starlette.applications import Starlette

from .config import ProxyConfig
from .observability import MULTIPROCESS_DIRECTORY

__all__ = ["build_app", "serve_in_workers", "uvicorn_options", "worker_app"]

_CONFIG_VARIABLE = "_CONFORMANT_WORKER_CONFIG"


def uvicorn_options(host: str, port: int) -> dict[str, Any]:
    """How every worker (one or many) runs uvicorn: uvloop, httptools with heads sent with bodies."""
    from .http_protocol import HeadWithBodyProtocol

    return {
        "host": host,
        "port": port,
        "log_level": "warning",
        "access_log": False,
        "http": HeadWithBodyProtocol,
    }


def build_app(config: ProxyConfig, log_level: str) -> Starlette:
    """The proxy app of one worker process, with its access log set up."""
    from .app import create_app

    logging.basicConfig(level=log_level.upper(), format="%(message)s")
    app = create_app(config)
    # Everything imported and built so far lives as long as the server: the collector need not scan it
    # again on every full collection while streams are being served.
    gc.freeze()
    return app


@contextlib.contextmanager
def _shared_metrics() -> Iterator[None]:
    """A directory for the workers' metric files (the user's own, if they set one), set for the workers."""
    if os.environ.get(MULTIPROCESS_DIRECTORY):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="conformant-metrics-") as directory:
        os.environ[MULTIPROCESS_DIRECTORY] = directory
        try:
            yield
        finally:
            del os.environ[MULTIPROCESS_DIRECTORY]


def serve_in_workers(config: ProxyConfig, workers: int, host: str, port: int, log_level: str) -> None:
    """Serve the proxy from ``workers`` processes until SIGINT or SIGTERM."""
    import uvicorn

    state = {"config": dataclasses.asdict(config), "log_level": log_level}
    with _shared_metrics():
        os.environ[_CONFIG_VARIABLE] = json.dumps(state)
        try:
            uvicorn.run(
                f"{__name__}:worker_app", factory=True, workers=workers, **uvicorn_options(host, port)
            )
        finally:
            del os.environ[_CONFIG_VARIABLE]


def worker_app() -> Starlette:
    """uvicorn's factory in each spawned worker: the app, from the configuration its parent passed."""
    state = json.loads(os.environ.pop(_CONFIG_VARIABLE))
    fields = state["config"]
    config = ProxyConfig(**{**fields, "cors_origins": tuple(fields["cors_origins"])})
    return build_app(config, state["log_level"])
