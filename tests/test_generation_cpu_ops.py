"""kvsim generate on the CPU: the traced graph allocates what MLX allocates, op by op, and the stored real
generations that exposed the missing allocations are predicted within 3% (issue #17).

Per op: one forward of a scaled one-layer model is run in real MLX with every intercepted op evaluated alone
(its inputs evaluated first, ``mx.reset_peak_memory()`` before, ``mx.get_peak_memory()`` above the active
memory after; compile off, ``mx.fast`` ops as their fallback graphs), and traced by ``kvsim.generation.trace``;
the bytes each call allocates must equal the bytes of the nodes the trace made for it, within ``SLACK`` (in-place
ops excepted: real MLX donates there, which the simulator decides when it plays the graph).
"""

from __future__ import annotations

import json
from typing import Any

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten, tree_map
from mlx_lm.models.cache import make_prompt_cache

from kvsim.core.paths import REPO_DATA_DIR
from kvsim.generation import repeats
from kvsim.generation import trace as tr
from kvsim.generation.config import ModelConfig, load_model_config
from kvsim.generation.measure import scale_config
from kvsim.generation.model import build_model
from kvsim.generation.op_bytes import measuring_ops
from kvsim.generation.predict import predict
from kvsim.generation.schedule import Workload
from kvsim.sim.graph import VIEW_PRIMS

SCALE = {"hidden_size": 256, "intermediate_size": 768, "vocab_size": 8192}
SLACK = 4096
"""Bytes an op may allocate beyond the trace's: the CPU ``GatherQMM`` copies its 1 KiB of expert indices."""
RUNS = REPO_DATA_DIR / "generation" / "mlx-cpu-0.32.4"


def _traced_bytes(name: str, config: dict, tokens: mx.array) -> list[tuple[str, int]]:
    """(op, bytes of the non-view nodes the trace made for it) per intercepted call."""
    built = build_model(ModelConfig(config, name))
    cache = make_prompt_cache(built.model)
    log: list[tuple[str, int]] = []
    record = tr._record

    def logged(t: tr.Trace, op: str, args: tuple, kwargs: dict, out: Any) -> None:
        first = len(t.graph.arrays)
        record(t, op, args, kwargs, out)
        log.append((op, sum(a.nbytes for a in t.graph.arrays[first:] if a.prim and a.prim not in VIEW_PRIMS)))

    tr._record = logged
    key, repeats.call_key = repeats.call_key, lambda *a: object()  # every compiled call traced op by op
    try:
        with tr.tracing("fallback", cpu=True) as t:
            t.register_leaves([v for _, v in tree_flatten(built.model.parameters())])
            built.model(tokens, cache=cache)
    finally:
        tr._record, repeats.call_key = record, key
    return log


def _real_bytes(name: str, config: dict, tokens: mx.array) -> list[tuple[str, int]]:
    """(op, bytes real MLX allocates evaluating it alone) per call of the same forward (``op_bytes``)."""
    mx.random.seed(0)
    model = build_model(ModelConfig(config, name), stand_in=False).model
    # dense parameters, as a loaded checkpoint holds them (mamba's A_log is a lazy broadcast after __init__)
    model.update(tree_map(mx.contiguous, model.parameters()))
    mx.eval(model.parameters())
    cache = make_prompt_cache(model)
    with measuring_ops(fast_fallbacks=True) as log:
        model(tokens, cache=cache)
    return [(op, nbytes) for op, nbytes, _ in log]


@pytest.mark.parametrize("name", ["gpt2", "gpt-oss-20b", "lfm2-1.2b", "mamba-130m-hf", "phi-2"])
def test_each_op_allocates_what_mlx_allocates(name: str):
    """gpt2: split k/v copied by the matmul; gpt-oss: probabilities sliced past the sink column, copied;
    lfm2 and mamba: the grouped conv1d's float32 temporaries; mamba: ``+=``; phi-2: float16 caches cast."""
    layers = 2 if name in ("lfm2-1.2b", "gpt-oss-20b") else 1  # both kinds of layer (conv or sliding, attention)
    widths = {**SCALE, **({"hidden_size": 320} if name == "phi-2" else {})}  # phi's partial rotary
    config = scale_config(load_model_config(name).config, layers, **widths)
    tokens = mx.zeros((1, 128), mx.uint32)
    mx.eval(tokens)
    traced, real = _traced_bytes(name, config, tokens), _real_bytes(name, config, tokens)
    assert [op.split(".")[-1] for op, _ in traced] == [op for op, _ in real]
    wrong = [(op, r, k) for (op, k), (_, r) in zip(traced, real) if op not in tr.IN_PLACE and abs(r - k) > SLACK]
    assert not wrong
    assert sum(k for _, k in traced) > 0


STORED = [("heldout", "gpt-oss-20b", 2048), ("heldout", "mamba-130m-hf", 1024), ("heldout", "phi-2", 1024),
          ("validation", "gpt2", 2048), ("validation", "stablelm-2-1_6b", 2048)]
"""Runs kvsim under-predicted before the trace allocated as MLX does (docs/generation.md): -20.9%, -22.7%,
-4.3%, -0.0% (gpt2 2048 moved with the fused gelu), -3.4%."""


@pytest.mark.parametrize(("split", "name", "prompt_tokens"), STORED)
def test_stored_cpu_runs_within_3_percent(split: str, name: str, prompt_tokens: int):
    rows = [json.loads(line) for line in (RUNS / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()]
    r = next(r for r in rows if r["name"] == name and r["prompt_tokens"] == prompt_tokens)
    built = build_model(ModelConfig(r["config"], r["name"]))
    p = predict(built, Workload(r["prompt_tokens"], r["max_tokens"], r["prefill_step_size"]), "mlx-cpu")
    assert p.weights_bytes == r["params_bytes"] and p.kv_bytes == r["kv_bytes"]
    assert abs(p.peak_bytes / r["peak_bytes"] - 1) <= 0.03, (p.peak_bytes, r["peak_bytes"])


@pytest.mark.parametrize("name", ["llama-3.2-1b-instruct", "gemma-3-1b-it"])
def test_a_view_does_not_hold_its_input(name: str):
    """``cpu/eval.cpp`` keeps an op's inputs alive until its task runs, except a buffer the output shares: a
    reshape's input is not held, so the compiled ``swiglu`` reading the gate projection through the matmul's
    unflattening reshape may donate it (llama: three intermediates, not four). Gemma's shapeless
    ``gelu_approx`` does not donate either way. The MLP alone, after its input is evaluated: real peak above
    the active memory equals kvsim's play of the same call (to 64 B: constants a compiled kernel allocates)."""
    config = scale_config(load_model_config(name).config, 1, **SCALE)
    peaks = {}
    for kind in ("real", "kvsim"):
        mx.random.seed(0)
        built = build_model(ModelConfig(config, name), stand_in=kind == "kvsim")
        model = built.model
        mlp = model.model.layers[0].mlp
        tokens = mx.zeros((1, 511), mx.uint32)
        if kind == "real":
            mx.eval(model.parameters())
            h = model.model.embed_tokens(tokens)
            mx.eval(h)
            mx.synchronize()
            mx.clear_cache()
            base = mx.get_active_memory()
            mx.reset_peak_memory()
            mx.eval(mlp(h))
            mx.synchronize()
            peaks[kind] = mx.get_peak_memory() - base
        else:
            from kvsim.generation.schedule import Playback, generation_profile
            from kvsim.sim.profile import load_profile

            profile = generation_profile(load_profile("mlx-cpu"))
            with tr.tracing(profile.sdpa_kernels, cpu=True) as t:
                pb = Playback(0, profile, t, make_prompt_cache(model))
                t.register_leaves([v for _, v in tree_flatten(model.parameters())])
                h = model.model.embed_tokens(tokens)
                pb.on_eval([h])
                pb.on_eval([mlp(h)])
                e = pb.evals[-1]
                peaks[kind] = e.peak_bytes - e.kv_before_bytes
    intermediate = 511 * SCALE["intermediate_size"] * 2  # bfloat16
    hidden = 511 * SCALE["hidden_size"] * 2
    donated = name.startswith("llama")
    assert abs(peaks["real"] - ((2 + (not donated)) * intermediate + hidden)) <= 64  # + a compiled scalar or two
    assert abs(peaks["kvsim"] - peaks["real"]) <= 64


def test_cpu_dispatches_follow_eval_cpu():
    """Each traced node counts the dispatches MLX's CPU ``eval_cpu`` makes before its holder: ``addmm`` copies
    ``c`` then runs the GEMM (2), ``mean`` is ``multiply(sum(a), 1/n)`` (sum, its holder, multiply: 3),
    ``concatenate`` copies each input (3 inputs: 3), an add one; on a GPU profile every node counts one. A
    matmul operand it cannot read in place is copied inside the matmul's own ``eval_cpu`` (``matmul_general``),
    under the matmul's holder: its node adds no dispatch of its own on the CPU."""
    a, b, c = mx.zeros((4, 8)), mx.zeros((4, 8)), mx.zeros((4, 4))
    mx.eval(a, b, c)
    for cpu, want in ((True, [2, 3, 3, 1]), (False, [1, 1, 1, 1])):
        with tr.tracing("fallback", cpu=cpu) as t:
            outs = [mx.addmm(c, a, b.T), mx.mean(a, axis=-1), mx.concatenate([a, b, a]), a + b]
            assert [t.graph.arrays[t.node(o)].kernels for o in outs] == want
            product = t.node(mx.matmul(a[:, ::2], mx.zeros((4, 3))))
            copies = [t.graph.arrays[i] for i in t.graph.arrays[product].inputs if t.graph.arrays[i].prim == "Copy"]
            assert [c.kernels for c in copies] == [0 if cpu else 1]
