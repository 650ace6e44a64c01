"""cuBLASLt matmul workspaces on CUDA, looked up in measured probe data.

MLX asks cuBLASLt for one heuristic algorithm per matmul shape and allocates the workspace that
algorithm names from its own allocator, held until the command buffer completes
(``CublasMatmulBase::execute`` in ``mlx/backend/cuda/cublas_utils.cpp``, ``allocate_workspace`` in
``mlx/backend/cuda/utils.cpp``). The size is cuBLAS's choice: split-K partials, up to 31.7 MiB at
attention shapes on an H200 (MLX caps it at 32 MiB on Hopper), and it turns on the row pitch (rows
of keys not a multiple of 8 take other kernels). MLX's source cannot give it, so kvsim reads it from probes
(``docs/tools/device/device_probe.py workspace``, ``workspace-align`` and ``workspace-random``): the measured
shape of the same op, dtype and row-pitch alignment nearest in log rows. cuBLAS's choice jumps
between neighbouring shapes: built from the grids and half of 40,000 shapes drawn at random, the
lookup misses the other half's workspaces by 18-19% of their total, and their total by under 1%
(``tests/test_workspace.py``).
"""

from __future__ import annotations

import json
import lzma
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from kvsim.core.paths import PACKAGE_DATA_DIR as DATA_DIR
from kvsim.scenario.spec import DTYPE_BYTES
from kvsim.sim.allocator import rounded_size
from kvsim.sim.profile import DEFAULTS

_CUDA = DEFAULTS["mlx-cuda"]  # the allocator rounding the probe's peaks include

ShapeClass = tuple[str, str, int, int, int]  # op, dtype, batch x heads, head_dim, key-row pitch alignment


def pitch_alignment_bytes(rows: int, itemsize_bytes: int) -> int:
    """The largest power of two up to 16 that divides a row pitch of ``rows`` elements."""
    pitch = rows * itemsize_bytes
    return min(16, pitch & -pitch)


def shape_class(op: str, dtype: str, batch_heads: int, head_dim: int, k_rows: int) -> ShapeClass:
    """The key a matmul's workspace is measured and looked up under."""
    return op, dtype, batch_heads, head_dim, pitch_alignment_bytes(k_rows, DTYPE_BYTES[dtype])


def probe_workspace_bytes(rec: dict) -> int:
    """A probe record's workspace: its peak above the inputs less the output's allocation."""
    return max(0, rec["peak_above_inputs"] - rounded_size(_CUDA, rec["out_bytes"]))


@dataclass(frozen=True, eq=False)
class WorkspaceTable:
    """Measured workspaces: per shape class, an array of (log query rows, log key rows, bytes)."""

    points: dict[ShapeClass, np.ndarray]
    mlx_version: str

    @classmethod
    def from_records(cls, records: list[dict], mlx_version: str) -> WorkspaceTable:
        grouped: dict[ShapeClass, list[tuple[float, float, int]]] = {}
        for rec in records:
            key = shape_class(rec["op"], rec["dtype"], rec["batch_heads"], rec["head_dim"], rec["k_rows"])
            grouped.setdefault(key, []).append((math.log(rec["q_rows"]), math.log(rec["k_rows"]), probe_workspace_bytes(rec)))
        return cls({k: np.array(v) for k, v in grouped.items()}, mlx_version)

    def bytes_for(self, op: str, dtype: str, batch_heads: int, head_dim: int, q_rows: int, k_rows: int) -> int:
        """Workspace of ``probs @ v`` (``pv``) or ``q @ k.T`` (``qk``) at this shape, from the
        measured class of the same op, single-head or batched alike (a batched matmul runs other
        kernels: no batched probe took over 256 bytes), nearest in dtype, then batch x heads,
        head_dim and alignment (in log)."""
        if op == "qk" and q_rows == 1:
            return 0  # one query row against transposed keys runs MLX's gemv (``can_use_gemv``)
        want = shape_class(op, dtype, batch_heads, head_dim, k_rows)
        keys = [k for k in self.points if k[0] == op and (k[2] > 1) == (batch_heads > 1)]
        if not keys:
            return 0

        def distance(k: ShapeClass) -> tuple[float, ...]:
            return (k[1] != dtype, *(abs(math.log(k[i] / want[i])) for i in (2, 3, 4)))

        nearest = min(keys, key=distance)
        pts = self.points[nearest]
        d = (pts[:, 0] - math.log(q_rows)) ** 2 + (pts[:, 1] - math.log(k_rows)) ** 2
        return int(pts[np.argmin(d), 2])


def read_probe_records(path: Path) -> list[dict]:
    """The matmul records (``pv``, ``qk``) of one probe file, plain or xz-compressed JSON lines."""
    text = lzma.decompress(path.read_bytes()).decode() if path.suffix == ".xz" else path.read_text()
    return [rec for rec in map(json.loads, text.splitlines()) if rec.get("op") in ("pv", "qk")]


@cache
def load_workspace_table(pattern: str) -> WorkspaceTable:
    """The table from every probe file under ``data/`` matching ``pattern`` (a glob); one MLX version."""
    paths = sorted(DATA_DIR.glob(pattern))
    if not paths:
        raise ValueError(f"matmul_workspace: no probe file matches {pattern!r} under {DATA_DIR}")
    records = [rec for path in paths for rec in read_probe_records(path)]
    versions = sorted({rec["mlx"] for rec in records})
    if len(versions) != 1:
        raise ValueError(f"matmul_workspace: probes of {pattern!r} mix MLX versions {versions}")
    return WorkspaceTable.from_records(records, versions[0])
