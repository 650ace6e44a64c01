"""Copied layers (``kvsim.sim.layer_template``) and reused evaluation plans build and play exactly the
graphs ``Engine._add_layer`` builds layer by layer: every event, time and state identical."""

from __future__ import annotations

import pytest
import simpy

from kvsim.calibration.sweep import build_sweep
from kvsim.scenario.parse import parse_scenario
from kvsim.sim import eval_sim, step_cache
from kvsim.sim.engine import Engine
from kvsim.sim.profile import load_profile


class _LayerByLayer(Engine):
    """The engine as it was: every layer built by ``_add_layer``, no graph names a shape (no plan reused)."""

    def _add_layer_once(self, build, templates, i, st, rows, growth):  # noqa: ANN001, ANN202
        self._add_layer(build, i, st, rows, growth)


def _run(engine_class: type[Engine], sc: object, backend: str) -> Engine:
    env = simpy.Environment()
    engine = engine_class(sc, load_profile(backend), True)
    env.process(engine.run(env))
    env.run()
    return engine


def _preset(model: str, policy: dict, decode_tokens: int, backend: str = "mlx-cpu") -> object:
    return parse_scenario({"id": f"{model}-{policy['name']}", "model": {"preset": model}, "policy": policy,
                           "workload": {"prompt_tokens": 3000, "prefill_chunk": 1024, "decode_tokens": decode_tokens},
                           "backend": backend})


CASES = [(item.scenario, "mlx-cpu") for item in build_sweep("default")[::5]] + [
    (_preset("deepseek-v4-flash", {"name": "geometric", "seed_rows": 512, "cap": "context"}, 6000), "mlx-cpu"),
    (_preset("deepseek-v4-flash", {"name": "step", "step": 256}, 3000, "mlx-cuda"), "mlx-cuda"),
    (_preset("gemma-3-27b", {"name": "step", "step": 256}, 2000), "mlx-cpu"),
    (_preset("gpt-oss-20b", {"name": "paged", "block_rows": 256}, 2000), "mlx-cpu"),
    (_preset("qwen3.5-122b-a10b", {"name": "lowpeak"}, 2000, "mlx-cuda"), "mlx-cuda"),
    (_preset("llama-3.1-8b", {"name": "quantized", "bits": 4, "group_size": 64}, 1500), "mlx-cpu"),
]


@pytest.mark.parametrize(("sc", "backend"), CASES, ids=lambda x: getattr(x, "id", x))
def test_copied_layers_play_exactly_as_layers_built_one_by_one(sc: object, backend: str) -> None:
    eval_sim.clear_plans()
    plain = _run(_LayerByLayer, sc, backend)
    copied = _run(Engine, sc, backend)
    assert copied.timeline == plain.timeline
    assert copied.events == plain.events  # times included: the same ops in the same order
    assert (copied.decode_s, copied.growth_s) == (plain.decode_s, plain.growth_s)
    assert (copied.grow_events, copied.bytes_copied) == (plain.grow_events, plain.bytes_copied)
    assert step_cache.capture(copied) == step_cache.capture(plain)
