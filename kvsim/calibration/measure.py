"""The contract's reference workload (section 3) on real MLX: what `kvsim calibrate` measures."""

from __future__ import annotations

import gc
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvsim.scenario.parse import Scenario

CacheFactory = Callable[[Scenario, int], Any]


@dataclass(frozen=True, slots=True)
class StepMeasure:
    """Counters after one step, relative to the baseline."""

    tokens: int
    active_bytes: int
    cache_bytes: int
    peak_bytes: int
    wall_s: float


@dataclass(frozen=True, slots=True)
class Measurement:
    scenario_id: Any
    backend: str
    mlx_version: str
    cache_impl: str
    steps: tuple[StepMeasure, ...]

    @property
    def peak_bytes(self) -> int:
        return max(s.peak_bytes for s in self.steps)

    @property
    def final_active_bytes(self) -> int:
        return self.steps[-1].active_bytes


def mlx_backend_name() -> str:
    """``mlx-metal``, ``mlx-cuda`` or ``mlx-cpu`` for the current default device."""
    import mlx.core as mx

    if mx.default_device() == mx.cpu or not mx.is_available(mx.gpu):
        return "mlx-cpu"
    return "mlx-metal" if mx.metal.is_available() else "mlx-cuda"


def device_info() -> dict[str, Any]:
    """What the measurement ran on: backend, MLX version, chip, memory, OS."""
    import mlx.core as mx

    info: dict[str, Any] = {
        "backend": mlx_backend_name(),
        "mlx_version": mx.__version__,
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "python": platform.python_version(),
    }
    try:
        info["device"] = {k: v for k, v in mx.device_info().items() if isinstance(v, (str, int, float))}
    except Exception:  # noqa: BLE001 - device_info is absent on some builds
        info["device"] = {}
    try:
        import mlx_lm

        info["mlx_lm_version"] = mlx_lm.__version__
    except ImportError:
        info["mlx_lm_version"] = None
    return info


def measurable(scenario: Scenario) -> None:
    """Raise ``ValueError`` (one line) for layers the reference workload cannot build as MLX caches."""
    if scenario.model.kv_buffers != 2:
        raise ValueError(f"model.kv_buffers: the reference workload measures K and V caches, got {scenario.model.kv_buffers}")
    extra = next((lay.extra_row_bytes for lay in scenario.model.layers if lay.extra_row_bytes), 0)
    if extra:
        raise ValueError(f"extra_row_bytes: the reference workload has no companion cache, got {extra}")


def reference_cache(scenario: Scenario, layer_index: int) -> Any:
    """mlx-lm's own cache where it implements the layer's policy (the reference), else kvsim's.

    A sliding-window layer gets ``RotatingKVCache(max_size=window, keep=0)``, as mlx-lm's ``make_cache``
    builds it, unless the scenario runs its policy on windowed layers (``kvsim.scenario.layer``).
    """
    policy = scenario.policy_dict()
    try:
        from mlx_lm.models import cache as lm_cache
    except ImportError:
        lm_cache = None
    window = _rotating_window(scenario, layer_index)
    if window is not None:
        return lm_cache.RotatingKVCache(max_size=window, keep=0) if lm_cache is not None else kvsim_cache(scenario, layer_index)
    if lm_cache is not None and policy["name"] == "step":
        cache = lm_cache.KVCache()
        cache.step = policy.get("step", 256)  # the instance's, not the class's: other KVCaches keep 256
        return cache
    if lm_cache is not None and policy["name"] == "quantized":
        cache = lm_cache.QuantizedKVCache(group_size=policy.get("group_size", 64), bits=policy.get("bits", 8))
        cache.step = policy.get("step", 256)
        return cache
    return kvsim_cache(scenario, layer_index)


def kvsim_cache(scenario: Scenario, layer_index: int) -> Any:
    """kvsim's drop-in cache for the layer's policy (``policies.mlx.cache_for``)."""
    from policies.mlx import cache_for

    window = _rotating_window(scenario, layer_index)
    if window is not None:
        return cache_for({"name": "rotating", "max_size": window, "keep": 0})
    ratio = scenario.model.layers[layer_index].ratio
    return cache_for(scenario.policy_dict(), context_tokens=scenario.workload.total_tokens, ratio=ratio)


def _rotating_window(scenario: Scenario, layer_index: int) -> int | None:
    """The window of a layer that runs mlx-lm's rotating cache, else ``None``."""
    layer = scenario.model.layers[layer_index]
    return layer.window_rows if scenario.window_layers == "rotating" else None


def run_reference(scenario: Scenario, cache_factory: CacheFactory = reference_cache) -> Measurement:
    """Run the reference workload and read MLX's counters after every step."""
    import mlx.core as mx

    measurable(scenario)
    dtypes = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}
    w, layers = scenario.workload, scenario.model.layers
    gc.collect()  # arrays an earlier caller dropped in a reference cycle: freed now, not mid-run
    mx.clear_cache()
    pool = {
        shape: mx.random.normal((w.batch, shape[0], w.prefill_chunk, shape[1])).astype(dtypes[shape[2]])
        for shape in scenario.model.shapes()
    }
    mx.eval(list(pool.values()))
    mx.synchronize()
    mx.clear_cache()
    baseline = mx.get_active_memory()
    caches = [cache_factory(scenario, i) for i in range(len(layers))]
    collecting = gc.isenabled()
    gc.disable()  # a collection mid-run would free other arrays and move the counters
    try:
        with mx.stream(_fresh_stream(mx)):
            steps = _measure_steps(mx, scenario, caches, pool, baseline)
    finally:
        if collecting:
            gc.enable()
    impl = type(caches[0]).__module__ + "." + type(caches[0]).__name__
    return Measurement(scenario.id, mlx_backend_name(), mx.__version__, impl, tuple(steps))


def _fresh_stream(mx: Any) -> Any:
    """The CPU backend groups every 10 dispatches of a stream into one task, counting from the stream's
    first dispatch (``mlx/backend/cpu/encoder.h``), so a run on the default stream would start at a phase
    set by everything the process did before. A new stream starts every run at phase 0, as the model does."""
    return mx.new_stream(mx.cpu) if mlx_backend_name() == "mlx-cpu" else mx.default_stream(mx.default_device())


def _measure_steps(mx: Any, scenario: Scenario, caches: list[Any], pool: dict[Any, Any], baseline: int) -> list[StepMeasure]:
    """The contract's steps 3 and 4: every step's update, read, one ``mx.eval`` and the counters."""
    w, layers = scenario.workload, scenario.model.layers
    held = [0] * len(layers)
    steps: list[StepMeasure] = []
    start = 0
    for n in w.step_tokens():
        mx.reset_peak_memory()
        t0 = time.perf_counter()
        outs = []
        for i, (layer, cache) in enumerate(zip(layers, caches)):
            rows = layer.rows_in_step(start, n)
            held[i] += rows
            if held[i] == 0:
                continue
            src = pool[(layer.kv_heads, layer.head_dim, layer.dtype)]
            outs.append(_layer_step(mx, scenario.consumer, cache, src, rows))
        mx.eval(outs)
        mx.synchronize()
        wall = time.perf_counter() - t0
        active = mx.get_active_memory() - baseline
        steps.append(StepMeasure(n, active, mx.get_cache_memory(), mx.get_peak_memory() - baseline, wall))
        start += n
    return steps


def _layer_step(mx: Any, consumer: str, cache: Any, src: Any, rows: int) -> Any:
    """One layer's update (when it receives rows) and read, as the contract's step 3 says."""
    if rows > 0:
        keys, values = cache.update_and_fetch(src[:, :, :rows, :] * 0.5, src[:, :, :rows, :] * 0.25)
    else:
        keys, values = _held(cache)
    if consumer == "sdpa" and not isinstance(keys, tuple):
        q = src[:, :, : max(rows, 1), :] * 0.125
        mask = "causal" if rows > 1 else None
        return mx.fast.scaled_dot_product_attention(q, keys, values, scale=1.0, mask=mask).sum()
    return _last_row_sum(keys) + _last_row_sum(values)


def _last_row_sum(x: Any) -> Any:
    if isinstance(x, tuple):  # quantized (packed, scales, biases): every part is read
        total = x[0][:, :, -1, :].sum()
        for part in x[1:]:
            total = total + part[:, :, -1, :].sum()
        return total
    return x[:, :, -1, :].sum()


def _held(cache: Any) -> tuple[Any, Any]:
    """The rows a cache holds, without updating it (a compressed layer between rows)."""
    if hasattr(cache, "keys_and_values"):  # mlx-lm 0.32.2: state is (keys, values, offset[, ...])
        return cache.keys_and_values()
    keys, values = cache.state[:2]
    return keys, values
