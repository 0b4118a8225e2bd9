"""``conformant serve``: the normalizing proxy, in front of ``--upstream`` or of the bundled backend."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from conformance.cli import CommandError

from .config import ProxyConfig, UpstreamKind, variable

__all__ = ["register", "run"]

_BACKEND_WAIT = 600.0
_BASE_MODEL_NOTE = (
    "conformant serve: the bundled Gemma 3 270M is a base model (no chat tuning): it continues text, for "
    "wiring and tests; for real answers give --model a GGUF of an instruction-tuned model"
)


def _env(name: str, default: Any = None) -> Any:
    return os.environ.get(variable(name), default)


_CONFIG_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ProxyConfig)}


def _setting(name: str) -> str:
    """``CONFORMANT_<name>``, else :class:`ProxyConfig`'s default for the setting, as argparse's default
    text: the config is the one place a default is written, for the CLI and for code that builds it."""
    return str(_env(name, _CONFIG_DEFAULTS[name.lower()]))


def _number(
    kind: type[int] | type[float], setting: str, *, zero: bool = False
) -> Callable[[str], int | float]:
    """argparse ``type`` for a number flag, above 0 (or at least 0 with ``zero``), that names its
    variable when the text is no such number.

    The value from ``CONFORMANT_<setting>`` is given to argparse as the flag's default *text*, which
    argparse converts only when ``serve`` is the command: a bad variable is then one usage line (exit 2)
    for ``serve``, and no concern of the other commands.
    """

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not (value >= 0 if zero else value > 0):  # NaN fails both comparisons
            qualifier = "" if value is None else ("non-negative " if zero else "positive ")
            noun = qualifier + ("integer" if kind is int else "number")
            article = "an" if noun[0] in "aeiou" else "a"
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {article} {noun} (from the flag or {variable(setting)})"
            )
        return value

    return parse


_LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
_UPSTREAM_KINDS = ("auto", "openai", "llamacpp")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def _one_of(setting: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    """argparse ``type`` for a flag with ``choices``: argparse checks them on flags, not on defaults, so
    a bad ``CONFORMANT_<setting>`` is refused here (case aside)."""

    def parse(text: str) -> str:
        if text.lower() not in choices:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not one of {', '.join(choices)} (from the flag or {variable(setting)})"
            )
        return text.lower()

    return parse


def _port(text: str) -> int:
    port = _number(int, "PORT")(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a TCP port, 1-65535 (from the flag or {variable('PORT')})"
        )
    return int(port)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "serve",
        help="OpenAI endpoint that repairs an upstream server's output (or runs the bundled backend)",
        description="A drop-in OpenAI endpoint in front of any OpenAI-compatible server. Every flag "
        "can also be set as CONFORMANT_<FLAG> (e.g. CONFORMANT_UPSTREAM).",
    )
    p.add_argument(
        "--upstream", default=_env("UPSTREAM"), help="upstream base URL; omitted: start the backend"
    )
    p.add_argument("--host", default=_env("HOST", "127.0.0.1"))
    p.add_argument("--port", type=_port, default=_env("PORT", "8000"))
    p.add_argument("--api-key", default=_env("API_KEY"), help="key clients must send as a bearer token")
    p.add_argument("--upstream-api-key", default=_env("UPSTREAM_API_KEY"), help="key sent to the upstream")
    p.add_argument("--model-alias", default=_env("MODEL_ALIAS"), help="model name clients see")
    p.add_argument(
        "--upstream-kind",
        type=_one_of("UPSTREAM_KIND", _UPSTREAM_KINDS),
        choices=_UPSTREAM_KINDS,
        default=_setting("UPSTREAM_KIND"),
    )
    p.add_argument(
        "--connect-timeout", type=_number(float, "CONNECT_TIMEOUT"), default=_setting("CONNECT_TIMEOUT")
    )
    p.add_argument(
        "--first-byte-timeout",
        type=_number(float, "FIRST_BYTE_TIMEOUT"),
        default=_setting("FIRST_BYTE_TIMEOUT"),
    )
    p.add_argument("--idle-timeout", type=_number(float, "IDLE_TIMEOUT"), default=_setting("IDLE_TIMEOUT"))
    p.add_argument(
        "--max-body",
        type=_number(int, "MAX_BODY"),
        default=_setting("MAX_BODY"),
        help="bytes (413 above)",
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        help="allowed origin (repeatable; replaces CONFORMANT_CORS_ORIGINS, a comma-separated list)",
    )
    p.add_argument(
        "--no-fan-out",
        action="store_true",
        default=_env("NO_FAN_OUT", ""),
        help="pass n>1 and prompt arrays through instead of fanning out",
    )
    p.add_argument(
        "--default-max-tokens",
        type=_number(int, "DEFAULT_MAX_TOKENS"),
        default=_env("DEFAULT_MAX_TOKENS"),
        help="max_tokens for requests that give no limit (default: none, the upstream's own)",
    )
    p.add_argument(
        "--max-fan-out",
        type=_number(int, "MAX_FAN_OUT"),
        default=_setting("MAX_FAN_OUT"),
        help="upstream requests one request may become (prompts x n; a 400 above)",
    )
    p.add_argument(
        "--max-upstream-connections",
        type=_number(int, "MAX_UPSTREAM_CONNECTIONS"),
        default=_setting("MAX_UPSTREAM_CONNECTIONS"),
        help="upstream connections open at once, per worker (further requests wait in turn)",
    )
    p.add_argument(
        "--client-timeout",
        type=_number(float, "CLIENT_TIMEOUT"),
        default=_setting("CLIENT_TIMEOUT"),
        help="seconds a client has to send a request's head, and again its body (408 after)",
    )
    p.add_argument(
        "--max-connections",
        type=_number(int, "MAX_CONNECTIONS"),
        default=_setting("MAX_CONNECTIONS"),
        help="open client connections per worker past which requests but /health get a 503",
    )
    p.add_argument(
        "--model", default=_env("MODEL"), help="model for the bundled backend (without --upstream)"
    )
    p.add_argument(
        "--workers",
        type=_number(int, "WORKERS"),
        default=_env("WORKERS", "1"),
        help="processes serving requests, each on its own event loop (one per core spreads the load)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=_number(float, "SHUTDOWN_TIMEOUT", zero=True),
        default=_setting("SHUTDOWN_TIMEOUT"),
        help="seconds open streams get to finish on SIGINT or SIGTERM before they are cut",
    )
    p.add_argument(
        "--log-level",
        type=_one_of("LOG_LEVEL", _LOG_LEVELS),
        choices=_LOG_LEVELS,
        default=_env("LOG_LEVEL", "info"),
    )
    p.set_defaults(func=run)


def _cors_origins(flags: list[str] | None) -> tuple[str, ...]:
    """The flags' origins, or else the variable's (a comma-separated list, spaces allowed)."""
    listed = flags if flags is not None else _env("CORS_ORIGINS", "").split(",")
    return tuple(origin.strip() for origin in listed if origin.strip())


def _no_fan_out(value: bool | str) -> bool:
    """The flag (True), or the text of ``CONFORMANT_NO_FAN_OUT``: a yes or a no, else a usage error."""
    if isinstance(value, bool):
        return value
    if value.strip().lower() not in _TRUE + _FALSE:
        raise CommandError(
            f"{variable('NO_FAN_OUT')}={value!r} is neither a yes (1, true) nor a no (0, false)"
        )
    return value.strip().lower() in _TRUE


def _upstream_url(text: str) -> str:
    """``--upstream`` checked now, so that a mistake is one line at the start, not a 502 on every request."""
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, ValueError) as exc:
        raise CommandError(f"--upstream {text!r} is not a URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host or not 0 < (url.port or 80) < 65536:
        raise CommandError(f"--upstream must be an http(s) URL with a host and a valid port, not {text!r}")
    if url.userinfo:
        # Sent as a password on some requests and printed in logs: keys go in --upstream-api-key.
        raise CommandError(
            "--upstream must not hold a user or password; give the key with --upstream-api-key"
        )
    return text


def _check_can_listen(host: str, port: int) -> None:
    """Fail now, in one line, if the address is taken (uvicorn would log its own error and exit 1)."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(addresses[0][0], socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(addresses[0][4])
    except OSError as exc:
        raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


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
    proc = subprocess.Popen(args)
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


class _Terminated(SystemExit):
    """SIGTERM, raised where the process stood when it came."""


def _exit_on_sigterm(signum: int, _: object) -> None:
    raise _Terminated(128 + signum)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from .client_limits import raise_open_file_limit
    from .workers import build_app, serve_in_workers, uvicorn_options

    # uvicorn shuts down on SIGTERM and then raises the signal again with the previous handler; with
    # the default one the process would die before it stops the backend it started.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    cors_origins, fan_out = _cors_origins(args.cors_origin), not _no_fan_out(args.no_fan_out)
    raise_open_file_limit()  # each connection is a file: the limits bound them, not a soft 1,024
    if args.upstream:
        _upstream_url(args.upstream)
    _check_can_listen(args.host, args.port)
    with contextlib.ExitStack() as stack:
        upstream = args.upstream or stack.enter_context(_backend(args.model))
        # The bundled backend is known: no /props probe, which it answered 404 in its log.
        kind: UpstreamKind = (
            "openai" if not args.upstream and args.upstream_kind == "auto" else args.upstream_kind
        )
        config = ProxyConfig(
            upstream=upstream,
            api_key=args.api_key,
            upstream_api_key=args.upstream_api_key,
            model_alias=args.model_alias,
            upstream_kind=kind,
            connect_timeout=args.connect_timeout,
            first_byte_timeout=args.first_byte_timeout,
            idle_timeout=args.idle_timeout,
            max_body=args.max_body,
            cors_origins=cors_origins,
            fan_out=fan_out,
            default_max_tokens=args.default_max_tokens,
            max_fan_out=args.max_fan_out,
            max_upstream_connections=args.max_upstream_connections,
            client_timeout=args.client_timeout,
            max_connections=args.max_connections,
            shutdown_timeout=args.shutdown_timeout,
        )
        workers = f" ({args.workers} workers)" if args.workers > 1 else ""
        if not args.upstream and not args.model:
            print(_BASE_MODEL_NOTE, file=sys.stderr, flush=True)
        target = args.upstream or "the bundled backend"
        # The last start-up line, and the only address printed: the one clients use.
        print(
            f"conformant serve: http://{args.host}:{args.port}/v1 -> {target}{workers}",
            file=sys.stderr,
            flush=True,
        )
        if args.workers > 1:
            serve_in_workers(config, args.log_level, uvicorn_options(args))
        else:
            # uvicorn raises the SIGTERM it stopped on again once it has shut down: the stop was
            # graceful, and the exit status is 0, as it is with several workers (uvicorn's supervisor)
            # and after SIGINT. A SIGTERM before the server ran (the backend starting) still exits 143.
            with contextlib.suppress(_Terminated):
                uvicorn.run(build_app(config, args.log_level), **uvicorn_options(args))
    return 0
