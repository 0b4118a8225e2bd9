"""``conformant serve --workers N``: N processes, each the whole proxy on its own event loop.

They share one listening socket, so the kernel spreads connections over them, and each stream lives in
one process from its request to its last chunk. uvicorn's process supervisor starts them (spawned, not
forked), replaces one that dies and stops them all on SIGINT or SIGTERM. A spawned worker builds its
app from a configuration file the parent wrote into a private temporary directory (mode 0700, the
file 0600), so the keys in it appear in no worker's arguments or environment (keys given as
``CONFORMANT_*`` variables are taken out of what the workers inherit). A worker that cannot start
stops the server, which then exits with status 2 and the reason.

Prometheus metrics are kept in prometheus_client's multiprocess mode: every worker writes its values
to files in one directory, and ``/metrics`` on any worker sums them over all workers.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

from conformance.settings import CommandError

from .config import KEY_VARIABLES, ProxyConfig
from .graceful import SHUTDOWN_GRACE, STOP_SIGNALS
from .observability import MULTIPROCESS_DIRECTORY

__all__ = ["build_app", "serve_in_workers", "uvicorn_options", "worker_app"]

_CONFIG_FILE_VARIABLE = "_CONFORMANT_WORKER_CONFIG_FILE"
_CONFIG_FILE = "config.json"
_FAILURE_FILE = "startup-failure"


def uvicorn_options(args: argparse.Namespace) -> dict[str, Any]:
    """How uvicorn runs the proxy (``serve``'s flags): uvloop, httptools with heads sent with bodies and
    the limits of proxy/client_limits.py.

    ``workers`` is always given: left out, uvicorn reads ``WEB_CONCURRENCY``, which some hosts set. The
    shutdown timeout bounds how long a stream that never ends (a client that stops reading) can hold
    up the shutdown, and the bundled backend's: with workers, uvicorn's supervisor passes one signal
    on to them and ignores a second.

    A WebSocket message (the Responses API's WebSocket mode) past ``--max-body`` is answered with the
    protocol's 413 error message and the socket stays open; the WebSocket layer itself refuses, unread,
    one past twice the bound (it closes the socket with 1009, "message too big"), so that no message of
    any size is held in memory.
    """
    from .client_limits import LimitedClientProtocol

    return {
        "host": args.host,
        "port": args.port,
        "workers": args.workers,
        "log_level": "warning",
        "access_log": False,
        "http": LimitedClientProtocol,
        "ws_max_size": 2 * args.max_body,
        # No permessage-deflate: compressing a socket's events runs on the event loop, and four sockets
        # of 8 MB events held /health at 1.2-2.6 s (0.06-0.08 s as HTTP streams); a client that offers
        # it is answered without it, as RFC 7692 lets a server.
        "ws_per_message_deflate": False,
        # uvicorn would take a client's address from X-Forwarded-For of any peer at 127.0.0.1 (its
        # default FORWARDED_ALLOW_IPS): the proxy reads it itself, of --trusted-proxies peers alone
        # (proxy/client_limits.py), so that no header of an untrusted peer names the client.
        "proxy_headers": False,
        # The proxy ends what is still open at the shutdown timeout itself (proxy/graceful.py); uvicorn
        # cancels what is left a little later.
        "timeout_graceful_shutdown": args.shutdown_timeout + SHUTDOWN_GRACE,
    }


def build_app(config: ProxyConfig, log_level: str) -> Starlette:
    """The proxy app of one worker process, with its access log set up."""
    from .app import create_app
    from .sockets import QuietDenials

    logging.basicConfig(level=log_level.upper(), format="%(message)s")
    # Lines are the message alone: a record need not look up its process, its process's name and its
    # thread (a getpid call among them), 4-6 us of each request's access log line (13.8 -> 9.8 us).
    logging.logProcesses = logging.logMultiprocessing = logging.logThreads = False
    # httpx logs each of the proxy's own small requests (props, models, tokenize) at INFO: lines that
    # are not the access log's JSON, in the middle of it.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    logging.getLogger("uvicorn.error").addFilter(QuietDenials())
    app = create_app(config)
    # Everything imported and built so far lives as long as the server: the collector need not scan it
    # again on every full collection while streams are being served.
    gc.freeze()
    return app


@contextlib.contextmanager
def _worker_files(config: ProxyConfig, log_level: str) -> Iterator[Path]:
    """The private directory with the workers' configuration and (unless the user set one) metrics.

    While it exists the environment the workers inherit holds its paths and none of the keys (given as
    ``CONFORMANT_*`` variables, they reach the workers through the file like any other setting).
    """
    metrics = os.environ.get(MULTIPROCESS_DIRECTORY)
    if metrics and not Path(metrics).is_dir():
        raise CommandError(f"{MULTIPROCESS_DIRECTORY} is set to {metrics!r}, which is not a directory")
    with tempfile.TemporaryDirectory(prefix="conformant-serve-") as name:
        directory = Path(name)
        state = {"config": dataclasses.asdict(config), "log_level": log_level}
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        with os.fdopen(os.open(directory / _CONFIG_FILE, flags, 0o600), "w") as out:
            json.dump(state, out)
        variables = {_CONFIG_FILE_VARIABLE: str(directory / _CONFIG_FILE)}
        if not metrics:
            variables[MULTIPROCESS_DIRECTORY] = str(directory / "metrics")
            os.mkdir(variables[MULTIPROCESS_DIRECTORY])
        keys = {name: os.environ.pop(name) for name in KEY_VARIABLES if name in os.environ}
        os.environ.update(variables)
        try:
            yield directory
        finally:
            for name in variables:
                del os.environ[name]
            os.environ.update(keys)


def serve_in_workers(config: ProxyConfig, log_level: str, options: dict[str, Any]) -> None:
    """Serve the proxy from ``options["workers"]`` processes until SIGINT or SIGTERM.

    ``log_level`` is the access log's; ``options`` are uvicorn's (``uvicorn_options``).
    """
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    class Supervisor(Multiprocess):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            for signum in STOP_SIGNALS:
                signal.signal(signum, self.take_stop)

        def take_stop(self, signum: int, _: object) -> None:
            """A stop signal queued for the supervisor's loop (uvicorn's); one after the stop began is
            passed on to the workers as SIGINT at once: each ends its open responses now
            (proxy/graceful.py). uvicorn's supervisor, joining its workers, heard no second signal."""
            if not self.should_exit.is_set():
                self.signal_queue.append(signum)
                return
            for process in self.processes:
                if process.pid is not None:
                    with contextlib.suppress(OSError):  # (gone already)
                        os.kill(process.pid, signal.SIGINT)

        def terminate_all(self) -> None:
            # The supervisor holds the listening socket too: while it did, a connection made during the
            # shutdown waited in the backlog until the last worker was gone and was then reset. Closed
            # here, with the workers' own copies closed as they begin to stop, it is refused at once,
            # as with one worker, and a load balancer or client retries elsewhere.
            for sock in self.sockets:
                sock.close()
            super().terminate_all()

    with _worker_files(config, log_level) as directory:
        # What uvicorn.run does with several workers, with the supervisor above.
        server = uvicorn.Config(f"{__name__}:worker_app", factory=True, **options)
        with contextlib.suppress(KeyboardInterrupt):
            Supervisor(server, sockets=[server.bind_socket()]).run()
        failure = directory / _FAILURE_FILE
        if failure.exists():  # uvicorn stopped every worker because one could not start
            raise CommandError(f"a worker could not start: {failure.read_text()}")


def worker_app() -> Starlette:
    """uvicorn's factory in each spawned worker: the app, from the configuration its parent wrote.

    A worker that cannot build its app leaves the reason for the parent and exits with uvicorn's
    startup-failure status, on which the supervisor stops the server instead of spawning the worker
    again and again.
    """
    from uvicorn.config import STARTUP_FAILURE

    config_file = Path(os.environ[_CONFIG_FILE_VARIABLE])
    try:
        state = json.loads(config_file.read_text())
        fields = state["config"]
        lists = {name: tuple(fields[name]) for name in ("cors_origins", "trusted_proxies")}  # (JSON's)
        config = ProxyConfig(**{**fields, **lists})
        return build_app(config, state["log_level"])
    except Exception as exc:
        logging.getLogger("uvicorn.error").exception("conformant serve: a worker could not start")
        (config_file.parent / _FAILURE_FILE).write_text(f"{type(exc).__name__}: {exc}")
        sys.exit(STARTUP_FAILURE)
