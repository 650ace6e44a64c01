"""Devices a generation may have to fit on: Macs by unified memory, and common NVIDIA GPUs.

A Mac's GPU working set is Metal's ``recommendedMaxWorkingSetSize`` (``mx.device_info()
["max_recommended_working_set_size"]``): about 2/3 of RAM up to 36 GB and 3/4 above (Apple sets it; these
are the usual values, not a formula Apple documents). MLX's memory limit there is
``min(1.5 * working set, 0.95 * RAM)`` (``mlx/backend/metal/allocator.cpp``); on CUDA it is 0.95 of the
GPU's memory (MLX's CUDA allocator).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.core.errors import KvsimError

GB = 10**9
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Device:
    """One device and the limits a generation's peak is held against."""

    name: str
    """The ``--device`` name."""
    memory_bytes: int
    """Unified memory (a Mac) or GPU memory."""
    working_set_bytes: int
    """What fits without paging: the Mac's recommended GPU working set, the GPU's memory."""
    memory_limit_bytes: int
    """MLX's default memory limit: past it, ``eval`` waits for memory or fails."""
    backend: str
    """The kvsim backend profile the device runs: ``mlx-metal`` or ``mlx-cuda``."""


def mac_working_set_bytes(ram_bytes: int) -> int:
    """Metal's usual recommended working set: 2/3 of RAM up to 36 GiB, 3/4 above."""
    return ram_bytes * 2 // 3 if ram_bytes <= 36 * GIB else ram_bytes * 3 // 4


def mlx_device(name: str, memory_bytes: int, backend: str, working_set_bytes: int | None = None) -> Device:
    """A device held to MLX's default limits on ``backend``: on Metal ``min(1.5 * working set, 0.95 * RAM)``
    (the working set Metal reports, else its usual value), on CUDA 0.95 of the GPU's memory, on the CPU 0.8 of
    RAM; off Metal the working set is the limit. The one place these rules live."""
    if backend == "mlx-metal":
        ws = working_set_bytes or mac_working_set_bytes(memory_bytes)
        return Device(name, memory_bytes, ws, min(ws * 3 // 2, memory_bytes * 95 // 100), backend)
    limit = memory_bytes * (95 if backend == "mlx-cuda" else 80) // 100
    return Device(name, memory_bytes, limit, limit, backend)


def mac(ram_gb: int) -> Device:
    """A Mac with ``ram_gb`` GB of unified memory (Apple's GB are GiB)."""
    return mlx_device(f"mac-{ram_gb}gb", ram_gb * GIB, "mlx-metal")


def gpu(name: str, memory_gib: int) -> Device:
    return mlx_device(name, memory_gib * GIB, "mlx-cuda")


MAC_RAM_GB = (8, 16, 18, 24, 32, 36, 48, 64, 96, 128, 192, 256, 512)
DEVICES: dict[str, Device] = {d.name: d for d in (
    *(mac(n) for n in MAC_RAM_GB),
    gpu("rtx-3090", 24), gpu("rtx-4090", 24), gpu("rtx-5090", 32), gpu("l40s", 48), gpu("a100-40gb", 40),
    gpu("a100-80gb", 80), gpu("h100", 80), gpu("h200", 141), gpu("b200", 180),
)}


def device(name: str) -> Device:
    """The named device; a one-line error listing the names otherwise."""
    try:
        return DEVICES[name.lower()]
    except KeyError:
        raise KvsimError(f"device: unknown device {name!r} (known: {', '.join(DEVICES)})") from None
