"""CUDA command buffers of a traced model as MLX 0.32.4 fills and paces them (``docs/generation.md``, "CUDA: MLX's
command buffers"): every kernel input counts its elements toward a buffer's limit, weights included
(``CommandEncoder::set_input_array``), and the host waits for a buffer holding a float32 GEMM (measured)."""

from __future__ import annotations

import json
import lzma
import re
from dataclasses import replace
from pathlib import Path

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models.cache import make_prompt_cache

from kvsim.core.paths import REPO_DATA_DIR
from kvsim.generation.config import ModelConfig, load_model_config
from kvsim.generation.measure import scale_config
from kvsim.generation.model import BuiltModel, build_model, lazy_state
from kvsim.generation.schedule import RecordedEval, Workload, record, replay, trace_settings
from kvsim.generation.trace import elements, tracing
from kvsim.sim.graph import Array
from kvsim.sim.profile import load_profile

KERNELS = REPO_DATA_DIR / "generation" / "mlx-cuda-0.32.4" / "kernels"
FUSED_KERNEL = re.compile(r"_ZN3mlx4core2cu\d+[A-Z]")
"""A kernel MLX's CUDA backend generates for a ``Compiled`` primitive: its name spells the fused ops
(``Cf4ISigmoidADf4IBroadcast...``), where every other kernel is a named template (``6copy_v``, ``14rms_norm_small``)."""
LAYERS = 2
PREFILL_GEMMS = 7 * (LAYERS - 1) + 2
"""Llama's projections a prefill chunk computes: q, k, v, o, gate, up and down (no bias) in every layer but the last,
which only needs k and v for its cache (the chunk evaluates the caches' state, not the logits)."""


def _built(dtype: str, layers: int = LAYERS, hidden: int = 256, intermediate: int = 768) -> BuiltModel:
    config = scale_config(load_model_config("llama-3.2-1b-instruct").config, layers, hidden_size=hidden,
                          intermediate_size=intermediate, vocab_size=8192)
    return build_model(ModelConfig(config, "llama-small"), dtype)


def _prefill(built: BuiltModel, backend: str) -> list[Array]:
    rec = record(built, Workload(512, 2, prefill_step_size=512), load_profile(backend))
    return next(e for e in rec.events if isinstance(e, RecordedEval) and e.phase == "prefill").graph.graph.arrays


def test_weights_count_their_elements_toward_a_cuda_buffer() -> None:
    built = _built("bfloat16")
    arrays = _prefill(built, "mlx-cuda")
    weights = [v.size for k, v in tree_flatten(built.model.parameters()) if k.startswith("model.layers.0.")]
    leaves = [a.elements for a in arrays if not a.prim]
    assert len(weights) == 9 and all(leaves.count(n) >= weights.count(n) for n in set(weights))
    assert sum(a.nbytes for a in arrays if not a.prim) == 0  # held by the pool, not by this eval
    views = [a for a in arrays if a.prim == "Broadcast" and arrays[a.inputs[0]].prim]
    assert views and all(a.elements == arrays[a.inputs[0]].elements for a in views)  # read as their source


@pytest.mark.parametrize(("dtype", "backend", "waiting"), [
    ("float32", "mlx-cuda", PREFILL_GEMMS), ("bfloat16", "mlx-cuda", 0), ("float32", "mlx-cpu", 0)])
def test_float32_linear_layers_make_the_cuda_host_wait(dtype: str, backend: str, waiting: int) -> None:
    """Only the projections' GEMMs wait: the fallback attention's batched float32 score products do not."""
    arrays = _prefill(_built(dtype), backend)
    marked = [a for a in arrays if a.waits]
    assert len(marked) == waiting
    assert all(a.prim == "Matmul" and a.elements * 4 == a.nbytes for a in marked)


def test_a_buffer_commits_past_its_element_limit_in_whole_m() -> None:
    """MLX commits once ``(bytes_in_graph_ >> 20) > max_mb`` (``CommandEncoder::needs_commit``): on the H200 (1,000 M)
    a buffer of 1,001 x 2^20 - 1 elements stays open, one of 1,001 x 2^20 commits; the op limit counts nodes past 100."""
    p = load_profile("mlx-cuda")
    assert (p.commit_ops, p.commit_elements) == (100, 1000 << 20)
    assert not p.needs_commit(10, (1001 << 20) - 1)
    assert p.needs_commit(10, 1001 << 20)
    assert not p.needs_commit(100, 0) and p.needs_commit(101, 0)


def test_a_waiting_host_frees_each_buffer_before_it_goes_on() -> None:
    """With the wait a float32 model's prefill peaks as the floor does (every buffer freed when committed);
    without it the host runs buffers ahead and peaks higher."""
    built = _built("float32", layers=6, hidden=512, intermediate=2048)
    profile = load_profile("mlx-cuda")
    rec = record(built, Workload(4096, 2, prefill_step_size=2048), profile)

    def peak(p: object) -> int:
        return max(e.peak_bytes for e in replay(rec, p).evals)

    waiting, floor = peak(profile), peak(profile.floor_variant())
    ahead = peak(replace(profile, model_waiting_gemms=False))
    assert waiting == floor < ahead


def test_a_cast_kvsim_adds_counts_its_elements() -> None:
    """phi-2 attends in float32 over float16 keys and values: MLX casts them (``AsType``, ``ops.cpp``'s ``matmul``) and
    a command buffer counts each cast's elements, not its bytes / 2 (which is twice a float32 array's count)."""
    config = scale_config(load_model_config("phi-2").config, LAYERS, hidden_size=320, num_attention_heads=4,
                          num_key_value_heads=4, intermediate_size=768, vocab_size=8192)  # heads 80 wide, as phi-2's
    arrays = _prefill(build_model(ModelConfig(config, "phi-2-small")), "mlx-cuda")
    casts = [a for a in arrays if a.prim == "AsType" and a.elements > 0 and a.nbytes == 4 * a.elements]
    assert casts
    assert all(a.prim != "AsType" or a.elements * (a.nbytes // max(a.elements, 1)) == a.nbytes for a in arrays)


def _committed(name: str, kernels: bool = True) -> list[dict]:
    """Rows of CUDA graphs MLX committed at its defaults (``docs/tools/device/graph_commits.py``); ``kernels``: only
    those whose first eval lists its kernels."""
    path = KERNELS / name
    text = lzma.decompress(path.read_bytes()).decode() if path.suffix == ".xz" else path.read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines()]
    return [r for r in rows if set(r["env"]) == {"MLX_SAVE_CUDA_GRAPHS_DOT_FILE"}
            and (not kernels or "kernels_per_commit" in r["evals"][0])]


COMMITTED = (_committed("graph-commits.jsonl") + _committed("graph-commits-misses.jsonl.xz")
             + _committed("graph-commits-fenced.jsonl.xz"))


def _id(row: dict) -> str:
    return f"{Path(row['config']).stem}-{row['prompt_tokens']}"


@pytest.mark.parametrize("row", COMMITTED + _committed("graph-commits-phi3.jsonl.xz"), ids=_id)
def test_compiled_functions_fuse_as_mlx_fused_them_on_cuda(row: dict) -> None:
    """The first eval's ``Compiled`` nodes are the fused kernels MLX launched in it: one ``swiglu`` or ``silu`` a
    layer, phi-2's ``gelu_approx`` in two (``x ** 3`` past the depth limit), gemma-3's in two and its two shapeless
    ``clip_residual`` adds (every layer but the last, whose prefill computes only its keys and values)."""
    kernels = [k.split("\n")[1] for commit in row["evals"][0]["kernels_per_commit"] for k in commit]
    built = build_model(load_model_config(row["config"]))
    rec = record(built, Workload(row["prompt_tokens"], 2, prefill_step_size=row["step"]), load_profile("mlx-cuda"))
    first = next(e for e in rec.events if isinstance(e, RecordedEval))
    assert sum(a.prim == "Compiled" for a in first.graph.graph.arrays) == sum(map(bool, map(FUSED_KERNEL.match, kernels)))


@pytest.mark.parametrize("row", COMMITTED + _committed("graph-commits-phi3.jsonl.xz")
                         + _committed("graph-commits-32k.jsonl", kernels=False)
                         + _committed("graph-commits-gemma4b.jsonl.xz")
                         + _committed("graph-commits-heldout18.jsonl.xz"), ids=_id)
def test_command_buffers_are_cut_where_mlx_cut_them(row: dict) -> None:
    """Each eval's command buffers against the CUDA graphs MLX committed. kvsim plays the first prompt chunk and
    the last two, then the decode steps; MLX's evals that commit nothing are left out, and so are the buffers of a
    Llama-3 model's lazy RoPE frequencies (one a layer, on the default stream; ``fenced_state``). Every count is MLX's but phi-2's
    first chunk (21 against 20), whose layers add up MLX's 29 kernels each. Phi-3-mini's later chunks in bf16 and 4 bits
    and its 8-bit 2K prompt were one buffer over MLX's until the element limit counted whole M, as MLX's shift does
    (``BackendProfile.needs_commit``); its first chunk was 5 and 8 before slices counted their span. bf16
    Llama-3.1-8B at 32K tokens: 17, 17, 10 and 12, as MLX's, where counting the caches a donated SliceUpdate never
    reads made 19, 19, 12 and 14. Gemma-3-4B's 8K prompt chunks are MLX's 15, 17 and 18, and its first token, cut on
    the node count, MLX's 13 since a pointer-batched matmul counts its second node and an empty concatenation input
    none (``model_mlx_nodes``; 14 before)."""
    # the cut does not depend on which evals play: the first chunk and the last two, as with MLX's graph cache met
    # in the first eval only (the shipped profile plays the second chunk and the one before the last two as well)
    profile = replace(load_profile("mlx-cuda"), model_graph_cache_scope="first").floor_variant()
    built = build_model(load_model_config(row["config"]))
    found: list[list[int]] = []
    replay(record(built, Workload(row["prompt_tokens"], 2, prefill_step_size=row["step"]), profile), profile,
           commits=found)
    real = [e["commits"] for e in row["evals"] if e.get("commits")]
    real[0] -= len(lazy_state(built.model))
    skipped = max(0, -(-(row["prompt_tokens"] - 1) // row["step"]) - 3)
    played = real[:1] + real[1 + skipped:len(found) + skipped]
    kvsim = [len(c) for c in found]
    assert kvsim == played or (Path(row["config"]).stem == "phi-2" and kvsim[1:] == played[1:]
                                and kvsim[0] - played[0] == 1), (kvsim, played)


def test_gpu_norms_and_rope_write_into_a_donatable_input() -> None:
    """``RMSNorm::eval_gpu`` and ``RoPE::eval_gpu`` (``backend/cuda``) take their input's buffer where it is
    donatable, else allocate one with its strides; a norm whose rows are not packed copies them first."""
    x = mx.zeros((1, 16, 64), mx.float32)
    with tracing("cuda") as t:
        packed = mx.fast.rms_norm(x * 2, mx.ones((64,)), 1e-6)
        strided = mx.fast.rms_norm((x * 2).transpose(0, 2, 1), mx.ones((16,)), 1e-6)
        heads = (x * 2).reshape(1, 16, 4, 16).transpose(0, 2, 1, 3)
        rotated = mx.fast.rope(heads, 16, traditional=False, base=1e4, scale=1.0, offset=0)
    g = t.graph.arrays
    norm, copied, rope = (g[t.node(a)] for a in (packed, strided, rotated))
    assert norm.donors == rope.donors == copied.donors == (0,)
    assert g[norm.inputs[0]].prim != "Copy" and g[copied.inputs[0]].prim == "Copy"
    assert t.layout[t.node(rotated)] == t.layout[t.node(heads)] == (1024, 16, 64, 1)  # the heads' strides kept


def test_a_slice_counts_and_allocates_its_span() -> None:
    """MLX's ``data_size()`` of a slice runs from its first element to its last (``slice``,
    ``backend/common/slicing.cpp``). A command buffer counts that much (``set_input_array``), and a RoPE that cannot
    write into the slice allocates that much: Phi-3's queries, a third of its fused ``qkv_proj``, span nearly all of
    it. CUDA attention's output keeps the queries' layout, so the reshape after it is a view."""
    x = mx.zeros((1, 16, 3 * 64), mx.bfloat16)
    with tracing("cuda") as t:
        qkv = x * 2
        q, k = (qkv[..., i * 64:(i + 1) * 64].reshape(1, 16, 4, 16).transpose(0, 2, 1, 3) for i in range(2))
        rotated = mx.fast.rope(q, 16, traditional=False, base=1e4, scale=1.0, offset=0)
        o = mx.fast.scaled_dot_product_attention(rotated, k, k, scale=0.25, mask="causal")
        rows = o.transpose(0, 2, 1, 3).reshape(1, 16, 64)
    extent = 15 * 192 + 64
    assert elements(t, t.node(q)) == extent and t.graph.arrays[t.node(rotated)].nbytes == extent * 2
    assert t.graph.arrays[t.node(rows)].is_view


def test_attention_with_sinks_is_fused_unless_an_array_masks_it() -> None:
    """gpt-oss-20b's first two layers at 2,000 tokens, each op evaluated alone on an H200
    (``op-bytes-gpt-oss.jsonl``): the causal layer's attention allocates its output alone (cuDNN), the sliding-window
    layer's, masked by an array, 1.04 GB: the fallback's two 512 MB score arrays at once. kvsim's CUDA trace makes
    one node of the output's bytes for the first, and the fallback graph for the second."""
    rows = [json.loads(line) for line in (KERNELS / "op-bytes-gpt-oss.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["tokens"] == 2000)
    real = [b for op, b, _ in row["ops"] if op == "fast.scaled_dot_product_attention"]
    config = dict(load_model_config("gpt-oss-20b").config)
    config["num_hidden_layers"], config["layer_types"] = 2, config["layer_types"][:2]
    assert config["layer_types"] == ["sliding_attention", "full_attention"]
    built = build_model(ModelConfig(config, "gpt-oss-2-layers"))
    cache = make_prompt_cache(built.model)
    settings = trace_settings(load_profile("mlx-cuda"))
    with settings.tracing() as t:
        t.register_leaves([v for _, v in tree_flatten(built.model.parameters())])
        built.model(mx.zeros((1, 2000), mx.uint32), cache=cache)
    fused = [a for a in t.graph.arrays if a.prim == "ScaledDotProductAttention"]
    assert len(fused) == 1 and abs(fused[0].nbytes - real[1]) <= 4096, (len(fused), real)
    scores = [a.nbytes for a in t.graph.arrays if a.nbytes >= 64 * 2000 * 2000 * 2]
    assert real[0] >= 2 * 64 * 2000 * 2000 * 2 and len(scores) >= 2, (real, scores)
