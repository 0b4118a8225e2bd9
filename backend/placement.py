"""Where a model's tensors go: override specs, MoE expert patterns, and what llama.cpp reports it did.

Pure code (no llama.cpp import): the parsing here runs in the core test environment. Resolving buffer type
names needs the loaded library and lives in ``backend.loading``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# llama.cpp's LLM_FFN_EXPS_REGEX (common/common.h): the routed-expert FFN weights, including the fused gate_up
# and chunked ("ch") variants of newer architectures. Kept identical so --cpu-moe means what it means there.
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


class PlacementError(ValueError):
    """A tensor placement request that cannot be honoured (bad spec, bad regex, unknown buffer type)."""


@dataclass(frozen=True)
class TensorOverride:
    """One ``REGEX=BUFFER`` rule: tensors whose name ``pattern`` finds (re.search) go to ``buffer_type``."""

    pattern: str
    buffer_type: str

    def __str__(self) -> str:
        return f"{self.pattern}={self.buffer_type}"


def parse_override_specs(specs: Iterable[str]) -> list[TensorOverride]:
    """Parse ``--override-tensor`` values; each may hold several comma-separated rules, as in llama.cpp."""
    rules: list[TensorOverride] = []
    for spec in specs:
        for item in spec.split(","):
            rules.append(parse_override(item))
    return rules


def parse_override(item: str) -> TensorOverride:
    pattern, sep, buffer_type = item.strip().rpartition("=")
    if not sep or not pattern or not buffer_type.strip():
        raise PlacementError(
            f"invalid tensor override {item.strip()!r}: expected REGEX=BUFFER, e.g. 'exps=CPU'"
        )
    try:
        re.compile(pattern)
    except re.error as exc:
        raise PlacementError(f"invalid regular expression {pattern!r} in tensor override: {exc}") from None
    return TensorOverride(pattern, buffer_type.strip())


def moe_overrides(cpu_buffer_type: str, *, cpu_moe: bool, n_cpu_moe: int) -> list[TensorOverride]:
    """The rules llama.cpp's ``--cpu-moe`` / ``--n-cpu-moe N`` add: all experts, or the first N blocks'."""
    if n_cpu_moe < 0:
        raise PlacementError(f"--n-cpu-moe must be 0 or more, not {n_cpu_moe}")
    if cpu_moe:
        return [TensorOverride(FFN_EXPS_REGEX, cpu_buffer_type)]
    # "blk\.1\." must not catch blk.10: the expert regex starts with "\." right after the number.
    return [TensorOverride(rf"blk\.{i}{FFN_EXPS_REGEX}", cpu_buffer_type) for i in range(n_cpu_moe)]


# --- what llama.cpp says it did -----------------------------------------------------------------------------

_BUFFER_SIZE = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([0-9.]+) MiB")
_OVERRIDDEN = re.compile(r"tensor (\S+) \(.*\) buffer type overridden to (\S+)")
_REPACKED = re.compile(r"repack: repack tensor (\S+) with (\S+)")
_AMX_REPACKED = re.compile(r"amx repack tensor (\S+) of type")
_LAYER_DEVICE = re.compile(r"layer\s+(\d+) assigned to device (\S+?),")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


@dataclass(frozen=True)
class Placement:
    """Where llama.cpp put the weights, read from its load log.

    ``overridden``: tensor -> buffer type, for every tensor an override rule matched (llama.cpp may pick the
    CPU's repacking buffer type when the rule names "CPU": that is still host memory).
    ``repacked``: tensor -> layout, for weights the CPU backend rearranged for its SIMD kernels ("amx": AMX).
    """

    requested: tuple[TensorOverride, ...] = ()
    buffers: dict[str, float] = field(default_factory=dict)
    overridden: dict[str, str] = field(default_factory=dict)
    repacked: dict[str, str] = field(default_factory=dict)
    layer_devices: dict[int, str] = field(default_factory=dict)
    offloaded_layers: tuple[int, int] | None = None
    warnings: tuple[str, ...] = ()

    def placed_by(self) -> dict[TensorOverride, list[str]]:
        """The tensors each rule placed: llama.cpp applies the first rule whose pattern matches a name."""
        placed: dict[TensorOverride, list[str]] = {rule: [] for rule in self.requested}
        for name in self.overridden:
            rule = next((r for r in self.requested if re.search(r.pattern, name)), None)
            if rule is not None:
                placed[rule].append(name)
        return placed

    @property
    def unmatched(self) -> tuple[TensorOverride, ...]:
        """Rules that placed no tensor: a typo in the pattern, or an earlier rule took every match."""
        return tuple(rule for rule, names in self.placed_by().items() if not names)

    def summary(self) -> list[str]:
        lines = []
        if self.buffers:
            sizes = ", ".join(f"{name} {mib:.2f} MiB" for name, mib in self.buffers.items())
            lines.append(f"model buffers: {sizes}")
        if self.offloaded_layers is not None:
            done, total = self.offloaded_layers
            lines.append(f"offloaded {done}/{total} layers to GPU")
        devices = sorted(set(self.layer_devices.values()))
        if len(devices) > 1:
            lines.append("layers by device: " + ", ".join(self._layers_on(d) for d in devices))
        by_buffer: dict[str, list[str]] = {}
        for tensor, buffer in self.overridden.items():
            by_buffer.setdefault(buffer, []).append(tensor)
        for buffer, tensors in by_buffer.items():
            lines.append(f"{len(tensors)} tensors overridden to {buffer}: {_abbreviate(tensors)}")
        if self.repacked:
            lines.append(
                f"{len(self.repacked)} tensors repacked for the CPU: {_abbreviate(list(self.repacked))}"
            )
        return lines

    def _layers_on(self, device: str) -> str:
        layers = [i for i, d in self.layer_devices.items() if d == device]
        return f"{device} {min(layers)}-{max(layers)}" if len(layers) > 1 else f"{device} {layers[0]}"


def _abbreviate(names: Sequence[str], keep: int = 6) -> str:
    shown = ", ".join(names[:keep])
    return shown if len(names) <= keep else f"{shown} and {len(names) - keep} more"


# ggml_log_level: CONT continues the previous message (progress dots, multi-part lines).
LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_CONT = 1, 2, 3, 4, 5


@dataclass
class LoadLog:
    """llama.cpp's log messages of one load, continuation pieces joined to the message they continue."""

    messages: list[tuple[int, str]] = field(default_factory=list)

    def add(self, level: int, text: str) -> None:
        if level == LOG_CONT and self.messages:
            prev_level, prev_text = self.messages[-1]
            self.messages[-1] = (prev_level, prev_text + text)
        else:
            self.messages.append((level, text))

    def lines(self, min_level: int = LOG_DEBUG) -> list[str]:
        return [
            line.strip(". ")
            for level, text in self.messages
            if level >= min_level
            for line in text.splitlines()
            if line.strip(". ")
        ]

    def errors(self) -> list[str]:
        return [line for level, text in self.messages if level == LOG_ERROR for line in text.splitlines()]

    def placement(self, requested: Sequence[TensorOverride] = ()) -> Placement:
        buffers: dict[str, float] = {}
        overridden: dict[str, str] = {}
        repacked: dict[str, str] = {}
        layer_devices: dict[int, str] = {}
        offloaded: tuple[int, int] | None = None
        for line in self.lines():
            if m := _BUFFER_SIZE.search(line):
                buffers[m[1]] = buffers.get(m[1], 0.0) + float(m[2])
            elif m := _OVERRIDDEN.search(line):
                overridden[m[1]] = m[2]
            elif m := _REPACKED.search(line):
                repacked[m[1]] = m[2]
            elif m := _AMX_REPACKED.search(line):
                repacked[m[1]] = "amx"
            elif m := _LAYER_DEVICE.search(line):
                layer_devices[int(m[1])] = m[2]
            elif m := _OFFLOADED.search(line):
                offloaded = (int(m[1]), int(m[2]))
        warnings = tuple(
            line.strip() for level, text in self.messages if level == LOG_WARN for line in text.splitlines()
        )
        return Placement(
            requested=tuple(requested),
            buffers=buffers,
            overridden=overridden,
            repacked=repacked,
            layer_devices=layer_devices,
            offloaded_layers=offloaded,
            warnings=warnings,
        )
