"""Memory-limit presets: devices and the byte budget MLX gives a model on each.

Sources (MLX 0.32.4 and mlx-lm 0.32.2):

* Metal: MLX's memory limit is ``min(1.5 * recommendedMaxWorkingSetSize, 0.95 * RAM)``
  (``mlx/backend/metal/allocator.cpp``: ``block_limit_``). macOS reports a recommended
  working set of about 75% of RAM on large Macs, so MLX's limit there is 0.95·RAM, while
  mlx-lm wires ``recommendedMaxWorkingSetSize`` and warns when a model exceeds 0.9 × it
  (``mlx_lm/generate.py`` ``wired_limit``). The working set is the conservative budget.
* CUDA: MLX's memory limit is 0.95 × total VRAM.
* CPU (no GPU): MLX's memory limit is 0.8 × RAM.

Apple RAM sizes are binary (128 GB = 128 GiB). NVIDIA H200 (141 GB HBM3e by NVIDIA's spec) and
H100 SXM (80 GB) use the totals ``nvidia-smi`` is commonly seen to report for them, 143 771 MiB and
81 559 MiB (published figures, not measured by this project).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.generation.devices import mlx_device

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class DevicePreset:
    """A device and its memory budgets.

    Args:
        name: Display name.
        ram_bytes: Physical (unified or GPU) memory.
        kind: ``metal``, ``cuda`` or ``cpu``.
    """

    name: str
    ram_bytes: int
    kind: str

    @property
    def working_set_bytes(self) -> int:
        """Usable GPU working set: macOS's recommended working set on Metal, else MLX's limit."""
        return mlx_device(self.name, self.ram_bytes, f"mlx-{self.kind}").working_set_bytes

    @property
    def mlx_memory_limit_bytes(self) -> int:
        """MLX's default memory limit on this device's backend (``kvsim.generation.devices.mlx_device``)."""
        return mlx_device(self.name, self.ram_bytes, f"mlx-{self.kind}").memory_limit_bytes


DEVICES: tuple[DevicePreset, ...] = (
    DevicePreset("Apple M2 Ultra 192 GB", 192 * GIB, "metal"),
    DevicePreset("Apple M2 Ultra 128 GB", 128 * GIB, "metal"),
    DevicePreset("Apple M2 Ultra 64 GB", 64 * GIB, "metal"),
    DevicePreset("Apple M3 Ultra 512 GB", 512 * GIB, "metal"),
    DevicePreset("Apple M3 Ultra 256 GB", 256 * GIB, "metal"),
    DevicePreset("Apple M3 Max 128 GB", 128 * GIB, "metal"),
    DevicePreset("Apple M3 Max 64 GB", 64 * GIB, "metal"),
    DevicePreset("Apple M4 Max 128 GB", 128 * GIB, "metal"),
    DevicePreset("Apple M4 Max 64 GB", 64 * GIB, "metal"),
    DevicePreset("Apple M5 Max 128 GB", 128 * GIB, "metal"),
    DevicePreset("NVIDIA H200 141 GB", 143771 * MIB, "cuda"),
    DevicePreset("NVIDIA H100 SXM 80 GB", 81559 * MIB, "cuda"),
    DevicePreset("CPU host 128 GiB", 128 * GIB, "cpu"),
)
DEVICE_NAMES: tuple[str, ...] = tuple(d.name for d in DEVICES)
LIMIT_BASES: tuple[str, ...] = ("working set", "MLX memory limit")


def device_limit_bytes(name: str, basis: str = "working set") -> int:
    """The memory limit of a preset device on the chosen basis.

    Raises:
        KeyError: for an unknown device name.
    """
    device = {d.name: d for d in DEVICES}[name]
    return device.working_set_bytes if basis == "working set" else device.mlx_memory_limit_bytes
