"""CUDA graph nodes as MLX's encoder makes them (``BackendProfile.model_mlx_nodes``; ``docs/generation.md``, "CUDA:
a command buffer's nodes as MLX's encoder makes them"): a matmul over per-batch pointers is two nodes, an empty
concatenation input copies nothing, and a primitive's copy of an input runs inside its eval. With them kvsim cuts
Gemma-3-4B's 8K prompt into MLX's command buffers node for node, and its graph cache instantiates the buffers MLX's
did, chunk by chunk."""

from __future__ import annotations

import json
import lzma
import statistics
from dataclasses import replace
from functools import cache

import mlx.core as mx
import pytest
from cuda_runs import RUNS, errors, outside, paired, profile_before_centred, remade
from cupti_trace import read_trace

from kvsim.generation.config import load_model_config
from kvsim.generation.layout import collapse_batches, gemm_pointer_batched, row_major
from kvsim.generation.model import build_model
from kvsim.generation.schedule import Workload, record, replay
from kvsim.generation.trace import tracing
from kvsim.sim import graph_cache
from kvsim.sim.graph import Array
from kvsim.sim.profile import load_profile
from kvsim.sim.tape import execution_order

GEMMA_4B = "docs/tools/device/heldout9/gemma-3-4b-it.json"


def _top_level(commit: list[str]) -> int:
    """The nodes MLX counts in a dumped command buffer (``graph_commits.py``'s ``kernels_per_commit``: each node's
    index in its graph, a newline, its kernel): the buffer's own nodes are numbered first, from 0; the nodes inside
    its child graphs (cuBLAS's and cuDNN's captured calls, one node each to MLX) follow, numbered from 0 again."""
    n = 0
    for node in commit:
        if int(node.split("\n")[0]) != n:
            break
        n += 1
    return n


@cache
def _dumped(file: str) -> list[dict]:
    """The rows of a ``graph_commits.py`` dump in ``kernels/``."""
    text = lzma.decompress((RUNS / "kernels" / file).read_bytes()).decode()
    return [json.loads(line) for line in text.splitlines()]


def _first_commits(name: str, tokens: int, mlx_nodes: bool = True) -> tuple[list[int], list[int]]:
    """kvsim's nodes per command buffer of a generation's first eval, and its buffers per eval."""
    profile = replace(load_profile("mlx-cuda"), model_mlx_nodes=mlx_nodes)
    commits: list[list[int]] = []
    replay(record(build_model(load_model_config(name)), Workload(tokens, 2), profile), profile, commits)
    return commits[0], [len(c) for c in commits]


def test_grouped_query_products_run_over_pointers() -> None:
    """The fallback attention's products with 4 key heads of 2 queries each: keys broadcast over the repeats leave two
    batch dimensions, so cuBLAS runs over a pointer per batch. One key head folds the repeats into the rows; one query
    per key head (no broadcast) collapses to one strided batch."""
    q, d, s = (1, 4, 2, 16, 8), 8, 32
    keys_t = ((1, 4, 2, d, s), (4 * s * d, s * d, 0, 1, d))  # a cache slice (4, s, d) transposed, repeated
    assert gemm_pointer_batched(q, row_major(q), *keys_t)
    one_head = ((1, 1, 2, d, s), (s * d, s * d, 0, 1, d))
    assert not gemm_pointer_batched((1, 1, 2, 16, 8), row_major((1, 1, 2, 16, 8)), *one_head)
    mha = ((1, 4, d, s), (4 * s * d, s * d, 1, d))
    assert not gemm_pointer_batched((1, 4, 16, 8), row_major((1, 4, 16, 8)), *mha)
    assert not gemm_pointer_batched((16, 8), row_major((16, 8)), (8, 32), row_major((8, 32)))
    assert collapse_batches((1, 4, 2), [(64, 16, 8), (32, 8, 0)]) == ((4, 2), [(16, 8), (8, 0)])
    assert collapse_batches((1, 1), [(1, 1)]) == ((1,), [(0,)])


def test_an_inline_copy_runs_right_before_its_reader() -> None:
    """MLX's tape walks its graph, where a norm's copy of a strided input is no node: kvsim's tape reads through it
    and runs it right before the norm, not where its place in the graph would put it."""
    arrays = [Array(8), Array(8, "Exp", [0], 1), Array(8, "Copy", [0], 1, inline=True), Array(8, "Log", [1], 1),
              Array(8, "RMSNorm", [2], 1), Array(8, "Add", [3, 4], 1)]
    order = execution_order(arrays, [5])
    assert order.index(2) + 1 == order.index(4)
    plain = [replace_inline(a) for a in arrays]
    assert execution_order(plain, [5]) != order


def replace_inline(a: Array) -> Array:
    return Array(a.nbytes, a.prim, a.inputs, a.kernels)


@pytest.mark.parametrize(("mlx_nodes", "kernels"), [(True, 3), (False, 4)])
def test_an_empty_concatenation_input_copies_nothing(mlx_nodes: bool, kernels: int) -> None:
    """mlx-lm's ``RotatingKVCache`` joins an empty ``keep`` slice, the kept rows and the new ones at every prefill
    chunk: MLX copies the two that hold rows and joins them with an empty node (``concatenate_gpu``)."""
    v = mx.zeros((1, 2, 8, 4))
    with tracing("cuda", mlx_nodes=mlx_nodes) as t:
        joined = mx.concatenate([v[..., :0, :], v[..., 3:, :], v * 2], axis=2)
    assert t.graph.arrays[t.node(joined)].kernels == kernels


def _mlx_commits() -> list[list[int]]:
    """MLX's nodes per command buffer in each of Gemma-3-4B's prompt chunks at 8K (``graph-commits-gemma4b``: its
    CUDA graphs dumped)."""
    row = next(r for r in _dumped("graph-commits-gemma4b.jsonl.xz") if "kernels_per_commit" in r["evals"][0])
    return [[_top_level(commit) for commit in e["kernels_per_commit"]] for e in row["evals"][:4]]


def _played(mlx_nodes: bool) -> tuple[list[list[int]], list[str]]:
    """kvsim's nodes per command buffer in the 8K prompt's four chunks, and whether each buffer's structure was new
    to the process ("I": instantiated) or known ("U": updated in place)."""
    profile = replace(load_profile("mlx-cuda"), model_graph_cache_scope="generation", model_mlx_nodes=mlx_nodes)
    seen: list[str] = []
    commit = graph_cache.GraphCache.commit

    def logged(self: graph_cache.GraphCache) -> bool:
        new = commit(self)
        seen.append("I" if new else "U")
        return new

    commits: list[list[int]] = []
    graph_cache.GraphCache.commit = logged  # type: ignore[method-assign]
    try:
        replay(record(build_model(load_model_config(GEMMA_4B)), Workload(8192, 2), profile), profile, commits)
    finally:
        graph_cache.GraphCache.commit = commit  # type: ignore[method-assign]
    flags, at = [], 0
    for c in commits[:4]:
        flags.append("".join(seen[at:at + len(c)]))
        at += len(c)
    return commits[:4], flags


def test_gemma_3_4b_buffers_hold_mlxs_nodes() -> None:
    """Every command buffer of the four prompt chunks holds MLX's node count (67 buffers); counted one node per op and
    a copy per concatenation input, chunk 3 drifts off MLX's cuts from its tenth buffer on."""
    assert _played(True)[0] == _mlx_commits()
    before = _played(False)[0]
    assert before[2][:3] == _mlx_commits()[2][:3] and before[2] != _mlx_commits()[2]


def _mlx_instantiated() -> list[str]:
    """Per prompt chunk of the cold pass in ``device-time-trace.tar.xz`` (CUPTI), each graph launch: "I" where MLX
    instantiated a graph since the launch before, else "U"."""
    trace = read_trace(RUNS / "kernels" / "device-time-trace.tar.xz", "gemma4b")
    out = []
    for row in (r for r in trace.timing if r["run"] == 0):
        launches, made = trace.within(row)
        flags, last = "", 0.0
        for entered, *_ in launches:
            flags += "I" if any(last < a <= entered for a, _ in made) else "U"
            last = entered
        out.append(flags)
    return out


def test_gemma_3_4b_instantiates_the_graphs_mlx_instantiated() -> None:
    """MLX keys a graph by its nodes' types and dependencies (``CommandEncoder::commit``): the third chunk meets 6 of
    its 17 structures again, its sliding-window layers' as the second chunk cut them, and instantiates 11. kvsim's keys
    give that launch for launch in all four chunks (the third: "UUUIIIIIIIIIUUIUI"); one node per op, they found 9 of
    the third chunk's known and played it warm and deep."""
    real = _mlx_instantiated()
    assert _played(True)[1] == real
    assert real[2] == "UUUIIIIIIIIIUUIUI"
    assert _played(False)[1][2].count("U") > real[2].count("U")


@pytest.mark.parametrize(("name", "tokens"), [("pythia-160m", 1024), ("pythia-160m", 2048), ("gemma-2-2b-it", 6144)])
def test_first_evals_hold_mlxs_nodes(name: str, tokens: int) -> None:
    """``graph-commits-pythia.jsonl.xz``: pythia-160m rotates a quarter of each head's dimensions of parts of one
    split projection, which MLX can donate none of: its RoPE copies each part first (``rope.cu``), a node more for the
    queries and the keys, and the copied queries' layout makes the reshape after attention a copy too. Its first eval
    is MLX's three buffers of 101, 101 and 27 nodes (kvsim's two of 101 and 94 before). Gemma-2-2B's first 6K chunk
    is MLX's thirteen, node for node, and its third chunk MLX's 22 buffers (23 before)."""
    row = next(r for r in _dumped("graph-commits-pythia.jsonl.xz") if r["config"] == name and r["prompt_tokens"] == tokens)
    mlx = [_top_level(c) for c in row["evals"][0]["kernels_per_commit"]]
    nodes, buffers = _first_commits(name, tokens)
    assert nodes == mlx
    assert buffers == [e["commits"] for e in row["evals"]][:len(buffers)]
    assert _first_commits(name, tokens, mlx_nodes=False)[0] != mlx


def test_the_twenty_fourth_set_reads_as_it_was_predicted() -> None:
    """Eight prompts new to the stored runs, predicted before they were measured under D (shipped then) and under E (D
    with MLX's graph nodes, ``predictions/heldout24-e.jsonl``). D: 6 of 8 inside, out Gemma-3-4B at 6K (+19.1%) and
    pythia-160m at 2K (+37.5%). E: 7 of 8, Gemma-3-4B at 6K +5.4%; pythia-160m out as under D (its partial RoPE's
    copies, found in its graphs dumped after, were not in E yet)."""
    d, e = paired(24, ""), paired(24, "-e")
    assert outside(d) == ["gemma-3-4b-it:6144", "pythia-160m:2048"] and outside(e) == ["pythia-160m:2048"]
    assert round(errors(d)["gemma-3-4b-it:6144"], 3) == 0.191 and round(errors(e)["gemma-3-4b-it:6144"], 3) == 0.054


def test_the_twenty_fifth_set_reads_as_it_was_predicted() -> None:
    """Eight more prompts, predicted before they were measured under the shipped profile (E with a partial RoPE's
    copies, ``predictions/heldout25.jsonl``) and under D (``heldout25-d.jsonl``): E 8 of 8 inside, every error within
    10%; D 7 of 8, pythia-160m at 4K out (+31.0%; E +10.0%)."""
    e, d = paired(25, ""), paired(25, "-d")
    assert outside(e) == [] and outside(d) == ["pythia-160m:4096"]
    assert max(map(abs, errors(e).values())) < 0.101 and round(errors(d)["pythia-160m:4096"], 3) == 0.310


def test_the_shipped_profile_remakes_the_twenty_fifth_sets_predictions() -> None:
    """StableLM-2-1.6B at 4K, where D and E differ (12.60 and 12.01 GB; the run 12.01): the shipped profile predicts
    ``heldout25.jsonl``'s bytes, its first evals' ranges placed as they were then (0.375 below the point)."""
    ours, stored = remade("stablelm-2-1_6b", "heldout25.jsonl", profile_before_centred())
    assert ours == stored


def test_the_twenty_sixth_set_keeps_the_first_evals_host() -> None:
    """Eight one-chunk prompts (each its process's first eval), predicted before they were measured under the shipped
    profile and with the first eval on the later host's costs per op class (``model_first_eval_later_host``, candidate
    F, which had brought pythia-160m's 2K run inside): both 8 of 8, but F's points lie lower (point median 5.9% against
    3.0%, max 14.6% against 11.4%), so it stays off."""
    e, f = paired(26, ""), paired(26, "-f")
    assert outside(e) == outside(f) == []
    assert statistics.median(map(abs, errors(e).values())) < 0.031 < 0.058 < statistics.median(
        map(abs, errors(f).values()))
    assert not load_profile("mlx-cuda").model_first_eval_later_host
    ours, stored = remade("llama-3.2-1b-instruct", "heldout26-f.jsonl",
                          profile_before_centred(model_first_eval_later_host=True))
    assert ours == stored
