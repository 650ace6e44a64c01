"""The simulator's step graphs against the graphs real MLX builds for the same steps.

Each step of the reference workload is built with the calibration's own code
(``kvsim.calibration.measure``) and real caches, written out with ``mx.export_to_dot`` before it is
evaluated, and its primitives counted; the simulator's tape for the same step must hold the
same primitives, as many of each. Dispatch counts set when the CPU worker's tasks complete,
so a missing node moves every later free.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from kvsim.calibration.measure import _layer_step, reference_cache
from kvsim.scenario.parse import parse_scenario
from kvsim.sim import eval_sim
from kvsim.sim.engine import Engine
from kvsim.sim.profile import load_profile
from kvsim.sim.tape import execution_order

mx = pytest.importorskip("mlx.core")

CASES = {
    "quantized-8bit": ({"name": "quantized"}, "last_row"),  # the packed sum is cast before the first add
    "quantized-4bit-step128": ({"name": "quantized", "bits": 4, "step": 128}, "last_row"),
    "step": ({"name": "step"}, "last_row"),
    "step-sdpa": ({"name": "step"}, "sdpa"),
}


def real_primitives(dot: Path) -> Counter[str]:
    return Counter(re.findall(r'label ="([A-Za-z]+)', dot.read_text()))


@pytest.mark.parametrize("name", sorted(CASES))
def test_step_graphs_hold_mlx_primitives(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy, consumer = CASES[name]
    scenario = parse_scenario({
        "id": name, "model": {"n_layers": 2, "kv_heads": 2, "head_dim": 128, "dtype": "float16"},
        "policy": policy, "consumer": consumer,
        "workload": {"prompt_tokens": 700, "prefill_chunk": 300, "decode_tokens": 3, "batch": 1},
    }, "mlx-cpu")
    graphs = []
    real_eval = eval_sim.run_eval

    def keep_graph(g, *args, **kwargs):  # noqa: ANN001, ANN202 - a pass-through spy
        graphs.append(g)
        return real_eval(g, *args, **kwargs)

    monkeypatch.setattr("kvsim.sim.engine.run_eval", keep_graph)
    engine = Engine(scenario, load_profile("mlx-cpu"), record_events=False)
    layers = scenario.model.layers
    caches = [reference_cache(scenario, i) for i in range(len(layers))]
    pool = mx.random.normal((1, 2, 300, 128)).astype(mx.float16)
    mx.eval(pool)
    start = 0
    for i, n in enumerate(scenario.workload.step_tokens()):
        outs = [_layer_step(mx, consumer, cache, pool, layer.rows_in_step(start, n)) for layer, cache in zip(layers, caches)]
        dot = tmp_path / f"step{i}.dot"
        mx.export_to_dot(str(dot), *outs)
        mx.eval(outs)
        engine.step(start, n)
        g = graphs[-1]
        simulated = Counter(g.arrays[a].prim for a in execution_order(g.arrays, g.outputs))
        assert simulated == real_primitives(dot), (i, n)
        start += n
