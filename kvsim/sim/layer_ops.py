"""The ops one layer adds to a step's graph: the cache update and the consumer's read.

Op for op what mlx-lm's ``KVCache.update_and_fetch`` (and kvsim's caches, which share its
op sequence) and the contract's consumers build; see ``mx.export_to_dot`` of a step.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.scenario.layer import COMPANION, PACKED_ITEMSIZE_BYTES, QUANT_PARTS, LayerBuffer
from kvsim.sim.attention import cuda_cudnn_attention, cuda_vector_two_pass_temps_bytes, fused_attention
from kvsim.sim.graph import StepGraph
from kvsim.sim.workspace import WorkspaceTable
from policies.growth import Growth, Mechanism

ALL_REDUCE_ACCUMULATOR_BYTES = 4  # MLX-CUDA's all_reduce partials: float for half types, 4-byte ints

Component = LayerBuffer
"""One buffer of a layer's cache (``kvsim.scenario.layer``): ``K``, ``V``, ``KV``, ``K.scales``, ``index``..."""


@dataclass(frozen=True, slots=True)
class LayerStep:
    """What one layer does in one step."""

    index: int
    rows: int  # rows this step adds (0: only read)
    held_rows: int  # rows held before the step
    capacity_rows: int  # capacity before the step
    growth: Growth | None
    pool_rows: int  # rows of the input pool (prefill_chunk)
    pool: int  # the pool leaf's array id
    k_itemsize_bytes: int
    q_row_bytes: int  # bytes of one K row (batch included): new K/V and q rows
    batch_heads: int  # batch × KV heads (rows of the attention scores per query row)
    dtype: str = "float16"


def update(g: StepGraph, step: LayerStep, comps: tuple[Component, ...], old: dict[str, int]) -> dict[str, int]:
    """Add the cache update; return each component's returned (sliced) array id.

    ``old`` maps component name to the leaf array holding the buffer before the step.
    The final SliceUpdate outputs are marked held by Python (the cache's new state).
    """
    n, isz = step.rows, step.k_itemsize_bytes
    whole = n == step.pool_rows
    attention = [c.name.split(".")[0] for c in comps if c.name != COMPANION]
    quantized = len(attention) > len(set(attention))
    new = {kv: g.scaled(step.pool, n * step.q_row_bytes, isz, whole) for kv in dict.fromkeys(attention)}
    if quantized:
        new = _quantize(g, step, comps, new)
    for c in comps:  # the companion's rows (ds4's indexer keys): computed from the step's input like K
        if c.name == COMPANION:
            new[c.name] = g.scaled(step.pool, n * c.row_bytes, c.itemsize_bytes, False)
    gr = step.growth
    base: dict[str, int] = {}
    if gr is None:
        base = dict(old)
    elif gr.mechanism is Mechanism.FRESH:
        zeros = {c.name: g.zeros(gr.capacity_rows * c.row_bytes, c.itemsize_bytes) for c in comps}
        if n == gr.capacity_rows:  # slice_update short-circuit: the cache holds the update itself
            for c in comps:
                g.arrays[new[c.name]].py_held = True
                g.arrays[new[c.name]].label = (step.index, c.name)
            return dict(new)
        base = zeros
    elif gr.mechanism is Mechanism.TRIM:  # RotatingKVCache._trim: [head, tail] of the old buffer
        for c in comps:
            parts = [g.view("Slice", old[c.name]), g.view("Slice", old[c.name])]
            total = gr.capacity_rows * c.row_bytes
            base[c.name] = g.op("Concatenate", parts, total, kernels=1 + (gr.head_rows > 0), work_bytes=2 * total)
    elif gr.mechanism is Mechanism.CONCAT and not gr.fills_zeros:  # RotatingKVCache prefill: [kept, new]
        out = {}
        for c in comps:
            if gr.kept_rows < step.capacity_rows:  # _trim: [first keep rows, last rows, new]
                parts = [g.view("Slice", old[c.name]), g.view("Slice", old[c.name]), new[c.name]]
            else:
                parts = [old[c.name], new[c.name]]
            copies = len(parts) - (len(parts) == 3 and gr.head_rows == 0)  # MLX copies no empty part
            total = gr.capacity_rows * c.row_bytes
            out[c.name] = g.op("Concatenate", parts, total, kernels=copies, work_bytes=2 * total)
            g.arrays[out[c.name]].py_held = True
            g.arrays[out[c.name]].label = (step.index, c.name)
        return out
    elif gr.mechanism in (Mechanism.CONCAT, Mechanism.REALLOC):  # realloc on MLX: concat of the live prefix
        zeros = {c.name: g.zeros(gr.extension_rows * c.row_bytes, c.itemsize_bytes) for c in comps}
        kept = {
            c.name: old[c.name] if gr.kept_rows == step.capacity_rows else g.view("Slice", old[c.name]) for c in comps
        }
        for c in comps:
            total = gr.capacity_rows * c.row_bytes
            base[c.name] = g.op("Concatenate", [kept[c.name], zeros[c.name]], total, kernels=2, work_bytes=2 * total)
    else:  # IN_PLACE: new blocks beside the old ones; writes land in the new block
        for c in comps:
            base[c.name] = g.zeros(gr.extension_rows * c.row_bytes, c.itemsize_bytes)
    capacity = gr.capacity_rows if gr is not None else step.capacity_rows
    out: dict[str, int] = {}
    for c in comps:
        nbytes = g.arrays[base[c.name]].nbytes
        written = g.op("SliceUpdate", [base[c.name], new[c.name]], nbytes, work_bytes=2 * n * c.row_bytes, donors=(0,))
        g.arrays[written].py_held = True
        g.arrays[written].label = (step.index, c.name)
        out[c.name] = written if step.held_rows + n == capacity else g.view("Slice", written)
    return out


def fetch_held(g: StepGraph, step: LayerStep, old: dict[str, int]) -> dict[str, int]:
    """``cache.state`` of a layer that receives no rows this step: slices when not full."""
    full = step.held_rows == step.capacity_rows
    return {name: a if full else g.view("Slice", a) for name, a in old.items()}


def _quantize(g: StepGraph, step: LayerStep, comps: tuple[Component, ...], new: dict[str, int]) -> dict[str, int]:
    """``mx.quantize`` of the new K and V: one op with three outputs (packed, scales, biases)."""
    out: dict[str, int] = {}
    for kv in new:
        parts = [c for c in comps if c.name.split(".")[0] == kv]
        ids = []
        for c in parts:
            ids.append(g.op("Quantize", [new[kv]], step.rows * c.row_bytes, work_bytes=2 * step.rows * step.q_row_bytes))
        for i in ids:
            g.arrays[i].siblings = [j for j in ids if j != i]
        out.update({c.name: i for c, i in zip(parts, ids)})
    return out


def read(
    g: StepGraph, step: LayerStep, comps: tuple[Component, ...], fetched: dict[str, int], consumer: str,
    held_rows_after: int, sdpa_kernels: str = "fallback", workspace: WorkspaceTable | None = None,
) -> int:
    """Add the consumer's read of the returned K and V (a shared latent is both) and of a companion's last
    row; return the output array id.

    ``sdpa`` is one fused op where the backend has a kernel for it (``kvsim.sim.attention``), else
    MLX's fallback graph: scale, ``q @ k.T``, causal mask, softmax, ``@ v``; each matmul holds
    the cuBLASLt workspace ``workspace`` measured for its shape until its command buffer completes.
    """
    companion = next((c for c in comps if c.name == COMPANION), None)
    if companion is None:
        return _read_kv(g, step, comps, fetched, consumer, held_rows_after, sdpa_kernels, workspace)
    out = _read_kv(g, step, comps[:-1], fetched, consumer, held_rows_after, sdpa_kernels, workspace)
    row = (companion.row_bytes // companion.itemsize_bytes, companion.itemsize_bytes)
    last = _last_row_sum(g, fetched[COMPANION], row, companion.itemsize_bytes, strided=False)
    return g.op("Add", [out, last], step.k_itemsize_bytes, donors=(0, 1))


def _read_kv(
    g: StepGraph, step: LayerStep, comps: tuple[Component, ...], fetched: dict[str, int], consumer: str,
    held_rows_after: int, sdpa_kernels: str, workspace: WorkspaceTable | None,
) -> int:
    """The consumer's read of the attention buffers (see ``read``)."""
    isz = step.k_itemsize_bytes
    capacity = step.growth.capacity_rows if step.growth is not None else step.capacity_rows
    strided = step.batch_heads > 1 and capacity > 1  # k[:, :, -1, :] skips the other rows of each head
    rows = {c.name.split(".")[-1]: (c.row_bytes // c.itemsize_bytes, c.itemsize_bytes) for c in comps}  # elements, itemsize
    if "KV" in fetched:  # a shared latent is read as both K and V
        fetched = {"K": fetched["KV"], "V": fetched["KV"]}
        rows["K"] = rows["KV"]
    elif "KV.packed" in fetched:
        fetched = {f"{kv}.{p}": fetched[f"KV.{p}"] for kv in ("K", "V") for p in QUANT_PARTS}
    if "K" not in fetched:  # quantized: every part's last row is summed (sdpa reads them the same way)
        return _sum_last_rows(g, [fetched[f"K.{p}"] for p in QUANT_PARTS], [fetched[f"V.{p}"] for p in QUANT_PARTS], isz,
                              [rows[p] for p in QUANT_PARTS], strided, packed=True)
    keys, values = fetched["K"], fetched["V"]
    if consumer == "sdpa":
        q_rows = max(step.rows, 1)
        q = g.scaled(step.pool, q_rows * step.q_row_bytes, isz, q_rows == step.pool_rows)
        head_dim = step.q_row_bytes // (step.batch_heads * isz)
        if fused_attention(sdpa_kernels, q_rows, held_rows_after, head_dim, isz):
            out = g.op("ScaledDotProductAttention", [q, keys, values], q_rows * step.q_row_bytes,
                       work_bytes=g.arrays[keys].nbytes + g.arrays[values].nbytes)
            if sdpa_kernels == "cuda" and not cuda_cudnn_attention(q_rows, held_rows_after, head_dim, isz):
                temps = cuda_vector_two_pass_temps_bytes(q_rows, held_rows_after, head_dim, step.batch_heads)
                g.arrays[out].gpu_temps_bytes = temps
                g.arrays[out].extra_gpu_nodes = 1 if temps else 0  # the second pass
            return g.view("Squeeze", _sum(g, out, isz, q_rows * step.q_row_bytes, q_rows * step.q_row_bytes // isz, isz))
        q = g.op("Multiply", [g.view("Broadcast", g.scalar(isz)), q], q_rows * step.q_row_bytes, donors=(1,))
        scores_bytes = step.batch_heads * q_rows * held_rows_after * isz
        scores = g.op("Matmul", [q, g.view("Transpose", keys)], scores_bytes, work_bytes=scores_bytes + g.arrays[keys].nbytes)
        _hold_workspace(g, scores, workspace, "qk", step, q_rows, held_rows_after, head_dim)
        if step.rows > 1:
            rows_ids = g.view("Broadcast", g.view("ExpandDims", g.op("Arange", [], q_rows * 4)))
            cols_ids = g.view("Broadcast", g.view("ExpandDims", g.op("Arange", [], held_rows_after * 4)))
            mask = g.view("Broadcast", g.op("GreaterEqual", [rows_ids, cols_ids], q_rows * held_rows_after))
            ninf = g.view("Broadcast", g.scalar(isz))
            scores = g.op("Select", [mask, scores, ninf], scores_bytes, donors=(1,))
        probs = g.op("Softmax", [scores], scores_bytes, work_bytes=2 * scores_bytes, donors=(0,))
        out = g.op("Matmul", [probs, values], q_rows * step.q_row_bytes, work_bytes=scores_bytes + g.arrays[values].nbytes)
        _hold_workspace(g, out, workspace, "pv", step, q_rows, held_rows_after, head_dim)
        return g.view("Squeeze", _sum(g, out, isz, q_rows * step.q_row_bytes, q_rows * step.q_row_bytes // isz, isz))
    return _sum_last_rows(g, [keys], [values], isz, [rows["K"]], strided)


def _hold_workspace(g: StepGraph, matmul: int, workspace: WorkspaceTable | None, op: str, step: LayerStep,
                    q_rows: int, k_rows: int, head_dim: int) -> None:
    """Give a fallback attention matmul the cuBLASLt workspace measured for its shape."""
    if workspace is not None:
        nbytes = workspace.bytes_for(op, step.dtype, step.batch_heads, head_dim, q_rows, k_rows)
        g.arrays[matmul].gpu_temps_bytes = (nbytes,) if nbytes else ()


def all_reduce_blocks(elements: int) -> int:
    """Blocks of MLX-CUDA's first ``all_reduce`` pass (``reduce/all_reduce.cu``, ``get_args``): one
    while 512 threads x 8 reads need under 32 steps; more blocks write partials a second pass sums."""
    threads = min(512, -(-elements // 8))
    threads = -(-threads // 32) * 32
    steps = -(-elements // (threads * 8))
    for limit, blocks in ((32, 1), (128, 32), (512, 128), (1024, 512)):
        if steps < limit:
            return blocks
    return 1024


def _sum(g: StepGraph, src: int, out_bytes: int, work_bytes: int, elements: int, itemsize_bytes: int,
         strided: bool = False) -> int:
    """``src.sum()``: one Reduce. MLX-CUDA first copies a strided input into a contiguous temporary,
    and an all-reduce of many elements writes per-block partials to a temporary that a second
    kernel sums (``mlx/backend/cuda/reduce.cu``)."""
    out = g.op("Sum", [src], out_bytes, work_bytes=work_bytes)
    blocks = all_reduce_blocks(elements)
    temps = ((elements * itemsize_bytes,) if strided else ()) + ((blocks * ALL_REDUCE_ACCUMULATOR_BYTES,) if blocks > 1 else ())
    g.arrays[out].extra_gpu_nodes = len(temps)
    g.arrays[out].gpu_temps_bytes = temps
    return out


def _last_row_sum(g: StepGraph, arr: int, row: tuple[int, int], out_bytes: int, strided: bool) -> int:
    """``arr[:, :, -1, :].sum()``; ``row`` is (elements of one row, batch included; itemsize)."""
    sliced = g.view("Squeeze", g.view("Slice", arr))
    return g.view("Squeeze", _sum(g, sliced, out_bytes, out_bytes, *row, strided))


def _sum_last_rows(
    g: StepGraph, keys: list[int], values: list[int], isz: int, rows: list[tuple[int, int]], strided: bool,
    packed: bool = False,
) -> int:
    """``sum(k[:, :, -1, :])`` of each part, added left to right: K parts, then V parts.

    ``rows``: (elements of one row, batch included; itemsize) of each part; ``strided``: a row is
    not contiguous (several batch rows or heads). ``packed``: the first part is a quantized cache's
    uint32 words; its sum is cast (``AsType``) to the scales' dtype before the first add, as MLX's
    type promotion does."""

    def last_row_sum(arr: int, row: tuple[int, int], out_bytes: int = isz) -> int:
        return _last_row_sum(g, arr, row, out_bytes, strided)

    def total(parts: list[int]) -> int:
        if packed:
            acc = g.op("AsType", [last_row_sum(parts[0], rows[0], PACKED_ITEMSIZE_BYTES)], isz, work_bytes=isz)
        else:
            acc = last_row_sum(parts[0], rows[0])
        for p, row in zip(parts[1:], rows[1:]):
            acc = g.op("Add", [acc, last_row_sum(p, row)], isz, donors=(0, 1))
        return acc

    return g.op("Add", [total(keys), total(values)], isz, donors=(0, 1))
