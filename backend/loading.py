"""Load a GGUF model with llama.cpp: GPU offload, multi-GPU split, MoE expert placement, tensor overrides.

llama-cpp-python's high-level ``Llama`` drops ``tensor_buft_overrides``; this module fills the low-level
``llama_model_params`` itself (the ctypes struct carries the field as a plain pointer) and resolves buffer
type names ("CPU", "CUDA0") through ggml's device registry, as llama.cpp's own ``--override-tensor`` does.

llama_cpp is imported lazily so the option parsing here works without the backend extra installed.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from types import ModuleType, SimpleNamespace, TracebackType
from typing import Any, Literal

from backend.placement import (
    LOG_WARN,
    LoadLog,
    Placement,
    PlacementError,
    TensorOverride,
    moe_overrides,
    parse_override_specs,
)
from conformance.settings import Setting, add_settings, boolean, integer, one_of

log = logging.getLogger("conformant.backend")
llama_log = logging.getLogger("conformant.backend.llama")

SplitMode = Literal["none", "layer", "row"]
SPLIT_MODES: tuple[SplitMode, ...] = ("none", "layer", "row")

GGUF_MAGIC = b"GGUF"
CUDA_BUILD_HINT = (
    'rebuild llama-cpp-python with GPU support: CMAKE_ARGS="-DGGML_CUDA=on" pip install llama-cpp-python'
)


def _gpu_layers(value: str) -> int:
    if value.strip().lower() == "all":
        return -1
    try:
        return int(value)
    except ValueError:
        raise ValueError("is not a number of layers or 'all'") from None


def _shares(value: str) -> list[float]:
    try:
        return [float(part) for part in value.replace("/", ",").split(",")]
    except ValueError:
        raise ValueError("is not comma-separated numbers, e.g. 3,1") from None


def _rpc_servers(value: str) -> tuple[str, ...]:
    from backend.rpc import parse_servers

    return parse_servers(value)


def _rules(value: str) -> tuple[str, ...]:
    """One ``--override-tensor`` value, kept whole: LoadOptions splits its comma-separated rules."""
    return (value,)


# The loading flags (llama.cpp's names, short forms and meanings); LoadOptions takes its defaults from them.
N_GPU_LAYERS = Setting(
    "n_gpu_layers",
    _gpu_layers,
    0,
    "layers to offload to the GPU ('all' or a negative number: every layer)",
    aliases=("-ngl",),
    metavar="N",
)
SPLIT_MODE = Setting[SplitMode](
    "split_mode",
    one_of(SPLIT_MODES),  # type: ignore[arg-type]  # one_of returns one of them
    "layer",
    "how to split across GPUs",
    aliases=("-sm",),
    choices=SPLIT_MODES,
)
TENSOR_SPLIT = Setting[list[float] | None](
    "tensor_split",
    _shares,
    None,
    "share of the model per GPU, comma-separated, e.g. 3,1",
    aliases=("-ts",),
    metavar="SHARES",
    shown="by free memory",
)
MAIN_GPU = Setting("main_gpu", integer, 0, "GPU for split mode none", aliases=("-mg",), metavar="I")
CPU_MOE = Setting(
    "cpu_moe", boolean, False, "keep all MoE expert weights on the CPU", aliases=("-cmoe",), kind="switch"
)
N_CPU_MOE = Setting(
    "n_cpu_moe",
    integer,
    0,
    "keep the MoE expert weights of the first N layers on the CPU",
    aliases=("-ncmoe",),
    metavar="N",
)
OVERRIDE_TENSOR = Setting[tuple[str, ...]](
    "override_tensor",
    _rules,
    (),
    "put tensors whose name matches REGEX in buffer type BUFFER (e.g. CPU, CUDA0); repeatable, "
    "or comma-separated",
    aliases=("-ot",),
    metavar="REGEX=BUFFER",
    kind="list",
)
NO_MMAP = Setting("no_mmap", boolean, False, "read the weights into memory instead of mapping", kind="switch")
MLOCK = Setting("mlock", boolean, False, "lock the weights in RAM (no swapping)", kind="switch")
NO_REPACK = Setting(
    "no_repack",
    boolean,
    False,
    "keep CPU weights as stored, without repacking them for AMX/SIMD",
    kind="switch",
)
RPC = Setting[tuple[str, ...]](
    "rpc",
    _rpc_servers,
    (),
    "ggml RPC servers (`conformant rpc-worker`, llama.cpp's rpc-server) to place layers on, "
    "comma-separated; the layers --n-gpu-layers offloads go to them, every layer when it is 0",
    metavar="HOST:PORT,...",
    shown="none",
)
LOAD_SETTINGS: tuple[Setting[Any], ...] = (
    N_GPU_LAYERS,
    RPC,
    SPLIT_MODE,
    TENSOR_SPLIT,
    MAIN_GPU,
    CPU_MOE,
    N_CPU_MOE,
    OVERRIDE_TENSOR,
    NO_MMAP,
    MLOCK,
    NO_REPACK,
)


class ModelLoadError(Exception):
    """The model cannot be loaded as asked; the message is one line, fit to show a user as is."""


@dataclass
class LoadOptions:
    """How to load the weights. Field names and meanings follow llama.cpp's command-line flags."""

    n_gpu_layers: int = N_GPU_LAYERS.default  # negative = all
    rpc: tuple[str, ...] = RPC.default
    split_mode: SplitMode = SPLIT_MODE.default
    tensor_split: list[float] | None = TENSOR_SPLIT.default
    main_gpu: int = MAIN_GPU.default
    cpu_moe: bool = CPU_MOE.default
    n_cpu_moe: int = N_CPU_MOE.default
    override_tensor: list[str] = field(default_factory=lambda: list(OVERRIDE_TENSOR.default))
    use_mmap: bool = not NO_MMAP.default
    use_mlock: bool = MLOCK.default
    repack: bool = not NO_REPACK.default  # llama.cpp's default: repack for the CPU's SIMD/AMX kernels

    def overrides(self, cpu_buffer_type: str = "CPU") -> list[TensorOverride]:
        """All placement rules in the order llama.cpp tries them (first match wins): explicit ones first."""
        explicit = parse_override_specs(self.override_tensor)
        return explicit + moe_overrides(cpu_buffer_type, cpu_moe=self.cpu_moe, n_cpu_moe=self.n_cpu_moe)

    def check(self) -> None:
        """Reject what can be rejected without loading anything; raises ModelLoadError."""
        if self.split_mode not in SPLIT_MODES:
            raise ModelLoadError(
                f"--split-mode must be one of {', '.join(SPLIT_MODES)}, not {self.split_mode!r}"
            )
        if self.main_gpu < 0:
            raise ModelLoadError(f"--main-gpu must be 0 or more, not {self.main_gpu}")
        if self.tensor_split is not None and (
            not self.tensor_split
            or any(not share >= 0 for share in self.tensor_split)
            or sum(self.tensor_split) <= 0
        ):
            raise ModelLoadError("--tensor-split needs non-negative shares with a positive sum, e.g. 3,1")
        try:
            self.overrides()
        except PlacementError as exc:
            raise ModelLoadError(str(exc)) from None


# --- command line -------------------------------------------------------------------------------------------


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """Add llama.cpp's model-loading flags (same names, same meaning) to ``parser``."""
    add_settings(parser.add_argument_group("model placement (GPU offload, MoE experts)"), LOAD_SETTINGS)


def options_from_args(args: argparse.Namespace) -> LoadOptions:
    """LoadOptions from flags added by add_load_arguments; raises ModelLoadError on an invalid combination."""
    opts = LoadOptions(
        n_gpu_layers=args.n_gpu_layers,
        rpc=tuple(args.rpc),
        split_mode=args.split_mode,
        tensor_split=args.tensor_split,
        main_gpu=args.main_gpu,
        cpu_moe=args.cpu_moe,
        n_cpu_moe=args.n_cpu_moe,
        override_tensor=list(args.override_tensor),
        use_mmap=not args.no_mmap,
        use_mlock=args.mlock,
        repack=not args.no_repack,
    )
    opts.check()
    return opts


# --- the loaded model ---------------------------------------------------------------------------------------


class LoadedModel:
    """A llama_model plus what must outlive it: the params' ctypes arrays, which llama.cpp may read later."""

    def __init__(
        self, path: str, model: int, options: LoadOptions, placement: Placement, keepalive: tuple[object, ...]
    ) -> None:
        self.path = path
        self.model: int | None = model  # llama_model *
        self.options = options
        self.placement = placement
        self._keepalive = keepalive

    @property
    def closed(self) -> bool:
        return self.model is None

    def close(self) -> None:
        """Free the model (once; later calls do nothing). Free every context made from it first."""
        if self.model is not None:
            _llama().llama_model_free(self.model)
            self.model = None
            self._keepalive = ()

    def __enter__(self) -> LoadedModel:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def load_model(path: str, opts: LoadOptions | None = None) -> LoadedModel:
    """Load a GGUF file as ``opts`` asks and report where the tensors went. Raises ModelLoadError."""
    opts = opts or LoadOptions()
    opts.check()
    _check_gguf_file(path)
    llama = _llama()
    llama.llama_backend_init()
    if opts.rpc:
        opts = _with_rpc_servers(opts)
    registry = BufferTypes.from_registry()
    gpus = registry.gpu_count
    if opts.n_gpu_layers != 0 and gpus == 0:
        log.warning("no GPU backend in this llama.cpp build: --n-gpu-layers is ignored (%s)", CUDA_BUILD_HINT)
    if gpus and opts.main_gpu >= gpus:
        raise ModelLoadError(f"--main-gpu {opts.main_gpu} does not exist: {gpus} GPU(s) found")
    try:
        rules = opts.overrides(cpu_buffer_type=registry.cpu_name)
        resolved = [(rule, registry.resolve(rule.buffer_type)) for rule in rules]
    except PlacementError as exc:
        raise ModelLoadError(str(exc)) from None
    params, keepalive = _model_params(llama, opts, registry, resolved)

    with _captured_log(llama) as load_log:
        model = llama.llama_model_load_from_file(os.fsencode(path), params)
    _forward(load_log)
    if not model:
        raise ModelLoadError(f"cannot load model {path}: {_load_failure(load_log)}")
    placement = load_log.placement(rules)
    for line in placement.summary():
        log.info("%s", line)
    for rule in placement.unmatched:
        log.warning(
            "--override-tensor %s placed no tensor: no tensor name matches it, or an earlier rule won", rule
        )
    return LoadedModel(path, model, opts, placement, keepalive)


def _with_rpc_servers(opts: LoadOptions) -> LoadOptions:
    """The RPC servers' devices registered before the registry is read: llama.cpp then offloads layers to
    them as to GPUs (llama-server --rpc). ``--n-gpu-layers 0`` would leave them idle: it means all here."""
    from backend.rpc import RpcError, register_servers

    try:
        register_servers(opts.rpc)
    except RpcError as exc:
        raise ModelLoadError(str(exc)) from None
    return replace(opts, n_gpu_layers=-1) if opts.n_gpu_layers == 0 else opts


def _model_params(
    llama: ModuleType, opts: LoadOptions, registry: BufferTypes, resolved: list[tuple[TensorOverride, int]]
) -> tuple[Any, tuple[object, ...]]:
    """llama_model_params for ``opts``, and the ctypes arrays it points into (to keep alive)."""
    params = llama.llama_model_default_params()
    params.n_gpu_layers = opts.n_gpu_layers
    params.split_mode = SPLIT_MODES.index(opts.split_mode)  # llama_split_mode: NONE, LAYER, ROW
    params.main_gpu = opts.main_gpu
    params.load_mode = _load_mode(llama, opts, params.load_mode)
    # AND, not assignment: a process-wide policy may already have turned repacking off in the defaults.
    params.use_extra_bufts = params.use_extra_bufts and opts.repack and not _amx_faults(registry)
    keepalive: list[object] = []
    if opts.rpc:
        from backend.rpc import offload_devices

        devices = offload_devices()
        listed = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)  # NULL-terminated
        params.devices = ctypes.cast(listed, ctypes.c_void_p)
        keepalive.append(listed)
    if opts.tensor_split is not None:
        n_max = llama.llama_max_devices()
        if len(opts.tensor_split) > n_max:
            raise ModelLoadError(
                f"--tensor-split has {len(opts.tensor_split)} shares; this build allows {n_max}"
            )
        split = (ctypes.c_float * n_max)(*opts.tensor_split)
        params.tensor_split = split
        keepalive.append(split)
    if resolved:
        overrides = (_BuftOverride * (len(resolved) + 1))()  # zeroed last entry: the NULL terminator
        patterns = [rule.pattern.encode() for rule, _ in resolved]
        for i, (pattern, (_, buft)) in enumerate(zip(patterns, resolved, strict=True)):
            overrides[i].pattern = pattern
            overrides[i].buft = buft
        params.tensor_buft_overrides = ctypes.cast(overrides, ctypes.c_void_p)
        keepalive += [overrides, patterns]
    return params, tuple(keepalive)


class _BuftOverride(ctypes.Structure):
    # struct llama_model_tensor_buft_override: llama-cpp-python declares no Python class for it.
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def _load_mode(llama: ModuleType, opts: LoadOptions, default: int) -> int:
    # llama.cpp replaced use_mmap/use_mlock with one load_mode; its default (auto) maps the file where it can.
    if opts.use_mmap:
        return int(llama.LLAMA_LOAD_MODE_MMAP_MLOCK) if opts.use_mlock else default
    return int(llama.LLAMA_LOAD_MODE_MLOCK) if opts.use_mlock else int(llama.LLAMA_LOAD_MODE_NONE)


def _check_gguf_file(path: str) -> None:
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except FileNotFoundError:
        raise ModelLoadError(f"model file not found: {path}") from None
    except IsADirectoryError:
        raise ModelLoadError(f"model path is a directory, not a GGUF file: {path}") from None
    except OSError as exc:
        raise ModelLoadError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"not a GGUF model file: {path} (a GGUF file starts with the bytes 'GGUF')")


def _load_failure(load_log: LoadLog) -> str:
    errors = [line.split(": ", 1)[-1].strip() for line in load_log.errors() if line.strip()]
    # llama.cpp logs the cause first, then generic "failed to load model" lines.
    return errors[0] if errors else "llama.cpp refused the file (no reason logged)"


def _forward(load_log: LoadLog) -> None:
    for level, text in load_log.messages:
        for line in text.splitlines():
            if line.strip(". "):
                llama_log.log(logging.WARNING if level >= LOG_WARN else logging.DEBUG, "%s", line.strip())


@contextmanager
def _captured_log(llama: ModuleType) -> Iterator[LoadLog]:
    """Collect llama.cpp's (and ggml's) log for the duration; then give the previous logger back."""
    load_log = LoadLog()

    def on_log(level: int, text: bytes | None, _user_data: Any) -> None:
        if text:
            load_log.add(level, text.decode("utf-8", errors="replace"))

    callback = llama.llama_log_callback(on_log)
    previous = llama.llama_log_callback()
    previous_data = ctypes.c_void_p()
    llama.llama_log_get(ctypes.byref(previous), ctypes.byref(previous_data))
    llama.llama_log_set(callback, None)
    try:
        yield load_log
    finally:
        llama.llama_log_set(previous, previous_data)


# --- ggml's buffer types ------------------------------------------------------------------------------------

GGML_DEVICE_CPU, GGML_DEVICE_GPU, GGML_DEVICE_IGPU = 0, 1, 2  # enum ggml_backend_dev_type


def repack_faults() -> bool:
    """Whether the loader turns weight repacking off on this machine (see ``_amx_faults``)."""
    _llama().llama_backend_init()
    return _amx_faults(BufferTypes.from_registry(), quiet=True)


def _amx_faults(registry: BufferTypes, *, quiet: bool = False) -> bool:
    if "AMX" not in registry.host_names:
        return False
    from backend.smoke import amx_faults

    if not amx_faults():
        return False
    if quiet:
        return True
    log.warning(
        "this CPU advertises AMX but llama.cpp's AMX kernels crash here: weight repacking is off "
        "(CONFORMANT_AMX=on forces it)"
    )
    return True


@dataclass(frozen=True)
class BufferTypes:
    """The buffer types an override may name: each device's default ("CPU", "CUDA0") and extra ones.

    ``host_names``: the CPU's buffer types, repacking ones ("CPU_REPACK", "AMX") included: host memory.
    """

    by_name: dict[str, int]  # name -> ggml_backend_buffer_type_t
    cpu_name: str
    gpu_count: int
    host_names: frozenset[str] = frozenset()

    @classmethod
    def from_registry(cls) -> BufferTypes:
        ggml = _ggml()
        by_name: dict[str, int] = {}
        host: set[str] = set()
        cpu_name, gpus = "CPU", 0
        for i in range(ggml.ggml_backend_dev_count()):
            dev = ggml.ggml_backend_dev_get(i)
            kind = ggml.ggml_backend_dev_type(dev)
            gpus += kind in (GGML_DEVICE_GPU, GGML_DEVICE_IGPU)
            default = ggml.ggml_backend_dev_buffer_type(dev)
            # llama.cpp's -ot names only defaults; the extra buffer types ("CPU_REPACK") are accepted too.
            bufts = ([default] if default else []) + _extra_buffer_types(ggml, dev)
            names = [ggml.ggml_backend_buft_name(buft).decode() for buft in bufts]
            for name, buft in zip(names, bufts, strict=True):
                by_name.setdefault(name, buft)
            if kind == GGML_DEVICE_CPU and default:
                cpu_name = names[0]
                host.update(names)
        return cls(by_name, cpu_name, gpus, frozenset(host))

    def resolve(self, name: str) -> int:
        if name in self.by_name:
            return self.by_name[name]
        folded = [known for known in self.by_name if known.lower() == name.lower()]
        if len(folded) == 1:
            return self.by_name[folded[0]]
        available = ", ".join(self.by_name) or "none"
        hint = "" if self.gpu_count else f"; for GPU buffer types {CUDA_BUILD_HINT}"
        raise PlacementError(
            f"unknown buffer type {name!r} in tensor override (available: {available}{hint})"
        )


def gpu_free_memory() -> int:
    """Bytes free now on the GPUs llama.cpp offloads to (an RPC server's device is one), summed: where
    the KV cache of offloaded layers goes (backend/kv_size.py)."""
    ggml = _ggml()
    free_bytes = 0
    for i in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(i)
        if ggml.ggml_backend_dev_type(dev) in (GGML_DEVICE_GPU, GGML_DEVICE_IGPU):
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            ggml.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
            free_bytes += free.value
    return free_bytes


_GET_EXTRA_BUFTS = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


def _extra_buffer_types(ggml: SimpleNamespace, dev: int) -> list[int]:
    """A device's extra buffer types (NULL-terminated array from the backend's proc address table)."""
    reg = ggml.ggml_backend_dev_backend_reg(dev)
    address = (
        ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts") if reg else None
    )
    if not address:
        return []
    extras = _GET_EXTRA_BUFTS(address)(dev)
    found: list[int] = []
    while extras and extras[len(found)]:
        found.append(extras[len(found)])
    return found


@cache
def _llama() -> ModuleType:
    try:
        import llama_cpp
    except ImportError:
        raise ModelLoadError(
            "the backend needs llama-cpp-python: pip install 'conformant[backend]'"
        ) from None
    return llama_cpp


@cache
def _ggml() -> SimpleNamespace:
    """ggml's device registry, which llama-cpp-python does not bind: bound here from its own libraries."""
    llama = _llama()
    from llama_cpp._ctypes_extensions import load_shared_library

    # The libraries llama-cpp-python itself loaded: LLAMA_CPP_LIB_PATH names another build (a CUDA one,
    # bench/gpu_check.py), and a second copy of ggml from the package would hold a registry of its own.
    lib_dir = Path(os.environ.get("LLAMA_CPP_LIB_PATH") or Path(str(llama.__file__)).parent / "lib")
    libs = [load_shared_library("ggml", lib_dir), load_shared_library("ggml-base", lib_dir)]
    signatures: dict[str, tuple[list[Any], Any]] = {
        "ggml_backend_dev_count": ([], ctypes.c_size_t),
        "ggml_backend_dev_get": ([ctypes.c_size_t], ctypes.c_void_p),
        "ggml_backend_dev_type": ([ctypes.c_void_p], ctypes.c_int),
        "ggml_backend_dev_buffer_type": ([ctypes.c_void_p], ctypes.c_void_p),
        "ggml_backend_buft_name": ([ctypes.c_void_p], ctypes.c_char_p),
        "ggml_backend_dev_backend_reg": ([ctypes.c_void_p], ctypes.c_void_p),
        "ggml_backend_reg_get_proc_address": ([ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p),
        "ggml_backend_dev_memory": (
            [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)],
            None,
        ),
    }
    bound = SimpleNamespace()
    for name, (argtypes, restype) in signatures.items():
        # The registry is in libggml, the accessors in libggml-base (not every loader searches dependencies).
        fn = next((getattr(lib, name) for lib in libs if hasattr(lib, name)), None)
        if fn is None:
            raise ModelLoadError(f"this llama-cpp-python build lacks {name}; reinstall llama-cpp-python")
        fn.argtypes, fn.restype = argtypes, restype
        setattr(bound, name, fn)
    return bound
