"""Backend profiles: every allocator rule and timing parameter the simulator uses.

Defaults come from MLX's source (shared/reference/mlx-memory.md); the fields a
calibration fits are listed in ``FITTED_FIELDS`` and stored in ``kvsim/data/profiles/<name>.json``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from functools import cache
from pathlib import Path
from typing import Any

from kvsim.core.paths import PROFILES_DIR

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class BackendProfile:
    """How one MLX backend allocates, frees and schedules.

    Allocator (from MLX's source): ``rounding`` is ``none`` (CPU), ``metal`` or ``cuda``;
    ``page_bytes`` the rounding page; ``reuse_window_bytes`` the cache's extra-size window;
    ``cache_limit_bytes`` the buffer-cache limit; ``gc_limit_bytes`` where a GPU malloc miss
    evicts the cache.

    ``sdpa_kernels`` names the fused attention kernels the backend has (``kvsim.sim.attention``);
    ``matmul_workspace`` is a glob under ``data/`` of the probe files that measured the backend's
    matmul workspaces (``kvsim.sim.workspace``; empty: none).

    Scheduling: CPU ops are dispatched to a worker thread in tasks of
    ``dispatches_per_task``; GPU ops are committed in command buffers of at most
    ``commit_ops`` ops or ``commit_elements`` input elements, counted in whole M (``needs_commit``; MLX counts
    elements, not bytes).
    The host waits when more than ``max_active_tasks`` tasks are in flight. Inputs are freed
    when the task (CPU) or command buffer (GPU) holding them completes.

    The peak range of an asynchronous backend comes from two more runs of the model with the
    earliest and latest free timings (``*_low`` and ``*_high`` of ``graph_nodes_per_kernel``,
    ``completion_lag_s`` and ``host_malloc_bytes_per_s``; ``variant``), widened by
    ``range_margin`` for the bytes the model does not track (scalars, small-buffer rounding),
    and kept between ``range_min_width`` and ``range_max_width`` (high / low) with
    ``range_low_share`` of a clip or widening below the point; the predicted peak
    weighs the fitted timing's peak by ``peak_point_weight`` against the two ends (``kvsim.sim.peak_range``).
    The range's low end stays at or above ``1 - range_floor_margin`` of the structural floor, the peak
    when every command buffer frees its inputs the moment it is committed (``floor_variant``; 1: no floor).

    Whole-model graphs (``kvsim generate``, fitted on the train split of ``data/generation/<backend>``):
    ``model_max_active_tasks`` replaces ``max_active_tasks`` while a model's step is played (0: no
    replacement). Real runs free a model's activations sooner than the KV workload's fit predicts: the host
    runs fewer tasks (CPU) or command buffers (GPU) ahead of the device (``kvsim.generation.schedule``).
    ``matmul_flops_per_s`` times a traced matmul's arithmetic (``kvsim.generation.trace``): the CPU's measured
    on this project's 2-core CI host (bf16, 2.6-4.1 GFLOP/s over 256-8192-row products with MLX 0.32.4), the
    GPUs' nominal dense half-precision rates (H200 400 TFLOP/s, an M-series Max/Ultra 20 TFLOP/s).
    A GPU profile may time the other arithmetic kernels of a model apart (``quantized_matmul_flops_per_s``,
    ``gather_matmul_flops_per_s``, ``gather_qmm_flops_per_s``, ``attention_flops_per_s``) and stream its
    activations at ``model_device_bytes_per_s`` rather than the KV workload's fitted ``device_bytes_per_s``
    (whose ops are small): the H200's are measured by ``docs/tools/device/kernel_rates.py``
    (``docs/generation.md``, "CUDA: measured kernel rates"). A process's first eval of a model builds what
    later ones reuse (CUDA: kernels loaded or compiled, CUDA graphs instantiated, cuDNN plans built), so its
    host may run behind the device, which then frees each command buffer about as soon as it is committed:
    real first chunks peak anywhere from that eval's floor to its warm play. On CUDA the first eval is played
    cold where ``model_instantiate_s`` is set: a command buffer of a structure new to the process makes the host
    wait for every graph in flight but the newest ``model_instantiate_overlap_buffers`` (``kvsim.sim.graph_cache``), and the buffers of a stream fence, which MLX does
    not count as tasks, run ahead until ``model_max_pending_buffers`` are in flight (``docs/generation.md``, "CUDA: a
    first eval traced"). Where the first eval peaks, the point lies ``first_eval_point_share`` of the way from its
    floor to that play (``kvsim.sim.peak_range.first_eval_point``; 0: the point as for any other eval). A
    generation's range
    places ``model_range_low_share`` of its width below the point where it is clipped (0: ``range_low_share``):
    fitted on the train split, whose gemma-3-1b 8K generation peaks in two modes 22% apart.
    On CUDA a model's command buffers are cut as MLX cuts them where ``model_mlx_elements`` is set: every
    kernel input's elements count toward ``commit_elements``, weights included, each of its own dtype
    (``CommandEncoder::set_input_array`` adds ``data_size()``); and where ``model_waiting_gemms`` is set the
    host waits for a command buffer that holds a float32 GEMM over one matrix (a float32 model's linear
    layers) to complete before it encodes more, as measured (``docs/generation.md``, "CUDA: MLX's command buffers").
    ``model_host_node_s``, ``model_host_kernel_s`` and ``model_device_dispatch_s`` time a whole model's host
    and device apart from the KV workload's fit, and ``model_host_kernel_low_s`` / ``_high_s`` play the range's
    ends with the slowest and fastest host measured (0: the KV workload's; none is set in a shipped profile: the
    measured candidate was rejected on train, ``docs/generation.md``, "CUDA: run-to-run spread").
    ``model_op_time``, the per-bits ``quantized_matmul_<bits>bit_*`` fields and ``model_later_host`` play the device
    and host times traced per command buffer (a roofline op time; a process's later evals on the traced host, its
    allocations free; ``later_evals``); the shipped CUDA profile sets them as candidate D, its later host timed per
    view, kernel and fused attention (``model_later_host_sdpa_s``) and its first eval's allocations at their own rate
    (``model_host_malloc_bytes_per_s``) (``docs/generation.md``, "CUDA: the device's and the host's times per command
    buffer, traced"; "CUDA: each phase's peak, and a host fitted per op class, switched on").

    ``process_baseline_bytes`` is the resident memory of a Python process once ``mlx.core`` and ``mlx_lm`` are
    imported and MLX has run one op, nothing allocated (measured per backend; 0: not measured): ``kvsim generate``
    adds it to the weights and the largest active + cache bytes for the process's resident footprint.

    Load (CPU, fitted): the event model plays a quiet host, whose host thread runs ahead of the worker.
    On a busy host the host thread is descheduled while the worker completes the tasks in flight and
    frees their inputs, so a run peaks lower. ``load_transient_share`` is the share of each step's
    transient (its peak above the larger of the active bytes it starts from and ends at) that a loaded run
    still reaches: the range's low end (1: none below the point); ``load_high_margin`` how far above the
    point a run may land (``kvsim.sim.peak_range.load_range``).

    Timing (fitted): host seconds per graph node and per kernel launch, and per byte taken from the
    system rather than the buffer cache (``host_malloc_bytes_per_s``, 0 for free); device seconds per
    dispatch plus bytes moved over ``device_bytes_per_s``; ``completion_lag_s`` between a GPU
    command buffer finishing and its inputs being freed, with the range
    ``[completion_lag_low_s, completion_lag_high_s]`` that bounds run-to-run variation;
    ``python_array_s`` the time Python and MLX take to build each lazy array of a step's graph
    (it adds to step time, not to memory: nothing is allocated while the graph is built but scalars);
    ``host_eval_call_s`` is the host time (Python and MLX) between the ``mx.eval`` barriers a
    ``lowpeak`` cache grows behind: frees a completion handler still owes land in it. It moves the
    event timing only; ``python_array_s`` counts Python time in step time.
    ``eval_time_scale`` converts the event model's eval time into reported wall time, so the time
    model is fitted without moving the event timing that decides peaks. ``host_probe_s`` is the
    host-speed probe (``kvsim.calibration.host_probe``) on the host the time model was fitted on (0: unknown):
    step times measured on another host are compared in this host's time.
    """

    name: str
    mlx_version: str = "0.32.4"
    status: str = "defaults"
    rounding: str = "none"
    page_bytes: int = 4096
    reuse_window_bytes: int = 8192
    cache_limit_bytes: int = 32 << 20
    gc_limit_bytes: int = 1 << 62
    dispatches_per_task: int = 10
    max_active_tasks: int = 10
    max_pending_buffers: int = 0  # GPU: command buffers in flight, MLX's tasks or not, at which the next launch waits for the oldest to complete; 0: unbounded
    commit_ops: int = 0
    commit_elements: int = 0
    graph_nodes_per_kernel: float = 1.0
    graph_nodes_per_kernel_low: float = 1.0
    graph_nodes_per_kernel_high: float = 1.0
    range_margin: float = 0.005
    range_min_width: float = 1.0
    range_max_width: float = 1.34
    range_low_share: float = 0.2
    range_floor_margin: float = 1.0
    peak_point_weight: float = 1.0
    load_transient_share: float = 1.0  # CPU on a busy host: share of each step's transient a run still reaches
    load_high_margin: float = 0.0  # CPU on a busy host: fraction above the point a run may peak
    model_instantiate_s: float = 0.0  # whole-model graphs on CUDA, a process's first eval: a command buffer of a structure new to the process is instantiated, and the host resumes this long after the device finishes the graphs it waits for (model_instantiate_overlap_buffers) (measured 0.6-2.3 ms, CUPTI; kvsim.sim.graph_cache); 0: no graph cache played
    model_instantiate_overlap_buffers: int = 0  # CUDA, a process's first eval: graphs an instantiation leaves running: it waits for every graph in flight but the newest this many (CUPTI: in 3 first evals, a third of the instantiations that met a graph in flight returned within 1.5 ms, before it finished, and no launch met 2 in flight; kvsim.sim.graph_cache)
    model_graph_cache_scope: str = "first"  # CUDA, where model_instantiate_s is set: the evals that meet MLX's graph cache: "first" (a process's first eval; later evals play warm) or "generation" (one cache for every eval of the generation, as MLX keeps it: a later chunk's new structures are instantiated too, and the second prompt chunk and the one before the last two are played as well, so that the chunks played after them meet their structures; CUPTI: kvsim's keys give MLX's instantiations in 12 of the 14 later chunks it plays of 5 generations, one more in the other two; off: its warm chunks play low, docs/generation.md, "CUDA: a generation's later chunks traced")
    model_max_pending_buffers: int = 0  # whole-model graphs on CUDA: max_pending_buffers (measured: cuGraphLaunch blocks at 42 graphs in flight on an H200); 0: max_pending_buffers
    model_max_active_tasks: int = 0  # whole-model graphs (kvsim generate): tasks in flight (CPU: fitted; CUDA: MLX's MAX_ACTIVE_TASKS); 0: max_active_tasks
    matmul_flops_per_s: float = 1.0e12  # whole-model graphs: a matmul's arithmetic rate, its device time beside the bytes it moves
    quantized_matmul_flops_per_s: float = 0.0  # whole-model graphs: a quantized matmul's rate; 0: matmul_flops_per_s
    gather_matmul_flops_per_s: float = 0.0  # whole-model graphs: an expert matmul's rate (gather_mm); 0: matmul_flops_per_s
    gather_qmm_flops_per_s: float = 0.0  # whole-model graphs: a quantized expert matmul's rate; 0: matmul_flops_per_s
    attention_flops_per_s: float = 0.0  # whole-model graphs: a fused attention kernel's rate; 0: its bytes alone time it
    model_device_bytes_per_s: float = 0.0  # whole-model graphs: the device's bytes per second; 0: device_bytes_per_s
    model_host_node_s: float = 0.0  # whole-model graphs: the host's seconds per graph node (measured); 0: host_node_s
    model_host_kernel_s: float = 0.0  # whole-model graphs: the host's seconds per kernel launch (measured); 0: host_kernel_s
    model_host_kernel_low_s: float = 0.0  # whole-model graphs, the range's low end: the slowest host measured; 0: model_host_kernel_s
    model_host_kernel_high_s: float = 0.0  # whole-model graphs, the range's high end: the fastest host measured; 0: model_host_kernel_s
    model_device_dispatch_s: float = 0.0  # whole-model graphs: the device's seconds per kernel beyond its bytes (measured); 0: device_dispatch_s
    model_op_time: str = "sum"  # whole-model graphs: an op's device time beside its kernels' dispatch: "sum" (the bytes it reads and writes plus its arithmetic) or "roofline" (the larger of the two; every kernel's bytes read and written counted; the fallback attention's matmuls timed by their arithmetic); docs/generation.md, "CUDA: the device's and the host's times per command buffer, traced"
    quantized_matmul_4bit_call_s: float = 0.0  # whole-model graphs, "roofline": a 4-bit (and 2-, 3-bit) quantized matmul's time per call beside its arithmetic (the qmm grid, kernels/rates-qmm-grid.json); 0 with its rate: quantized_matmul_flops_per_s
    quantized_matmul_4bit_flops_per_s: float = 0.0  # whole-model graphs, "roofline": a 4-bit quantized matmul's rate (the qmm grid); 0: quantized_matmul_flops_per_s
    quantized_matmul_5bit_call_s: float = 0.0  # as quantized_matmul_4bit_call_s, 5 bits
    quantized_matmul_5bit_flops_per_s: float = 0.0  # as quantized_matmul_4bit_flops_per_s, 5 bits
    quantized_matmul_6bit_call_s: float = 0.0  # as quantized_matmul_4bit_call_s, 6 bits
    quantized_matmul_6bit_flops_per_s: float = 0.0  # as quantized_matmul_4bit_flops_per_s, 6 bits
    quantized_matmul_8bit_call_s: float = 0.0  # as quantized_matmul_4bit_call_s, 8 bits
    quantized_matmul_8bit_flops_per_s: float = 0.0  # as quantized_matmul_4bit_flops_per_s, 8 bits
    model_host_malloc_bytes_per_s: float = 0.0  # whole-model graphs: host_malloc_bytes_per_s (a KV-cache scenario keeps its own, fitted on the KV runs); a range end's variant plays host_malloc_bytes_per_s_<end>; 0: host_malloc_bytes_per_s
    model_later_host: bool = False  # whole-model graphs: a process's evals after its first run on the host below (model_later_host_*), whose allocations cost nothing (CUDA: traced warm chunks encode in 18-31 ms whatever the model, their cuMemAllocAsync calls 1.5-16 ms of it); else as the first
    model_later_host_node_s: float = 0.0  # model_later_host: the host's seconds per graph node
    model_later_host_kernel_s: float = 0.0  # model_later_host: the host's seconds per kernel launch
    model_later_host_sdpa_s: float = 0.0  # model_later_host: the host's seconds more per fused attention call (CUDA: cuDNN's cached graph updated and added to MLX's as a child graph, DnnGraph::encode_graph in backend/cuda/cudnn_utils.cpp; fitted on traced warm chunks' launch gaps)
    model_first_eval_later_host: bool = False  # whole-model graphs, model_later_host: a process's first eval runs on that host too (its costs per view, kernel and fused attention; its allocations still at model_host_malloc_bytes_per_s), not on host_node_s and host_kernel_s (CUPTI: pythia-160m's cold and warm passes encode alike, 22-30 us a node, against a device done in half a buffer's encoding; candidate F, off: the twenty-sixth held-out set read a point median of 5.9% with it, 3.0% without)
    model_later_host_low_factor: float = 1.0  # model_later_host: the range's low end (earliest frees) plays that host with its times multiplied by this (> 1: slower)
    model_later_host_high_factor: float = 1.0  # model_later_host: the range's high end (latest frees) plays it with its times multiplied by this (< 1: faster)
    first_eval_point_share: float = 0.0  # whole-model graphs on a GPU: a peaking first eval's point, floor (0+) to fitted play (1); 0: off
    model_range_low_share: float = 0.0  # whole-model graphs on a GPU: range_low_share of a generation's range (fitted on train); 0: range_low_share
    model_first_eval_low_share: float = 0.0  # whole-model graphs on a GPU: range_low_share of a range placed on a peaking first eval's point (kvsim.sim.peak_range.first_eval_range; first evals land on both sides of their fitted play: on the 374 stored rows 0.45-0.55 keep every one inside, 0.375 and 0.4 all but pythia-160m at 2K, 0.6 all but StableLM-2 at 2K; with sets 27-28 and repeat14, 0.52-0.55: 0.5 missed one pythia repeat by 0.06%, inside since a biased linear's arithmetic is counted over its input, as every stored run and repeat); 0: the generation's
    process_baseline_bytes: int = 0  # resident bytes of a process that imported mlx.core and mlx_lm and ran one op; 0: not measured
    model_mlx_elements: bool = False  # whole-model graphs on a GPU: a command buffer counts its inputs' elements as MLX does (weights included, each of its own dtype); else bytes / 2
    model_waiting_gemms: bool = False  # whole-model graphs on a GPU: the host waits for a command buffer holding a float32 GEMM (measured)
    model_mlx_nodes: bool = False  # whole-model graphs on CUDA: a command buffer's nodes and tape as MLX's encoder makes them: a matmul over per-batch pointers adds the kernel that writes them (CublasGemm::run_batched), an empty input of a concatenation copies nothing, a primitive's copy of an input it cannot read runs inside its eval, right before it (Array.inline), and a partial RoPE copies a part of a split into its output before rotating it (rope.cu); else one node per op, a copy per input, and copies placed as graph nodes
    model_stream_fences: bool = False  # whole-model graphs on a GPU: a model's lazy state (RoPE frequencies) is computed on the stream it was built on, its readers wait on a fence
    host_stall_op: int = -1  # analysis: the op (tape index) of every eval before which the host thread stalls until the worker is idle; -1: never
    bfs_max_width: int = 20
    sdpa_kernels: str = "fallback"
    matmul_workspace: str = ""
    host_node_s: float = 2.0e-6
    host_kernel_s: float = 1.0e-6
    host_sdpa_s: float = 0.0  # the host's seconds more per fused attention call (ScaledDotProductAttention); set by later_evals
    host_malloc_bytes_per_s: float = 0.0
    host_malloc_bytes_per_s_low: float = 0.0
    host_malloc_bytes_per_s_high: float = 0.0
    device_dispatch_s: float = 0.5e-6
    device_bytes_per_s: float = 8.0e9
    completion_lag_s: float = 0.0
    completion_lag_low_s: float = 0.0
    completion_lag_high_s: float = 0.0
    python_array_s: float = 3.0e-6
    host_eval_call_s: float = 0.0
    eval_time_scale: float = 1.0
    host_probe_s: float = 0.0
    notes: str = ""

    @property
    def is_gpu(self) -> bool:
        return self.commit_ops > 0

    def needs_commit(self, ops: float, elements: int) -> bool:
        """Whether a GPU command buffer holding ``ops`` graph nodes and ``elements`` input elements commits, as
        MLX's ``CommandEncoder::needs_commit`` decides (backend/cuda/device.cpp; Metal's shifts alike):
        ``node_count_ > max_ops`` or ``(bytes_in_graph_ >> 20) > max_mb``. The shift floors to whole M elements,
        so a 1,000 M buffer on the H200 commits from 1,001 x 2^20 elements on, not from 1,000 x 2^20 + 1:
        Phi-3-mini 8-bit's 2K prefill holds 1,049,574,656 after a layer's QKV projection, which cut it into nine
        buffers where MLX cuts eight (``docs/generation.md``, "CUDA: MLX's buffer limit counts whole M elements")."""
        return ops > self.commit_ops or (elements >> 20) > (self.commit_elements >> 20)

    def variant(self, end: str) -> BackendProfile:
        """The profile with the ``low`` or ``high`` free timing of its peak range in place."""
        later = getattr(self, f"model_later_host_{end}_factor")
        return replace(self, **{
            "graph_nodes_per_kernel": getattr(self, f"graph_nodes_per_kernel_{end}"),
            "completion_lag_s": getattr(self, f"completion_lag_{end}_s"),
            "host_malloc_bytes_per_s": getattr(self, f"host_malloc_bytes_per_s_{end}"),
            "model_host_malloc_bytes_per_s": 0.0,
            "model_host_kernel_s": getattr(self, f"model_host_kernel_{end}_s") or self.model_host_kernel_s,
            "model_later_host_node_s": self.model_later_host_node_s * later,
            "model_later_host_kernel_s": self.model_later_host_kernel_s * later,
            "model_later_host_sdpa_s": self.model_later_host_sdpa_s * later,
        })

    def later_evals(self) -> BackendProfile:
        """The profile a process's evals after its first play under: ``model_later_host``'s host, its allocations
        free; ``self`` where that is off."""
        if not self.model_later_host:
            return self
        return replace(self, host_node_s=self.model_later_host_node_s, host_kernel_s=self.model_later_host_kernel_s,
                       host_sdpa_s=self.model_later_host_sdpa_s, model_host_node_s=0.0, model_host_kernel_s=0.0,
                       host_malloc_bytes_per_s=0.0, model_host_malloc_bytes_per_s=0.0)

    def first_eval(self) -> BackendProfile:
        """The profile a process's first eval plays under: ``self``, or with the later host's costs per op where
        ``model_first_eval_later_host`` is set (its allocations kept timed)."""
        if not (self.model_first_eval_later_host and self.model_later_host):
            return self
        later = self.later_evals()
        return replace(self, host_node_s=later.host_node_s, host_kernel_s=later.host_kernel_s,
                       host_sdpa_s=later.host_sdpa_s)

    def floor_variant(self) -> BackendProfile:
        """The profile whose frees land as early as MLX's command buffers allow: the device takes no
        time and handlers no lag, so each buffer completes and frees its inputs when it is committed.
        Matmul workspaces (a measured lookup, not derived) are left out, so its peak is a floor."""
        return replace(self, device_bytes_per_s=math.inf, model_device_bytes_per_s=math.inf, device_dispatch_s=0.0,
                       model_device_dispatch_s=0.0, completion_lag_s=0.0, matmul_workspace="")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


FITTED_FIELDS: tuple[str, ...] = (
    "host_node_s",
    "host_kernel_s",
    "device_dispatch_s",
    "device_bytes_per_s",
    "completion_lag_s",
    "completion_lag_low_s",
    "completion_lag_high_s",
    "python_array_s",
    "eval_time_scale",
    "graph_nodes_per_kernel",
    "graph_nodes_per_kernel_low",
    "graph_nodes_per_kernel_high",
    "host_malloc_bytes_per_s",
    "host_malloc_bytes_per_s_low",
    "host_malloc_bytes_per_s_high",
    "range_min_width",
    "range_low_share",
    "range_floor_margin",
    "host_eval_call_s",
    "peak_point_weight",
    "host_probe_s",
    "load_transient_share",
    "load_high_margin",
)

DEFAULTS: dict[str, BackendProfile] = {
    "mlx-cpu": BackendProfile(
        name="mlx-cpu",
        matmul_flops_per_s=3.0e9,
        notes="no_gpu allocator: no rounding, 32 MiB cache, recycle if cache + size <= limit",
    ),
    "mlx-cuda": BackendProfile(
        name="mlx-cuda",
        matmul_flops_per_s=400e12,
        rounding="cuda",
        page_bytes=16384,
        reuse_window_bytes=32768,
        cache_limit_bytes=int(0.95 * 141 * GIB),
        gc_limit_bytes=int(0.95 * 141 * GIB),
        commit_ops=100,
        commit_elements=1000 << 20,
        sdpa_kernels="cuda",
        matmul_workspace="probes/mlx-cuda-0.32.4-*-workspace*-probe.jsonl.xz",
        host_node_s=4.0e-6,
        host_kernel_s=4.0e-6,
        device_dispatch_s=3.0e-6,
        device_bytes_per_s=2.0e12,
        completion_lag_s=20e-6,
        completion_lag_low_s=0.0,
        completion_lag_high_s=200e-6,
        notes="H200: graph limits ops=100, 1000 M elements; frees on stream completion",
    ),
    "mlx-metal": BackendProfile(
        name="mlx-metal",
        matmul_flops_per_s=20e12,
        status="unverified",
        rounding="metal",
        page_bytes=16384,
        reuse_window_bytes=32768,
        cache_limit_bytes=int(1.5 * 96 * GIB),
        gc_limit_bytes=int(0.95 * 96 * GIB),
        commit_ops=50,
        commit_elements=50 << 20,
        sdpa_kernels="metal",
        host_node_s=3.0e-6,
        host_kernel_s=3.0e-6,
        device_dispatch_s=5.0e-6,
        device_bytes_per_s=4.0e11,
        completion_lag_s=50e-6,
        completion_lag_low_s=0.0,
        completion_lag_high_s=500e-6,
        notes="Max/Ultra class (50 ops, 50 M elements per command buffer); from MLX's source, not measured",
    ),
}


@cache
def load_profile(name: str) -> BackendProfile:
    """The shipped profile: defaults overlaid with ``kvsim/data/profiles/<name>.json`` if present."""
    if name not in DEFAULTS:
        raise ValueError(f"backend: unknown profile, got {name!r} (known: {', '.join(DEFAULTS)})")
    path = PROFILES_DIR / f"{name}.json"
    return profile_from_file(path, name) if path.exists() else DEFAULTS[name]


def profile_from_file(path: str | Path, backend: str) -> BackendProfile:
    """A profile JSON (as ``save_profile`` writes) overlaid on ``backend``'s defaults."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot read profile ({err})") from None
    body = doc.get("profile", doc) if isinstance(doc, dict) else None
    if not isinstance(body, dict):
        raise ValueError(f"{path}: a profile must be a JSON object")
    if body.get("name", backend) != backend:
        raise ValueError(f"{path}: profile is for {body.get('name')!r}, the data is {backend!r}")
    return overlay_profile(DEFAULTS[backend], body, str(path))


CHOICES: dict[str, tuple[str, ...]] = {"model_graph_cache_scope": ("first", "generation"), "model_op_time": ("sum", "roofline")}
"""String fields that take one of a few values."""


def overlay_profile(base: BackendProfile, body: Mapping[str, Any], source: str) -> BackendProfile:
    """``base`` with the fields a profile JSON object sets (others are ignored). A value of the wrong
    type raises ``ValueError`` naming ``source``, the field and the value, on one line."""
    values: dict[str, Any] = {}
    for f in fields(BackendProfile):
        if f.name not in body:
            continue
        value, default = body[f.name], getattr(base, f.name)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if isinstance(default, str):
            ok, kind = isinstance(value, str), "a string"
        elif isinstance(default, bool):
            ok, kind = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, kind = number and isinstance(value, int), "an integer"
        else:
            ok, kind = number and math.isfinite(value), "a finite number"
            value = float(value) if ok else value
        if ok and f.name in CHOICES and value not in CHOICES[f.name]:
            ok, kind = False, " or ".join(repr(c) for c in CHOICES[f.name])
        if not ok:
            raise ValueError(f"{source}: profile field {f.name!r} must be {kind}, got {value!r}")
        values[f.name] = value
    return replace(base, **values)


def save_profile(profile: BackendProfile, extra: dict[str, Any], directory: Path = PROFILES_DIR) -> Path:
    """Write ``<directory>/<name>.json`` atomically: the profile plus fit metadata."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{profile.name}.json"
    text = json.dumps({"profile": profile.to_json(), **extra}, indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{profile.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
    load_profile.cache_clear()
    return path
