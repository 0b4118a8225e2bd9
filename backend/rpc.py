"""llama.cpp's RPC backend: model layers on remote ggml RPC servers, and such a server from this build.

``conformant backend --rpc HOST:PORT,...`` registers each server's devices in ggml's device registry before
the model loads, as llama.cpp's ``common/arg.cpp`` (``add_rpc_devices``) does for ``llama-server --rpc``:
the RPC registry's ``ggml_backend_rpc_add_server`` proc address gives a registry per server, and
``ggml_backend_register`` adds it. The devices are GPU-type, so the layers ``--n-gpu-layers`` offloads go
to them. llama-cpp-python's own ``rpc_servers`` option does nothing since mid-2025 (llama-cpp-python issue
1914): it only stores the string.

``conformant rpc-worker`` runs ``ggml_backend_rpc_start_server`` on this process's CPU device, the same
server as llama.cpp's ``rpc-server`` tool, from the llama.cpp build llama-cpp-python loads. Both need that
build made with ``-DGGML_RPC=on``.

The RPC protocol has no authentication: whoever reaches the port can run graphs and read and write the
worker's memory. The worker binds 127.0.0.1 unless told otherwise and says so loudly when it is not
loopback (llama.cpp's rpc-server warns the same way).
"""

from __future__ import annotations

import ctypes
import ipaddress
import socket
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

__all__ = [
    "RPC_BUILD_HINT",
    "RpcError",
    "is_loopback",
    "offload_devices",
    "parse_servers",
    "register_servers",
    "rpc_library",
    "start_server",
]

RPC_BUILD_HINT = (
    'rebuild llama-cpp-python with RPC: CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall '
    "--no-cache-dir llama-cpp-python"
)
_CONNECT_TIMEOUT = 5.0
"""Seconds to reach a server before the load gives up: ggml aborts the process on a refused connection."""

_registered: set[str] = set()
"""Endpoints already in ggml's registry: registering one twice would list its devices twice."""


class RpcError(Exception):
    """An RPC setting or server that cannot be used; the message is one line, fit to show a user."""


def parse_servers(value: str) -> tuple[str, ...]:
    """``HOST:PORT,HOST:PORT`` as llama-server's ``--rpc`` takes it; raises ValueError naming the bad one."""
    servers = tuple(part.strip() for part in value.split(",") if part.strip())
    if not servers:
        raise ValueError("names no server; give HOST:PORT, comma-separated")
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{server!r} is not HOST:PORT")
    return servers


def is_loopback(host: str) -> bool:
    """Whether ``host`` stays on this machine (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@cache
def rpc_library() -> SimpleNamespace:
    """ggml's registry calls and the RPC registry's entry points, bound from llama-cpp-python's libraries.

    Raises RpcError when the build has no RPC backend."""
    import llama_cpp
    from llama_cpp._ctypes_extensions import load_shared_library

    if not llama_cpp.llama_supports_rpc():
        raise RpcError(f"this llama-cpp-python was built without the RPC backend; {RPC_BUILD_HINT}")
    lib_dir = Path(str(llama_cpp.__file__)).parent / "lib"
    libs = [load_shared_library("ggml", lib_dir), load_shared_library("ggml-base", lib_dir)]
    signatures: dict[str, tuple[list[Any], Any]] = {
        "ggml_backend_reg_by_name": ([ctypes.c_char_p], ctypes.c_void_p),
        "ggml_backend_reg_get_proc_address": ([ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p),
        "ggml_backend_register": ([ctypes.c_void_p], None),
        "ggml_backend_dev_by_type": ([ctypes.c_int], ctypes.c_void_p),
        "ggml_backend_dev_count": ([], ctypes.c_size_t),
        "ggml_backend_dev_get": ([ctypes.c_size_t], ctypes.c_void_p),
        "ggml_backend_dev_type": ([ctypes.c_void_p], ctypes.c_int),
        "ggml_backend_dev_backend_reg": ([ctypes.c_void_p], ctypes.c_void_p),
        "ggml_backend_reg_name": ([ctypes.c_void_p], ctypes.c_char_p),
    }
    bound = SimpleNamespace()
    for name, (argtypes, restype) in signatures.items():
        fn = next((getattr(lib, name) for lib in libs if hasattr(lib, name)), None)
        if fn is None:
            raise RpcError(f"this llama-cpp-python build lacks {name}; {RPC_BUILD_HINT}")
        fn.argtypes, fn.restype = argtypes, restype
        setattr(bound, name, fn)
    bound.reg = bound.ggml_backend_reg_by_name(b"RPC")
    if not bound.reg:
        raise RpcError(f"this llama.cpp build has no RPC backend registered; {RPC_BUILD_HINT}")
    return bound


def _proc(lib: SimpleNamespace, name: str, prototype: Any) -> Any:
    address = lib.ggml_backend_reg_get_proc_address(lib.reg, name.encode())
    if not address:
        raise RpcError(f"the RPC backend of this build has no {name}; {RPC_BUILD_HINT}")
    return prototype(address)


_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
# void ggml_backend_rpc_start_server(endpoint, cache_dir, n_threads, n_devices, ggml_backend_dev_t *devices)
_START_SERVER = ctypes.CFUNCTYPE(
    None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)
)
_GGML_DEVICE_CPU = 0
_GGML_DEVICE_GPU = 1


def _reachable(server: str) -> None:
    host, _, port = server.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=_CONNECT_TIMEOUT):
            pass
    except OSError as exc:
        raise RpcError(f"RPC server {server} cannot be reached ({exc.strerror or exc})") from None


def register_servers(servers: Sequence[str]) -> int:
    """Each server's devices added to ggml's registry (once per endpoint); the number of devices added.

    A server that cannot be reached is an RpcError before ggml is asked: ggml aborts the whole process on
    a refused connection."""
    lib = rpc_library()
    add_server = _proc(lib, "ggml_backend_rpc_add_server", _ADD_SERVER)
    added = 0
    for server in servers:
        if server in _registered:
            continue
        _reachable(server)
        reg = add_server(server.encode())
        if not reg:
            raise RpcError(f"RPC server {server} offers no device")
        lib.ggml_backend_register(reg)
        _registered.add(server)
        added += 1
    return added


def offload_devices() -> list[int]:
    """The devices layers are offloaded to, in llama.cpp's default order: the RPC servers' first (fewer
    transfers over the network), then local GPUs.

    Passed to the loader explicitly (``llama_model_params.devices``): measured with llama-cpp-python
    0.3.36, its default device selection left every layer on the CPU although the RPC devices were in
    ggml's registry (device count 1 -> 2, type GPU), while the same devices given explicitly took them."""
    lib = rpc_library()
    gpus = [
        dev
        for dev in (lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count()))
        if lib.ggml_backend_dev_type(dev) == _GGML_DEVICE_GPU
    ]
    reg_name = lib.ggml_backend_reg_name
    on_rpc = [dev for dev in gpus if reg_name(lib.ggml_backend_dev_backend_reg(dev)) == b"RPC"]
    return on_rpc + [dev for dev in gpus if dev not in on_rpc]


def start_server(host: str, port: int, threads: int, cache_dir: str | None) -> None:
    """Serve this process's CPU device over ggml's RPC protocol on ``host:port``; returns only if ggml
    cannot serve (it logs why). Blocks the calling thread (ctypes releases the GIL meanwhile)."""
    lib = rpc_library()
    start = _proc(lib, "ggml_backend_rpc_start_server", _START_SERVER)
    cpu = lib.ggml_backend_dev_by_type(_GGML_DEVICE_CPU)
    if not cpu:
        raise RpcError("this llama.cpp build has no CPU device to serve")
    devices = (ctypes.c_void_p * 1)(cpu)
    endpoint = f"{host}:{port}".encode()
    start(endpoint, cache_dir.encode() if cache_dir else None, threads, 1, devices)
