"""cuBLASLt matmul workspaces: the table the H200 probes measured, and how the model uses it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvsim.core.paths import REPO_DATA_DIR
from kvsim.scenario.parse import parse_scenario
from kvsim.scenario.spec import DTYPE_BYTES
from kvsim.sim.allocator import Allocator, rounded_size
from kvsim.sim.engine import Engine
from kvsim.sim.eval_sim import Buffers, EvalState, run_eval
from kvsim.sim.graph import StepGraph
from kvsim.sim.profile import load_profile
from kvsim.sim.workspace import (
    DATA_DIR,
    WorkspaceTable,
    load_workspace_table,
    pitch_alignment_bytes,
    probe_workspace_bytes,
    read_probe_records,
)

CUDA = load_profile("mlx-cuda")


@pytest.fixture(scope="module")
def table() -> WorkspaceTable:
    return load_workspace_table(CUDA.matmul_workspace)


def test_pitch_alignment() -> None:
    assert [pitch_alignment_bytes(r, 2) for r in (1676, 1677, 1678, 1680, 8)] == [8, 2, 4, 16, 16]
    assert [pitch_alignment_bytes(r, 4) for r in (3270, 3271, 750, 3000)] == [8, 4, 8, 16]


def test_the_probes_were_measured_with_the_profiles_mlx(table: WorkspaceTable) -> None:
    assert table.mlx_version == CUDA.mlx_version
    assert sum(len(p) for p in table.points.values()) > 50_000


def test_measured_shapes_are_reproduced(table: WorkspaceTable) -> None:
    for rec in read_probe_records(next(DATA_DIR.glob(CUDA.matmul_workspace.replace("*-workspace*", "*-workspace-align"))))[::97]:
        assert table.bytes_for(rec["op"], rec["dtype"], rec["batch_heads"], rec["head_dim"], rec["q_rows"],
                               rec["k_rows"]) == probe_workspace_bytes(rec)


def test_unaligned_keys_take_other_kernels(table: WorkspaceTable) -> None:
    """The measurement behind the alignment key: 1,536 float16 keys need no workspace at 140
    query rows and head_dim 512; 1,537 (a 2-byte row pitch) need megabytes."""
    assert table.bytes_for("pv", "float16", 1, 512, 140, 1536) == 0
    assert table.bytes_for("pv", "float16", 1, 512, 140, 1537) > 4 << 20


def test_lookup_on_shapes_drawn_at_random() -> None:
    """Built from the grids and every other of 40,000 random single-head shapes, the lookup
    predicts the rest: it misses by under 22% of their total workspace (19.2% measured; cuBLAS's
    choice jumps between neighbouring shapes) and their total by under 2% (0.25%)."""
    grids = [rec for path in sorted(DATA_DIR.glob(CUDA.matmul_workspace)) if "random" not in path.name
             for rec in read_probe_records(path)]
    drawn = read_probe_records(next(DATA_DIR.glob(CUDA.matmul_workspace.replace("*-workspace*", "*-workspace-random"))))
    assert len(drawn) == 40_000
    half = WorkspaceTable.from_records(grids + drawn[::2], CUDA.mlx_version)
    test = drawn[1::2]
    measured = [probe_workspace_bytes(r) for r in test]
    predicted = [half.bytes_for(r["op"], r["dtype"], 1, r["head_dim"], r["q_rows"], r["k_rows"]) for r in test]
    assert sum(measured) > 10 << 30
    assert sum(abs(p - m) for p, m in zip(predicted, measured)) < 0.22 * sum(measured)
    assert abs(sum(predicted) / sum(measured) - 1) < 0.02


def test_batched_matmuls_never_take_single_head_workspaces(table: WorkspaceTable) -> None:
    """No batched probe took over 256 bytes, even where single-head shapes take megabytes."""
    assert table.bytes_for("pv", "float16", 1, 512, 140, 1537) > 4 << 20
    for op in ("pv", "qk"):
        for dtype in ("float16", "bfloat16", "float32"):
            assert table.bytes_for(op, dtype, 2, 512, 140, 1537) <= 256


def test_a_mixed_version_probe_set_is_refused(tmp_path, monkeypatch) -> None:
    import kvsim.sim.workspace as ws

    rec = {"probe": "workspace", "op": "pv", "dtype": "float32", "batch_heads": 1, "q_rows": 4, "k_rows": 16,
           "head_dim": 64, "out_bytes": 1024, "peak_above_inputs": 1024}
    (tmp_path / "a-workspace-probe.jsonl").write_text(json.dumps({**rec, "mlx": "0.32.4"}) + "\n")
    (tmp_path / "b-workspace-probe.jsonl").write_text(json.dumps({**rec, "mlx": "0.31.0"}) + "\n")
    monkeypatch.setattr(ws, "DATA_DIR", tmp_path)
    with pytest.raises(ValueError, match="mix MLX versions"):
        ws.load_workspace_table.__wrapped__("*-workspace-probe.jsonl")
    with pytest.raises(ValueError, match="no probe file matches"):
        ws.load_workspace_table.__wrapped__("nothing-*.jsonl")


def test_fallback_attention_holds_the_workspace_until_its_buffer_completes() -> None:
    """A single-head float16 cache of head_dim 512 reads through MLX's fallback matmuls; with
    1,537 keys their workspaces, both held to the end of the one command buffer, lift the prefill
    step's peak by what the table gives."""
    scenario = parse_scenario({
        "id": "ws", "backend": "mlx-cuda", "consumer": "sdpa", "policy": {"name": "full"},
        "model": {"layers": [{"kv_heads": 1, "head_dim": 512, "dtype": "float16"}]},
        "workload": {"prompt_tokens": 1537, "prefill_chunk": 1537, "decode_tokens": 1, "batch": 1},
    })
    peaks = {}
    for name, profile in (("with", CUDA), ("without", replace(CUDA, matmul_workspace=""))):
        engine = Engine(scenario, profile, record_events=False)
        peaks[name] = engine.step(0, 1537).peak_bytes
    table = load_workspace_table(CUDA.matmul_workspace)
    pv, qk = (table.bytes_for(op, "float16", 1, 512, 1537, 1537) for op in ("pv", "qk"))
    assert pv > 0
    assert peaks["with"] - peaks["without"] == rounded_size(CUDA, pv) + rounded_size(CUDA, qk)


def test_a_profile_of_another_mlx_version_is_refused() -> None:
    scenario = parse_scenario({"id": "v", "backend": "mlx-cuda", "consumer": "sdpa",
                               "model": {"n_layers": 1, "kv_heads": 1, "head_dim": 64},
                               "policy": {"name": "full"},
                               "workload": {"prompt_tokens": 8, "prefill_chunk": 8, "decode_tokens": 1, "batch": 1}})
    with pytest.raises(ValueError, match="matmul_workspace: probes measured MLX 0.32.4"):
        Engine(scenario, replace(CUDA, mlx_version="0.40.0"), record_events=False)


STACKED = REPO_DATA_DIR / "probes" / "mlx-cuda-0.32.4-20261129-stacked-matmuls-probe.jsonl"


def simulated_stack_peak_bytes(rec: dict, table: WorkspaceTable) -> int:
    """The model's peak above the inputs of ``rec["n"]`` independent matmuls of one shape in one
    ``mx.eval``, each holding the workspace the table gives its shape until the buffer completes."""
    g, leaves, buffers = StepGraph(), {}, Buffers(Allocator(CUDA))
    itemsize = DTYPE_BYTES[rec["dtype"]]
    q, k, d = rec["q_rows"], rec["k_rows"], rec["head_dim"]
    a_bytes, b_bytes = (q * k, k * d) if rec["op"] == "pv" else (q * d, k * d)
    for _ in range(rec["n"]):
        a, b = (g.leaf(n * itemsize, buffers.new(n * itemsize, 0.0, refs=1)) for n in (a_bytes, b_bytes))
        leaves.update({a: g.arrays[a].buffer_id, b: g.arrays[b].buffer_id})
        out = g.op("Matmul", [a, b if rec["op"] == "pv" else g.view("Transpose", b)], rec["out_bytes"])
        ws = table.bytes_for(rec["op"], rec["dtype"], 1, d, q, k)
        g.arrays[out].gpu_temps_bytes = (ws,) if ws else ()
        g.outputs.append(out)
    base = buffers.alloc.active_bytes
    buffers.alloc.peak_bytes = base
    run_eval(g, leaves, buffers, CUDA, EvalState())
    return buffers.alloc.peak_bytes - base


def test_workspaces_of_one_command_buffer_add_up(table: WorkspaceTable) -> None:
    """N matmuls evaluated together peak at N x (output + workspace) on the H200, N = 1..32
    (``docs/tools/device/device_probe.py workspace-stack``): each holds its own workspace until the command
    buffer completes. The model holds them the same way: within 7% (the lookup's error for one op;
    exact where the shape was measured)."""
    records = [json.loads(line) for line in STACKED.read_text().splitlines()]
    assert len(records) == 36 and {r["mlx"] for r in records} == {CUDA.mlx_version}
    one = {(r["op"], r["dtype"], r["q_rows"], r["k_rows"], r["head_dim"]): r["peak_above_inputs"] for r in records if r["n"] == 1}
    for rec in records:
        per_op = one[(rec["op"], rec["dtype"], rec["q_rows"], rec["k_rows"], rec["head_dim"])]
        assert rec["peak_above_inputs"] == rec["n"] * per_op  # measured: they add up exactly
        simulated = simulated_stack_peak_bytes(rec, table)
        assert abs(simulated - rec["peak_above_inputs"]) <= 0.1 * rec["peak_above_inputs"], rec
