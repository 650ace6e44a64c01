"""Sessions sharing one allocator (``kvsim.api.simulate_sessions``) against real MLX on the CPU: three
caches' reference workloads interleaved in one process, step i of each in turn, one ``mx.eval`` each."""

from __future__ import annotations

import gc

import mlx.core as mx
import pytest

from kvsim.api import simulate, simulate_sessions
from kvsim.calibration.measure import _layer_step, reference_cache
from kvsim.calibration.sweep import build_sweep
from kvsim.scenario.parse import Scenario

SESSION_IDS = (  # three caches (step, geometric, lowpeak), batches 2, 4, 2
    "step256-l12-kv8h64-b2-p1024c256-d200",
    "geom256x2-l12-kv8h64-b4-p800c300-d200",
    "lowpeak-l12-kv8h64-b2-p1024c256-d200",
)
DTYPES = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}


def measure_interleaved(scenarios: list[Scenario]) -> tuple[int, int]:
    """Shared peak and final active bytes over the pools' baseline, as ``run_reference`` reads them."""
    gc.collect()
    mx.clear_cache()
    pools = [{shape: mx.random.normal((sc.workload.batch, shape[0], sc.workload.prefill_chunk, shape[1]))
              .astype(DTYPES[shape[2]]) for shape in sc.model.shapes()} for sc in scenarios]
    mx.eval([a for pool in pools for a in pool.values()])
    mx.synchronize()
    mx.clear_cache()
    baseline = mx.get_active_memory()
    caches = [[reference_cache(sc, i) for i in range(len(sc.model.layers))] for sc in scenarios]
    plans = [sc.workload.step_tokens() for sc in scenarios]
    starts, held = [0] * len(scenarios), [[0] * len(sc.model.layers) for sc in scenarios]
    outs: list[list] = [[] for _ in scenarios]
    peak = 0
    gc.disable()
    try:
        with mx.stream(mx.new_stream(mx.cpu)):  # one fresh stream for all sessions (dispatch phase 0)
            for step in range(max(map(len, plans))):
                for s, sc in enumerate(scenarios):
                    if step >= len(plans[s]):
                        continue
                    n = plans[s][step]
                    mx.reset_peak_memory()
                    outs[s] = []
                    for i, (layer, cache) in enumerate(zip(sc.model.layers, caches[s])):
                        rows = layer.rows_in_step(starts[s], n)
                        held[s][i] += rows
                        if held[s][i]:
                            src = pools[s][(layer.kv_heads, layer.head_dim, layer.dtype)]
                            outs[s].append(_layer_step(mx, sc.consumer, cache, src, rows))
                    mx.eval(outs[s])
                    mx.synchronize()
                    peak = max(peak, mx.get_peak_memory() - baseline)
                    starts[s] += n
    finally:
        gc.enable()
    return peak, mx.get_active_memory() - baseline


def test_shared_peak_matches_real_mlx_where_the_sum_of_solo_peaks_does_not() -> None:
    if mx.default_device() != mx.cpu and mx.is_available(mx.gpu):
        pytest.skip("the shipped mlx-cpu profile describes MLX's CPU backend")
    sweep = {item.scenario.id: item.scenario for item in build_sweep("default", "mlx-cpu")}
    scenarios = [sweep[sid] for sid in SESSION_IDS]
    measured_peak, measured_active = measure_interleaved(scenarios)
    predicted = simulate_sessions(scenarios)
    solo_sum = sum(simulate(sc, record_events=False).summary.peak_bytes for sc in scenarios)
    print(f"MLX {mx.__version__}: measured shared peak {measured_peak} B, predicted {predicted.peak_bytes} B "
          f"(off by {predicted.peak_bytes - measured_peak} B); sum of solo peaks {solo_sum} B "
          f"({solo_sum / measured_peak - 1:+.0%}); final active measured {measured_active} B, "
          f"predicted {predicted.final_active_bytes} B")
    # Measured (MLX 0.32.4, a loaded 2-core CPU): every step's peak within 60 B except the step session's
    # first growth (token 1024), where MLX peaked 5.2 to 7.9 MB below the prediction and varied between runs
    # (261,136,440 and 258,515,000 B against 266,379,360 B): timing-dependent, open. Solo, each is exact.
    assert abs(predicted.peak_bytes - measured_peak) <= 0.05 * measured_peak
    assert predicted.final_active_bytes == measured_active
    assert solo_sum > 1.2 * measured_peak  # sessions do not all peak at once: summing solo peaks overstates
    assert predicted.steps == tuple(len(sc.workload.step_tokens()) for sc in scenarios)


def test_sessions_need_one_backend() -> None:
    sweep = build_sweep("tiny", "mlx-cpu")
    cuda = build_sweep("tiny", "mlx-cuda")
    with pytest.raises(ValueError, match="^scenarios: .*one backend"):
        simulate_sessions([sweep[0].scenario, cuda[0].scenario])
    with pytest.raises(ValueError, match="^scenarios: .*no session"):
        simulate_sessions([])
