"""``conformant serve``: the normalizing proxy, in front of ``--upstream`` or of the bundled backend."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import httpx

from conformance.protocols.responses.store_settings import opened_store
from conformance.protocols.spooled_text import temporary_file_problem
from conformance.settings import CommandError, add_settings, check_can_listen

from .config import SERVE_SETTINGS, UpstreamKind, proxy_config, upstream_url_problem

__all__ = ["register", "run"]

_BACKEND_WAIT = 600.0
_BASE_MODEL_NOTE = (
    "conformant serve: the bundled Gemma 3 270M is a base model (no chat tuning): it continues text, for "
    "wiring and tests; for real answers give --model a GGUF of an instruction-tuned model"
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "serve",
        help="OpenAI endpoint that repairs an upstream server's output (or runs the bundled backend)",
        description="A drop-in OpenAI endpoint in front of any OpenAI-compatible server. Every flag "
        "can also be set as the CONFORMANT_* variable its help names (e.g. CONFORMANT_UPSTREAM).",
    )
    add_settings(p, SERVE_SETTINGS)
    p.set_defaults(func=run)


def _upstream_url(text: str) -> str:
    """``--upstream`` checked now, so that a mistake is one line at the start, not a 502 on every request."""
    # A password in it is sent on some requests and printed in logs: keys go in --upstream-api-key.
    if (problem := upstream_url_problem(text, "give the key with --upstream-api-key")) is not None:
        raise CommandError(f"--upstream {problem}")
    return text


def _routing_file(args: argparse.Namespace) -> list[str]:
    """``--config`` read now, so that a bad file is one line at the start (naming the key and the
    problem); its upstreams' URLs, the first of which stands for them where one is needed."""
    if args.config_file is None:
        return []
    if args.upstream:
        raise CommandError("give either --upstream (one upstream) or --config (several), not both")
    from .routing import ConfigFileError, load_routing_file

    try:
        routing = load_routing_file(args.config_file)
    except ConfigFileError as exc:
        raise CommandError(str(exc)) from None
    return [upstream.url for upstream in routing.upstreams]


_THIS_MACHINE = frozenset({"127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0", "::", ""})


def _not_itself(urls: list[str], host: str, port: int) -> None:
    """Refuse an upstream that is this server's own address: every request would come back to it until
    the connection cap (issue 32: the example config sent a model to port 8000, serve's default)."""
    for text in urls:
        url = httpx.URL(text)
        here = url.host in _THIS_MACHINE and (host in _THIS_MACHINE or host == url.host)
        if (url.port or (443 if url.scheme == "https" else 80)) == port and (here or url.host == host):
            raise CommandError(
                f"the upstream {text} is this server's own address (--port {port}): every request would "
                "come back to it. Serve on another port (--port), or start the upstream on another."
            )


def _warn_if_silent(upstream: str) -> None:
    """One line where nothing listens at ``--upstream`` now: serve still starts (the upstream may be on
    its way up), but every request would be a 502 with not a word at the start (issue 32)."""
    url = httpx.URL(upstream)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.host, port), timeout=2).close()
    except OSError as exc:
        print(
            f"conformant serve: nothing answers at {upstream} yet ({exc.strerror or exc}); "
            "requests get 502 until it does",
            file=sys.stderr,
            flush=True,
        )


def _warn_if_no_temporary_files() -> None:
    """One line where no temporary file can be made (``TMPDIR`` missing or read-only): serve still
    starts, as every answer shorter than 1 Mi characters needs none, but a longer Responses text would
    fail mid-stream with no word at the start (issue 32, hardening); the line names the directory and
    what to set."""
    if (problem := temporary_file_problem()) is not None:
        print(f"conformant serve: {problem}", file=sys.stderr, flush=True)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def _backend(model: str | None) -> Iterator[str]:
    """The bundled backend as a subprocess on a free port; yields its URL once /health answers.

    It logs its warnings and errors only: its start-up lines named its own random port, which no client
    should use, and its access log gave each request a second line beside the proxy's.
    """
    port = free_port()
    args = [sys.executable, "-m", "conformance", "backend", "--host", "127.0.0.1", "--port", str(port)]
    args += ["--log-level", "warning"]
    if model:
        args += ["--model", model]
    # A process group of its own: a terminal's Ctrl-C goes to serve's group alone, and serve stops the
    # backend itself once its open responses have ended. In serve's group a second Ctrl-C reached the
    # backend's uvicorn too, which force-exited with four tracebacks (issue 32, item 9).
    proc = subprocess.Popen(args, process_group=0, preexec_fn=_stopped_with_serve(os.getpid()))
    url = f"http://127.0.0.1:{port}"
    try:
        what = os.path.basename(model) if model else "Gemma 3 270M"
        print(f"conformant serve: starting the bundled backend ({what}) ...", file=sys.stderr, flush=True)
        deadline = time.monotonic() + _BACKEND_WAIT
        while True:
            if proc.poll() is not None:
                raise CommandError(f"the bundled backend exited with status {proc.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise CommandError("the bundled backend did not become ready")
            time.sleep(0.5)
        print("conformant serve: backend ready", file=sys.stderr, flush=True)
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _stopped_with_serve(serve: int) -> Callable[[], None] | None:
    """What the backend runs before it starts, on Linux: a SIGTERM (its graceful stop) once serve is gone.

    Out of serve's group, a backend outlived a serve that was killed (SIGKILL, the OOM killer, a test
    harness's deadline while a long prompt was still being read): about 1 GB of memory held for ever,
    and its port with it. Elsewhere None, and serve's own stop remains the only one."""
    if not sys.platform.startswith("linux"):
        return None

    def asks_for_term() -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != serve:  # serve died before the request was made: nothing would send it
            os._exit(1)

    return asks_for_term


class _Terminated(SystemExit):
    """SIGTERM, raised where the process stood when it came."""


def _exit_on_sigterm(signum: int, _: object) -> None:
    raise _Terminated(128 + signum)


def _checked_start(args: argparse.Namespace) -> tuple[str | None, str]:
    """What ``serve`` checks before it starts anything, each mistake one line (``CommandError``): the
    first routed upstream (None without ``--config``) and the response store every worker opens."""
    if args.upstream:
        _upstream_url(args.upstream)
    routed_urls = _routing_file(args)
    if args.model and not args.upstream and not routed_urls and not os.path.isfile(args.model):
        # One line now, not the backend's start, its error and its exit status (issue 32).
        raise CommandError(f"--model {args.model}: no such file")
    _not_itself([args.upstream] if args.upstream else routed_urls, args.host, args.port)
    check_can_listen(args.host, args.port)
    store = opened_store(args, "serve").location  # every worker opens this one (a file or a database)
    if args.upstream:
        _warn_if_silent(args.upstream)  # (last: a mistake above is the one line printed)
    _warn_if_no_temporary_files()
    return (routed_urls[0] if routed_urls else None), store


def _announce(args: argparse.Namespace, routed: str | None) -> None:
    """The last start-up lines, and the only address printed: the one clients use."""
    if not args.upstream and not routed and not args.model:
        print(_BASE_MODEL_NOTE, file=sys.stderr, flush=True)
    workers = f" ({args.workers} workers)" if args.workers > 1 else ""
    target = args.upstream or (routed and f"the upstreams of {args.config_file}") or "the bundled backend"
    print(
        f"conformant serve: http://{args.host}:{args.port}/v1 -> {target}{workers}",
        file=sys.stderr,
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from .client_limits import raise_open_file_limit
    from .workers import build_app, serve_in_workers, uvicorn_options

    # uvicorn shuts down on SIGTERM and then raises the signal again with the previous handler; with
    # the default one the process would die before it stops the backend it started.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    raise_open_file_limit()  # each connection is a file: the limits bound them, not a soft 1,024
    routed, store = _checked_start(args)
    with contextlib.ExitStack() as stack:
        upstream = args.upstream or routed or stack.enter_context(_backend(args.model))
        # The bundled backend is detected as any upstream: its /props states its sampling defaults
        # (the proxy read none and asked the API's 1.0 / 1.0 of it) and is no llama.cpp server's.
        kind: UpstreamKind = args.upstream_kind
        config = proxy_config(args, upstream=upstream, upstream_kind=kind, responses_store=store)
        _announce(args, routed)
        if args.workers > 1:
            serve_in_workers(config, args.log_level, uvicorn_options(args))
        else:
            # uvicorn raises the SIGTERM it stopped on again once it has shut down: the stop was
            # graceful, and the exit status is 0, as it is with several workers (uvicorn's supervisor)
            # and after SIGINT. A SIGTERM before the server ran (the backend starting) still exits 143.
            with contextlib.suppress(_Terminated):
                uvicorn.run(build_app(config, args.log_level), **uvicorn_options(args))
    return 0
