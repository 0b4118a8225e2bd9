"""``conformant rpc-worker``: a ggml RPC server on this machine's CPU, for ``conformant backend --rpc``.

The same server as llama.cpp's ``rpc-server`` tool, started from the llama.cpp build llama-cpp-python
loads (backend/rpc.py), so a worker and the backend that uses it always speak the same protocol version.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from conformance.settings import CommandError, Setting, add_settings, port, positive_integer, text

__all__ = ["RPC_WORKER_SETTINGS", "register", "run"]

_LOOPBACK = "127.0.0.1"
RPC_WORKER_SETTINGS: tuple[Setting[Any], ...] = (
    Setting(
        "host",
        text,
        _LOOPBACK,
        "address to listen on; the RPC protocol has no authentication: keep it on loopback or a private"
        " network",
        env="RPC_HOST",
    ),
    Setting("port", port, 50052, "port to listen on (llama.cpp's rpc-server default)", env="RPC_PORT"),
    Setting(
        "threads",
        positive_integer,
        max(1, (os.cpu_count() or 2) // 2),
        "threads for the CPU device",
        aliases=("-t",),
        metavar="N",
        shown="half the CPUs",
        env="RPC_THREADS",
    ),
    Setting[str | None](
        "cache",
        text,
        None,
        "directory that keeps tensors sent once, so a backend that restarts loads faster",
        metavar="DIR",
        shown="no cache",
        env="RPC_CACHE",
    ),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "rpc-worker",
        help="serve this machine's CPU to `conformant backend --rpc` (llama.cpp's RPC server)",
        description="Start a ggml RPC server (llama.cpp's rpc-server) from the llama.cpp build "
        "llama-cpp-python loads. It needs llama-cpp-python built with -DGGML_RPC=on. The protocol has no "
        "authentication: whoever reaches the port controls the worker, so it binds 127.0.0.1 unless told "
        "otherwise.",
    )
    add_settings(parser, RPC_WORKER_SETTINGS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from backend.cli import require_llama_cpp

    require_llama_cpp()
    from backend.rpc import RpcError, is_loopback, rpc_library, start_server

    if not is_loopback(args.host):
        print(
            f"WARNING: rpc-worker listens on {args.host}, not loopback. The RPC protocol has no "
            "authentication: anyone who reaches this port can run code on this worker's memory. Keep it "
            "on a private network.",
            file=sys.stderr,
        )
    if args.cache:
        os.makedirs(args.cache, exist_ok=True)
    import llama_cpp

    llama_cpp.llama_backend_init()
    try:
        rpc_library()  # a build without RPC is one line before any "serving on" (issue 32)
    except RpcError as exc:
        raise CommandError(str(exc)) from None
    failed: list[str] = []

    def serve() -> None:
        try:
            start_server(args.host, args.port, args.threads, args.cache)
        except RpcError as exc:
            failed.append(str(exc))
        failed.append(failed[0] if failed else f"the RPC server on {args.host}:{args.port} stopped")
        os.kill(os.getpid(), signal.SIGTERM)

    print(f"rpc-worker: serving on {args.host}:{args.port} with {args.threads} thread(s)", file=sys.stderr)
    # ggml's server loop never returns; a thread of its own leaves the main thread free to take SIGINT and
    # SIGTERM, which end the process (the loop holds no state worth saving).
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    threading.Thread(target=serve, name="ggml-rpc-server", daemon=True).start()
    stopped.wait()
    if failed:
        raise CommandError(failed[0])
    return 0
