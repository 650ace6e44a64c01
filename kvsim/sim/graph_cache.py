"""MLX's CUDA graph cache as a process's host meets it (``backend/cuda/device.cpp``, ``CommandEncoder::commit``).

MLX keys a command buffer's CUDA graph by its structure alone: each node's type and which earlier nodes of the buffer
it depends on (``graph_nodes_key_``, ``graph_deps_key_``; a child graph's type is its own nodes' types and cluster
widths, ``subgraph_to_key``), no kernels and no sizes. A structure met before in the process is updated in place
(``cudaGraphExecUpdate``: 0.02-0.13 ms on average in the trace); a new one is instantiated. kvsim's keys take each op's
nodes as MLX's encoder adds them (``BackendProfile.model_mlx_nodes``) but not what cuBLAS captures per shape.
Traced with CUPTI on an H200 (``kernels/first-eval-trace.tar.xz``, ``docs/generation.md``, "CUDA: a first eval
traced"), two in three instantiations that met graphs in flight returned only once the device had finished every one
of them, then 0.5-2.5 ms later (31.6 ms with one graph in flight, 777.6 ms with 41); the third returned within 1.5 ms
with the graph launched before it still running. kvsim plays every instantiation as that third: the host waits for
every graph in flight but the newest (``BackendProfile.model_instantiate_overlap_buffers``), the most an unfenced first
eval's launches were seen to leave running, so a buffer's peak meets its predecessor's work as it does once in three
real instantiations. Its quantized first evals then read within 1% of their runs where most did. So a first
eval whose buffers are new structures runs at most one buffer ahead of the device, and lands low; one whose buffers
repeat (a model cut at every layer's fences) runs ahead as a warm one does.

kvsim keys a buffer by its ops: each op's graph nodes and which of the buffer's earlier ops it reads (views, which
launch nothing, are left out). Qwen3-30B-A3B 4-bit's first eval keys 17 distinct buffers of 17 at 1K and 9 of 18 at
2K; MLX instantiated 22 of 23 and 14 of 24.

MLX keeps the cache for the process, so a generation's later prompt chunks meet it too: a chunk's buffers whose
structures an earlier chunk committed are updated in place, the rest instantiated, and those instantiations wait as a
first eval's do. Traced (``kernels/chunk-trace.tar.xz``, ``docs/generation.md``, "CUDA: a generation's later chunks
traced"), kvsim's keys instantiate MLX's count in 12 of the 14 later chunks it plays of five generations, and one more
in the other two. ``BackendProfile.model_graph_cache_scope`` says whether a play keeps one cache for the generation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class GraphCache:
    """The structures a process has committed, and the open buffer's as it fills."""

    seen: set[tuple[tuple[int, tuple[int, ...]], ...]] = field(default_factory=set)
    _ids: dict[int, int] = field(default_factory=dict)  # array -> its node's place in the open buffer
    _nodes: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)

    def add(self, array: int, inputs: Iterable[int], nodes: int) -> None:
        """An op of ``nodes`` graph nodes joins the open buffer, reading ``inputs``."""
        if nodes:
            deps = tuple(sorted({self._ids[x] for x in inputs if x in self._ids}))
            self._ids[array] = len(self._nodes)
            self._nodes.append((nodes, deps))

    def commit(self) -> bool:
        """Close the open buffer; whether its structure is new to the process (MLX instantiates its graph)."""
        key = tuple(self._nodes)
        self._nodes.clear()
        self._ids.clear()
        new = key not in self.seen
        self.seen.add(key)
        return new
